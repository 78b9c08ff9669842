// Container: an in-memory checkpoint, an ordered list of named, typed,
// shaped byte arrays ("records"). Knows nothing of LibTorch (the tensor
// adapter, torch_adapter.h, fills and reads it) nor of files (format.h
// encodes it). Each record owns its storage; storage can be recycled between
// snapshots and handed from one container to another, so that decoding a
// delta version reuses its base's buffers in place.
// A Container is movable, not copyable. Not thread-safe.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"

namespace spot::ckpt {

// Element types. Values are part of the file format: never renumber.
enum class DType : uint8_t {
  kU8 = 0,
  kI8 = 1,
  kI16 = 2,
  kI32 = 3,
  kI64 = 4,
  kF16 = 5,
  kBF16 = 6,
  kF32 = 7,
  kF64 = 8,
  kBool = 9,
};
inline constexpr int kNumDTypes = 10;

size_t DTypeSize(DType t);
std::string_view DTypeName(DType t);

struct Record {
  std::string name;             // unique in a container, e.g. "model/conv1.weight"
  DType dtype = DType::kU8;
  std::vector<int64_t> shape;   // empty for a scalar
  std::string_view data;        // numel * DTypeSize(dtype) bytes, little-endian
  uint64_t checksum = 0;        // XXH3-64 of data (set by the writer and the reader)

  int64_t numel() const;
};

class Container {
 public:
  Container() = default;
  Container(Container&&) = default;
  Container& operator=(Container&&) = default;

  // Adds a record and returns its storage for the caller to fill. Reuses the
  // storage of the record at the same position before the last Recycle()
  // (resized), so a snapshot of the same state costs no allocation.
  // REQUIRES: no record named `name` yet; dims >= 0.
  std::span<char> AddUninitialized(std::string name, DType dtype, std::vector<int64_t> shape);
  // Adds a record that takes over `storage`. REQUIRES: storage.size() is the
  // record's byte size.
  std::span<char> AddWithStorage(std::string name, DType dtype, std::vector<int64_t> shape,
                                 std::string storage);
  // Adds a record holding a copy of `bytes` (dtype kU8, shape {size}).
  void AddBytes(std::string name, std::string_view bytes);

  const Record* Find(std::string_view name) const;
  // Index of record `name` in records(), -1 when absent.
  int FindIndex(std::string_view name) const;
  const std::vector<Record>& records() const { return records_; }
  std::span<char> mutable_data(size_t i) { return {storage_[i]->data(), storage_[i]->size()}; }
  Record& mutable_record(size_t i) { return records_[i]; }
  // Moves record i's storage out; the record's data becomes empty.
  std::string ReleaseStorage(size_t i);
  // Drops every record, keeping their storage for the next AddUninitialized calls.
  void Recycle();
  // Drops records and storage.
  void Clear();
  bool empty() const { return records_.empty(); }
  // Sum of the records' data sizes.
  uint64_t payload_bytes() const;

  // Re-hashes each record against its checksum; returns the names of the
  // records that differ, comma-separated ("" when all match).
  std::string VerifyRecords() const;

 private:
  std::vector<Record> records_;
  std::vector<std::unique_ptr<std::string>> storage_;   // storage_[i] backs records_[i]
  std::vector<std::unique_ptr<std::string>> recycled_;  // from before Recycle(), in order
  size_t next_recycled_ = 0;
};

// XXH3-64 of a byte range, the checksum used throughout the format.
uint64_t Checksum(std::string_view bytes);

}  // namespace spot::ckpt
