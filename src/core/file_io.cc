#include "core/file_io.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
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

// What a file that is not a regular one is, for messages.
const char* FileKind(mode_t mode) {
  if (S_ISDIR(mode)) return "a directory";
  if (S_ISFIFO(mode)) return "a named pipe (FIFO)";
  if (S_ISCHR(mode)) return "a character device";
  if (S_ISBLK(mode)) return "a block device";
  if (S_ISSOCK(mode)) return "a socket";
  return "not a regular file";
}

Status NotRegular(const std::string& path, mode_t mode) {
  return InvalidArgumentError(path + ": is " + FileKind(mode) + ", expected a regular file");
}

// An open regular file, closed on destruction. Open never blocks: a FIFO is
// opened with O_NONBLOCK (and refused), a directory or a device is refused
// before anything is read from it (lseek on an ext4 directory reports a size
// of 2^63 - 1; /dev/zero never ends).
struct RegularFile {
  int fd = -1;
  off_t size = 0;

  static Result<RegularFile> Open(const std::string& path) {
    RegularFile f;
    struct stat st;
    f.fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
    if (f.fd < 0) {
      const int err = errno;  // ENXIO: a socket, which open refuses
      if (err == ENXIO && ::stat(path.c_str(), &st) == 0) return NotRegular(path, st.st_mode);
      return ErrnoStatus("opening", path, err);
    }
    if (::fstat(f.fd, &st) != 0) return ErrnoStatus("inspecting", path, errno);
    if (!S_ISREG(st.st_mode)) return NotRegular(path, st.st_mode);
    const int flags = ::fcntl(f.fd, F_GETFL);
    if (flags < 0 || ::fcntl(f.fd, F_SETFL, flags & ~O_NONBLOCK) != 0) {
      return ErrnoStatus("opening", path, errno);
    }
    f.size = st.st_size;
    return f;
  }
  RegularFile() = default;
  RegularFile(RegularFile&& o) noexcept : fd(std::exchange(o.fd, -1)), size(o.size) {}
  RegularFile& operator=(RegularFile&&) = delete;
  ~RegularFile() {
    if (fd >= 0) ::close(fd);
  }
};

Status TooLarge(const std::string& path, uint64_t size, uint64_t max_bytes) {
  return InvalidArgumentError(path + ": too large (" + std::to_string(size) + " bytes; at most " +
                              std::to_string(max_bytes) + " are read from a file of this kind)");
}

}  // namespace

Result<std::string> ReadFile(const std::string& path, uint64_t max_bytes) {
  SPOT_ASSIGN_OR_RETURN(RegularFile file, RegularFile::Open(path));
  const uint64_t size = static_cast<uint64_t>(file.size);
  if (size > max_bytes) return TooLarge(path, size, max_bytes);
  std::string out;
  out.reserve(static_cast<size_t>(size));
  char buf[1 << 16];
  for (;;) {
    ssize_t n = ::read(file.fd, buf, sizeof(buf));
    if (n < 0) {
      if (errno == EINTR) continue;
      return ErrnoStatus("reading", path, errno);
    }
    if (n == 0) break;
    out.append(buf, static_cast<size_t>(n));
    // The file may grow while it is read.
    if (out.size() > max_bytes) return TooLarge(path, out.size(), max_bytes);
  }
  return out;
}

Result<AppendLog> AppendLog::Open(const std::string& path) {
  AppendLog log;
  if (path.empty()) return log;
  log.file_ = std::fopen(path.c_str(), "a");
  if (!log.file_) return ErrnoStatus("opening for appending", path, errno);
  log.path_ = path;
  std::setvbuf(log.file_, nullptr, _IOLBF, 1 << 12);  // whole lines, as they happen
  return log;
}

AppendLog& AppendLog::operator=(AppendLog&& o) noexcept {
  if (this != &o) {
    if (file_) std::fclose(file_);
    file_ = std::exchange(o.file_, nullptr);
    path_ = std::move(o.path_);
  }
  return *this;
}

AppendLog::~AppendLog() {
  if (file_) std::fclose(file_);
}

void AppendLog::Append(std::string_view line) {
  if (file_) std::fwrite(line.data(), 1, line.size(), file_);
}

Status AppendLog::Sync() {
  if (!file_) return Status::Ok();
  if (std::fflush(file_) != 0 || ::fsync(::fileno(file_)) != 0) {
    return ErrnoStatus("writing", path_, errno);
  }
  return Status::Ok();
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

Result<AtomicFileWriter> AtomicFileWriter::Create(const std::string& path) {
  std::filesystem::path final_path(path);
  std::string tmp =
      (final_path.parent_path() / (std::string(kTempFilePrefix) + final_path.filename().string() +
                                   "." + std::to_string(::getpid())))
          .string();
  int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return ErrnoStatus("creating", tmp, errno);
  return AtomicFileWriter(path, std::move(tmp), fd);
}

AtomicFileWriter::AtomicFileWriter(AtomicFileWriter&& o) noexcept
    : path_(std::move(o.path_)), tmp_(std::move(o.tmp_)), fd_(o.fd_), size_(o.size_) {
  o.fd_ = -1;
}

AtomicFileWriter::~AtomicFileWriter() { Abort(); }

void AtomicFileWriter::Abort() {
  if (fd_ < 0) return;
  ::close(fd_);
  ::unlink(tmp_.c_str());
  fd_ = -1;
}

Status AtomicFileWriter::Append(std::string_view data) {
  if (fd_ < 0) return FailedPreconditionError(path_ + ": writer is closed");
  Status st = WriteAll(fd_, data, tmp_);
  if (!st.ok()) {
    Abort();
    return st;
  }
  size_ += data.size();
  return st;
}

Status AtomicFileWriter::Commit() {
  if (fd_ < 0) return FailedPreconditionError(path_ + ": writer is closed");
  Status st;
  if (::fsync(fd_) != 0) st = ErrnoStatus("syncing", tmp_, errno);
  if (st.ok()) {
    int rc = ::close(fd_);
    fd_ = -1;
    if (rc != 0) st = ErrnoStatus("closing", tmp_, errno);
  }
  if (st.ok() && ::rename(tmp_.c_str(), path_.c_str()) != 0) {
    st = ErrnoStatus("renaming to", path_, errno);
  }
  if (!st.ok()) {
    Abort();
    ::unlink(tmp_.c_str());
    return st;
  }
  return SyncDirectory(std::filesystem::path(path_).parent_path().string());
}

Status WriteFileAtomically(const std::string& path, std::span<const std::string_view> pieces) {
  SPOT_ASSIGN_OR_RETURN(AtomicFileWriter w, AtomicFileWriter::Create(path));
  for (std::string_view piece : pieces) SPOT_RETURN_IF_ERROR(w.Append(piece));
  return w.Commit();
}

Result<ReadOnlyFile> ReadOnlyFile::Open(const std::string& path) {
  SPOT_ASSIGN_OR_RETURN(RegularFile file, RegularFile::Open(path));
  const uint64_t size = static_cast<uint64_t>(file.size);
  return ReadOnlyFile(std::exchange(file.fd, -1), size, path);
}

ReadOnlyFile::ReadOnlyFile(ReadOnlyFile&& o) noexcept
    : fd_(std::exchange(o.fd_, -1)),
      size_(o.size_),
      path_(std::move(o.path_)),
      map_(std::exchange(o.map_, nullptr)) {}

ReadOnlyFile& ReadOnlyFile::operator=(ReadOnlyFile&& o) noexcept {
  if (this != &o) {
    Unmap();
    if (fd_ >= 0) ::close(fd_);
    fd_ = std::exchange(o.fd_, -1);
    size_ = o.size_;
    path_ = std::move(o.path_);
    map_ = std::exchange(o.map_, nullptr);
  }
  return *this;
}

ReadOnlyFile::~ReadOnlyFile() {
  Unmap();
  if (fd_ >= 0) ::close(fd_);
}

bool ReadOnlyFile::Map() {
  if (map_ != nullptr) return true;
  if (fd_ < 0 || size_ == 0 || size_ > std::numeric_limits<size_t>::max()) return false;
  void* p = ::mmap(nullptr, static_cast<size_t>(size_), PROT_READ, MAP_SHARED, fd_, 0);
  if (p == MAP_FAILED) return false;
  map_ = static_cast<const char*>(p);
  return true;
}

void ReadOnlyFile::Unmap() {
  if (map_ == nullptr) return;
  ::munmap(const_cast<char*>(map_), static_cast<size_t>(size_));
  map_ = nullptr;
}

Status ReadOnlyFile::ReadAt(uint64_t offset, std::span<char> dst) const {
  size_t done = 0;
  while (done < dst.size()) {
    ssize_t n =
        ::pread(fd_, dst.data() + done, dst.size() - done, static_cast<off_t>(offset + done));
    if (n < 0) {
      if (errno == EINTR) continue;
      return ErrnoStatus("reading", path_, errno);
    }
    if (n == 0) {
      return DataLossError(path_ + ": file ends before byte " +
                           std::to_string(offset + dst.size()));
    }
    done += static_cast<size_t>(n);
  }
  return Status::Ok();
}

Status ReadFileRange(const std::string& path, uint64_t offset, std::span<char> dst) {
  SPOT_ASSIGN_OR_RETURN(ReadOnlyFile file, ReadOnlyFile::Open(path));
  return file.ReadAt(offset, dst);
}

Status WriteFileAtomically(const std::string& path, std::string_view contents) {
  std::string_view pieces[] = {contents};
  return WriteFileAtomically(path, pieces);
}

}  // namespace spot
