// Container: an in-memory checkpoint, an ordered list of named, typed,
// shaped byte arrays ("records"), and its on-disk encoding (format v1, see
// docs/checkpoint-format.md). Knows nothing of LibTorch: the tensor adapter
// (torch_adapter.h) fills and reads it.
//
// Records are views: into storage the container owns (AddUninitialized) or
// into the decoded file buffer (Decode), so saving copies each tensor once
// and loading copies it once. A Container is movable, not copyable.
// Not thread-safe.
#pragma once

#include <cstdint>
#include <deque>
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
  uint64_t checksum = 0;        // XXH3-64 of data (set by Encode/Decode)

  int64_t numel() const;
};

class Container {
 public:
  Container() = default;
  Container(Container&&) = default;
  Container& operator=(Container&&) = default;

  // Adds a record and returns its storage for the caller to fill.
  // REQUIRES: no record named `name` yet; dims >= 0.
  std::span<char> AddUninitialized(std::string name, DType dtype, std::vector<int64_t> shape);
  // Adds a record holding a copy of `bytes` (dtype kU8, shape {size}).
  void AddBytes(std::string name, std::string_view bytes);

  const Record* Find(std::string_view name) const;
  const std::vector<Record>& records() const { return records_; }
  // Sum of the records' data sizes.
  uint64_t payload_bytes() const;

  // The encoded file as pieces to write in order (views into this container and
  // into `*scratch`, which must outlive the pieces). Sets each record's checksum.
  // `file_checksum` receives the XXH3-64 written in the footer.
  std::vector<std::string_view> Encode(std::string* scratch, uint64_t* file_checksum);

  // Parses and verifies an encoded file. `source` names it in errors.
  // Returns DataLoss for truncation, a bad file checksum (which covers every
  // byte before the footer, records included) or malformed structure.
  static Result<Container> Decode(std::string bytes, const std::string& source);

  // Re-hashes each record against its own checksum; returns the names of the
  // records that differ, comma-separated ("" when all match). For diagnostics:
  // Decode's file checksum already covers every record.
  std::string VerifyRecords() const;

  // XXH3-64 of a file's bytes as Decode checks it (everything but the footer).
  static uint64_t Checksum(std::string_view bytes);
  // The checksum a file's footer records (no hashing); 0 for a short file.
  static uint64_t StoredChecksum(std::string_view bytes);

 private:
  std::vector<Record> records_;
  std::deque<std::string> owned_;              // storage of added records
  std::unique_ptr<std::string> file_buffer_;   // storage of decoded records
};

// File layout constants (docs/checkpoint-format.md).
inline constexpr std::string_view kMagic = "SPOTCKPT";
inline constexpr std::string_view kFooterMagic = "SPOTEND1";
inline constexpr uint32_t kFormatVersion = 1;
inline constexpr size_t kAlignment = 64;

}  // namespace spot::ckpt
