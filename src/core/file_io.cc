#include "core/file_io.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

namespace spot {
namespace {

Status ErrnoStatus(std::string_view what, const std::string& path, int err) {
  std::string m = std::string(what) + " " + path + ": " + std::strerror(err);
  if (err == ENOENT) return NotFoundError(std::move(m));
  return UnavailableError(std::move(m));
}

Status WriteAll(int fd, std::string_view data, const std::string& path) {
  while (!data.empty()) {
    ssize_t n = ::write(fd, data.data(), data.size());
    if (n < 0) {
      if (errno == EINTR) continue;
      return ErrnoStatus("writing", path, errno);
    }
    data.remove_prefix(static_cast<size_t>(n));
  }
  return Status::Ok();
}

}  // namespace

Result<std::string> ReadFile(const std::string& path) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return ErrnoStatus("opening", path, errno);
  std::string out;
  off_t size = ::lseek(fd, 0, SEEK_END);
  if (size > 0) out.reserve(static_cast<size_t>(size));
  ::lseek(fd, 0, SEEK_SET);
  char buf[1 << 16];
  for (;;) {
    ssize_t n = ::read(fd, buf, sizeof(buf));
    if (n < 0) {
      if (errno == EINTR) continue;
      int err = errno;
      ::close(fd);
      return ErrnoStatus("reading", path, err);
    }
    if (n == 0) break;
    out.append(buf, static_cast<size_t>(n));
  }
  ::close(fd);
  return out;
}

Status SyncDirectory(const std::string& dir) {
  int fd = ::open(dir.empty() ? "." : dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return ErrnoStatus("opening directory", dir, errno);
  int rc = ::fsync(fd);
  int err = errno;
  ::close(fd);
  if (rc != 0) return ErrnoStatus("syncing directory", dir, err);
  return Status::Ok();
}

Status CreateDirectories(const std::string& dir) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) return UnavailableError("creating directory " + dir + ": " + ec.message());
  return Status::Ok();
}

Status WriteFileAtomically(const std::string& path, std::span<const std::string_view> pieces) {
  std::filesystem::path final_path(path);
  std::string dir = final_path.parent_path().string();
  std::string tmp = (final_path.parent_path() /
                     (std::string(kTempFilePrefix) + final_path.filename().string() + "." +
                      std::to_string(::getpid())))
                        .string();
  int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return ErrnoStatus("creating", tmp, errno);
  Status st;
  for (std::string_view piece : pieces) {
    st = WriteAll(fd, piece, tmp);
    if (!st.ok()) break;
  }
  if (st.ok() && ::fsync(fd) != 0) st = ErrnoStatus("syncing", tmp, errno);
  if (::close(fd) != 0 && st.ok()) st = ErrnoStatus("closing", tmp, errno);
  if (st.ok() && ::rename(tmp.c_str(), path.c_str()) != 0) {
    st = ErrnoStatus("renaming to", path, errno);
  }
  if (!st.ok()) {
    ::unlink(tmp.c_str());
    return st;
  }
  return SyncDirectory(dir);
}

Status WriteFileAtomically(const std::string& path, std::string_view contents) {
  std::string_view pieces[] = {contents};
  return WriteFileAtomically(path, pieces);
}

}  // namespace spot
