// File helpers with crash-safe commits. A file written with WriteFileAtomically
// is either absent or complete at its final name, never torn: the bytes go to a
// temporary file in the same directory, which is fsynced, renamed over the
// final name, and the directory is fsynced so the rename survives a crash.
#pragma once

#include <cstdint>
#include <cstdio>
#include <span>
#include <string>
#include <string_view>
#include <utility>

#include "core/status.h"

namespace spot {

// No limit on the size of a file ReadFile reads.
inline constexpr uint64_t kNoSizeLimit = UINT64_MAX;

// Reads the whole file. NotFound when it does not exist, Unavailable on I/O
// errors. InvalidArgument, naming the file and the reason, for anything but a
// regular file (a directory, a FIFO, a device: opening never blocks on a
// FIFO) and for a file larger than `max_bytes`.
Result<std::string> ReadFile(const std::string& path, uint64_t max_bytes = kNoSizeLimit);

// Writes the concatenation of `pieces` to `path` atomically (see above).
// Leaves no temporary file behind on failure.
Status WriteFileAtomically(const std::string& path, std::span<const std::string_view> pieces);
Status WriteFileAtomically(const std::string& path, std::string_view contents);

// Streams a file to `path` with the same commit as WriteFileAtomically: the
// bytes go to a temporary file beside it, and only Commit() makes them visible
// (fsync, rename, directory fsync). Destroying a writer that was not committed
// removes the temporary file. Not thread-safe.
class AtomicFileWriter {
 public:
  static Result<AtomicFileWriter> Create(const std::string& path);
  AtomicFileWriter(AtomicFileWriter&& o) noexcept;
  AtomicFileWriter& operator=(AtomicFileWriter&&) = delete;
  ~AtomicFileWriter();

  Status Append(std::string_view data);
  Status Commit();
  // Bytes appended so far.
  uint64_t size() const { return size_; }
  const std::string& path() const { return path_; }

 private:
  AtomicFileWriter(std::string path, std::string tmp, int fd)
      : path_(std::move(path)), tmp_(std::move(tmp)), fd_(fd) {}
  void Abort();

  std::string path_, tmp_;
  int fd_ = -1;
  uint64_t size_ = 0;
};

// A log file that lines are appended to as they happen (step, sample and
// event logs): opened for appending, line-buffered so a reader or a crash sees
// whole lines. A default-constructed log (or one opened with an empty path)
// writes nothing. Sync() makes what was appended durable (fsync).
class AppendLog {
 public:
  static Result<AppendLog> Open(const std::string& path);
  AppendLog() = default;
  AppendLog(AppendLog&& o) noexcept
      : file_(std::exchange(o.file_, nullptr)), path_(std::move(o.path_)) {}
  AppendLog& operator=(AppendLog&& o) noexcept;
  ~AppendLog();

  bool on() const { return file_ != nullptr; }
  void Append(std::string_view line);  // with its newline
  Status Sync();

 private:
  std::FILE* file_ = nullptr;
  std::string path_;
};

// A regular file opened once for reads at any offset (pread: several
// threads may read at once). Reads see the file that was opened, even once
// its name is replaced or removed. Open refuses what ReadFile refuses.
class ReadOnlyFile {
 public:
  static Result<ReadOnlyFile> Open(const std::string& path);
  ReadOnlyFile(ReadOnlyFile&& o) noexcept;
  ReadOnlyFile& operator=(ReadOnlyFile&& o) noexcept;
  ReadOnlyFile(const ReadOnlyFile&) = delete;
  ReadOnlyFile& operator=(const ReadOnlyFile&) = delete;
  ~ReadOnlyFile();

  // Reads `dst.size()` bytes at `offset`. DataLoss when the file is shorter.
  Status ReadAt(uint64_t offset, std::span<char> dst) const;
  uint64_t size() const { return size_; }  // when it was opened
  const std::string& path() const { return path_; }

  // Maps the whole file read-only (the page cache's own pages: reading them
  // copies nothing), once; false where the kernel refuses (then read with
  // ReadAt). Not safe to call while another thread reads mapped(). The file
  // must not shrink while mapped, or a read past its new end raises SIGBUS:
  // only for files that are never rewritten in place.
  bool Map();
  // The mapping (size() bytes), or empty before Map() or where it failed.
  std::string_view mapped() const { return {map_, map_ == nullptr ? 0 : size_}; }

 private:
  ReadOnlyFile(int fd, uint64_t size, std::string path)
      : fd_(fd), size_(size), path_(std::move(path)) {}
  void Unmap();
  int fd_ = -1;
  uint64_t size_ = 0;
  std::string path_;
  const char* map_ = nullptr;
};

// Reads `dst.size()` bytes at `offset`. DataLoss when the file is shorter,
// NotFound when it does not exist, InvalidArgument when it is not a regular file.
Status ReadFileRange(const std::string& path, uint64_t offset, std::span<char> dst);

// fsyncs a directory so that entries created, renamed or removed in it persist.
Status SyncDirectory(const std::string& dir);

// Creates `dir` and its parents when missing.
Status CreateDirectories(const std::string& dir);

// Prefix of the temporary files WriteFileAtomically leaves behind after a crash
// (a directory's owner may delete files starting with it when it opens).
inline constexpr std::string_view kTempFilePrefix = ".tmp.";

}  // namespace spot
