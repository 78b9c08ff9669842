// BlobStore: where checkpoint files live. A flat namespace of named,
// immutable blobs with atomic creation (a blob is invisible until committed),
// ranged reads, listing and deletion. The checkpoint store keeps one BlobStore
// per storage tier (a fast local disk, a durable one) and copies between them;
// a directory implements it today, an S3-compatible bucket fits the same calls.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"

namespace spot::ckpt {

// A blob being written. Nothing is visible under its name until Commit();
// destroying an uncommitted writer discards what was appended.
class BlobWriter {
 public:
  virtual ~BlobWriter() = default;
  virtual Status Append(std::string_view data) = 0;
  // Makes the blob durable and visible, replacing any blob of the same name.
  virtual Status Commit() = 0;
};

// A committed blob opened for ranged reads: a reader of many ranges of one
// blob (a checkpoint file's chunks) opens it once. Whether it sees a blob put
// under the same name since depends on the store (a directory's reads the
// file it opened); checkpoint files are never replaced. Safe to read from
// several threads at once.
class BlobReader {
 public:
  virtual ~BlobReader() = default;
  // As BlobStore::ReadInto.
  virtual Status ReadInto(uint64_t offset, std::span<char> dst) const = 0;
  virtual uint64_t size() const = 0;  // when it was opened
  // The whole blob in memory, where the store maps it (a directory's files
  // of kMapMinBytes and more: reading a range then copies nothing), else
  // empty: read with ReadInto.
  virtual std::string_view mapped() const { return {}; }
};

// Blobs from this size up are mapped by DirectoryBlobStore's readers.
inline constexpr uint64_t kMapMinBytes = 64 << 10;

class BlobStore {
 public:
  virtual ~BlobStore() = default;

  // Human-readable location of a blob, for messages ("<dir>/<name>").
  virtual std::string Describe(std::string_view name) const = 0;

  virtual Result<std::unique_ptr<BlobWriter>> Create(const std::string& name) = 0;
  // Reads dst.size() bytes at `offset`. NotFound for a missing blob, DataLoss
  // when it is shorter.
  virtual Status ReadInto(const std::string& name, uint64_t offset, std::span<char> dst) const = 0;
  virtual Result<uint64_t> Size(const std::string& name) const = 0;
  // Names of committed blobs, sorted.
  virtual Result<std::vector<std::string>> List() const = 0;
  // Removes a blob; OK when it does not exist.
  virtual Status Delete(const std::string& name) = 0;
  // Opens `name` for ranged reads. NotFound for a missing blob. This one
  // reads through ReadInto(name, ...) each time; a store that can keep a
  // blob open does.
  virtual Result<std::unique_ptr<BlobReader>> OpenReader(const std::string& name) const;

  // Convenience: the whole blob.
  Result<std::string> Read(const std::string& name) const;
  // Writes `data` as a committed blob.
  Status Put(const std::string& name, std::string_view data);
};

// A directory on a local file system: blobs are files, created through a
// temporary file, fsync and rename (core/file_io.h). Opening removes temporary
// files an interrupted writer left. Safe to use from several threads as long
// as no two write the same name at once.
class DirectoryBlobStore : public BlobStore {
 public:
  static Result<std::unique_ptr<DirectoryBlobStore>> Open(const std::string& dir);
  // Opens a directory that other processes write at the same time (a data
  // cache several workers fill): their temporary files are left alone, and
  // the directory is not created (a missing one holds no blobs; the caller
  // creates it before the first write).
  static Result<std::unique_ptr<DirectoryBlobStore>> OpenShared(const std::string& dir);

  std::string Describe(std::string_view name) const override;
  Result<std::unique_ptr<BlobWriter>> Create(const std::string& name) override;
  Status ReadInto(const std::string& name, uint64_t offset, std::span<char> dst) const override;
  Result<uint64_t> Size(const std::string& name) const override;
  Result<std::vector<std::string>> List() const override;
  Status Delete(const std::string& name) override;
  // The file, opened once (no open and close per read).
  Result<std::unique_ptr<BlobReader>> OpenReader(const std::string& name) const override;

  const std::string& dir() const { return dir_; }

 private:
  explicit DirectoryBlobStore(std::string dir) : dir_(std::move(dir)) {}
  std::string Path(std::string_view name) const;

  std::string dir_;
};

// Blobs in this process's memory: the in-memory tier (Gemini-style, for a
// checkpoint that must survive only the trainer, not the machine), and a disk-free
// store for tests and benchmarks. Thread-safe.
class MemoryBlobStore : public BlobStore {
 public:
  std::string Describe(std::string_view name) const override;
  Result<std::unique_ptr<BlobWriter>> Create(const std::string& name) override;
  Status ReadInto(const std::string& name, uint64_t offset, std::span<char> dst) const override;
  Result<uint64_t> Size(const std::string& name) const override;
  Result<std::vector<std::string>> List() const override;
  Status Delete(const std::string& name) override;

  // Direct access to a committed blob's bytes (created empty when missing),
  // e.g. to damage it in a test. Not synchronized with concurrent writers.
  std::string& blob(const std::string& name);
  void Set(const std::string& name, std::string bytes);

 private:
  mutable std::mutex mu_;
  std::map<std::string, std::string> blobs_;
};

// Copies blob `name` from one store to another, streaming, and returns the
// XXH3-64 of its bytes (the caller compares it with what it expects before
// anything refers to the copy).
Result<uint64_t> CopyBlob(const BlobStore& from, BlobStore& to, const std::string& name);

}  // namespace spot::ckpt
