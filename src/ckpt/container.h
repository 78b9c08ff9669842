// Container: an in-memory checkpoint, an ordered list of named, typed,
// shaped byte arrays ("records"). Knows nothing of LibTorch (the tensor
// adapter, torch_adapter.h, fills and reads it) nor of files (format.h
// encodes it). Each record owns its storage; storage can be recycled between
// snapshots and handed from one container to another, so that decoding a
// delta version reuses its base's buffers in place.
// A Container is movable, not copyable. Not thread-safe.
#pragma once

#include <cstddef>
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

// Memory for record storage: buffers of at least kPageAllocBytes come
// straight from the kernel (mmap), smaller ones from malloc. Snapshot buffers
// are large and live as long as the saver. Taken from malloc's heap, they
// would take the free chunks that a trainer's per-step temporaries were
// reusing, and every later step would map and fault in fresh pages (measured
// on a 50M-parameter MLP: about 77,000 faults a step, half its speed).
inline constexpr size_t kPageAllocBytes = size_t{1} << 20;
void* AllocateRecordMemory(size_t bytes);
void FreeRecordMemory(void* p, size_t bytes);

template <typename T>
struct RecordAllocator {
  using value_type = T;
  RecordAllocator() = default;
  template <typename U>
  RecordAllocator(const RecordAllocator<U>&) {}  // NOLINT: allocators convert implicitly
  T* allocate(size_t n) { return static_cast<T*>(AllocateRecordMemory(n * sizeof(T))); }
  void deallocate(T* p, size_t n) { FreeRecordMemory(p, n * sizeof(T)); }
  friend bool operator==(const RecordAllocator&, const RecordAllocator&) { return true; }
};

// The storage of one record.
using Buffer = std::basic_string<char, std::char_traits<char>, RecordAllocator<char>>;

// Memory a record's bytes live in, held by a shared owner, so that a decoded
// record can hand its bytes to a tensor (or be decoded into one) without a copy.
struct SharedMemory {
  std::span<char> bytes;
  std::shared_ptr<void> owner;  // keeps `bytes` alive; the last copy frees them
};
// Fresh memory from AllocateRecordMemory, not initialized (memory of at least
// kPageAllocBytes is the kernel's zero pages until written).
SharedMemory AllocateSharedRecordMemory(size_t bytes);

struct Record {
  std::string name;  // unique in a container, e.g. "model/conv1.weight"
  DType dtype = DType::kU8;
  std::vector<int64_t> shape;  // empty for a scalar
  std::string_view data;       // numel * DTypeSize(dtype) bytes, little-endian
  uint64_t checksum = 0;       // XXH3-64 of data (set by the writer and the reader)

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
                                 Buffer storage);
  // Adds a record holding a copy of `bytes` (dtype kU8, shape {size}).
  void AddBytes(std::string name, std::string_view bytes);
  // Adds a record whose bytes are `memory.bytes`, kept alive by
  // `memory.owner` (shared: see SharedOwner). REQUIRES: the span is the
  // record's byte size.
  std::span<char> AddShared(std::string name, DType dtype, std::vector<int64_t> shape,
                            SharedMemory memory);
  // A handle keeping record i's bytes alive after the Container is gone, for
  // a record added by AddShared; null for any other. Whoever holds it may
  // read and write the bytes, which the record then shows (its checksum no
  // longer holds): a tensor restored without a copy, updated in training.
  std::shared_ptr<void> SharedOwner(size_t i) const { return owners_[i]; }

  const Record* Find(std::string_view name) const;
  // Index of record `name` in records(), -1 when absent.
  int FindIndex(std::string_view name) const;
  const std::vector<Record>& records() const { return records_; }
  std::span<char> mutable_data(size_t i) {
    return {const_cast<char*>(records_[i].data.data()), records_[i].data.size()};
  }
  Record& mutable_record(size_t i) { return records_[i]; }
  // Moves record i's storage out (a copy of the bytes for a shared record);
  // the record's data becomes empty.
  Buffer ReleaseStorage(size_t i);
  // Drops every record, keeping their storage for the next AddUninitialized
  // calls (shared records' memory is let go, not reused).
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
  std::vector<std::unique_ptr<Buffer>> storage_;   // storage_[i] backs records_[i]
  std::vector<std::shared_ptr<void>> owners_;      // owners_[i]: record i's, if shared
  std::vector<std::unique_ptr<Buffer>> recycled_;  // from before Recycle(), in order
  size_t next_recycled_ = 0;
};

// XXH3-64 of a byte range, the checksum used throughout the format.
uint64_t Checksum(std::string_view bytes);

}  // namespace spot::ckpt
