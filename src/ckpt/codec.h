// Chunk codecs of checkpoint format v2 (docs/checkpoint-format.md).
//
// A record's bytes are cut into chunks (kChunkBytes each, the last shorter,
// always a whole number of elements) and each chunk is encoded on its own, so
// large tensors stream and chunks can be worked on in parallel.
//
//   raw            stored as is
//   shuffle-zstd   byte-plane shuffle by element size (all first bytes, then all
//                  second bytes, ...), then zstd. Lossless.
//   xor-delta      XOR against the same bytes of the base version, then
//                  shuffle + zstd. Lossless; decoding needs the base's bytes.
//   q8-delta       lossy, floating-point records only: the difference to the
//                  base (as the reader reconstructs it) quantized to int8 in
//                  blocks of kQ8Block elements with one f32 scale per block
//                  (scale = max|d| / 127), then zstd. Each element comes back
//                  within Q8ErrorBound() of the value that was saved.
//   planes-zstd    byte-plane shuffle, then each plane on its own: zstd, or
//                  stored as is when zstd would gain little (planes.h).
//                  Lossless; the default for full versions.
//   sub-delta      the difference to the base's bytes as integers of the
//                  element size (wrapping, zigzag-coded), then as planes-zstd.
//                  Lossless; decoding needs the base's bytes. The default
//                  delta: close floats give more zero high bits than XOR.
//
// Values are part of the file format: never renumber.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>

#include "ckpt/container.h"
#include "core/status.h"

namespace spot::ckpt {

enum class Codec : uint8_t {
  kRaw = 0,
  kShuffleZstd = 1,
  kXorDelta = 2,
  kQ8Delta = 3,
  kPlanesZstd = 4,
  kSubDelta = 5,
};
inline constexpr int kNumCodecs = 6;

std::string_view CodecName(Codec c);
// "raw", "shuffle-zstd", "xor-delta", "q8-delta", "planes-zstd", "sub-delta";
// InvalidArgument otherwise.
Result<Codec> ParseCodec(std::string_view name);
// True for codecs whose decoding starts from the base version's bytes.
inline bool IsDelta(Codec c) {
  return c == Codec::kXorDelta || c == Codec::kQ8Delta || c == Codec::kSubDelta;
}
// q8-delta applies to f32, f64, f16 and bf16 records; others fall back to a
// lossless delta.
bool SupportsQ8(DType t);

// Raw bytes per chunk (a multiple of every element size).
inline constexpr size_t kChunkBytes = size_t{4} << 20;
// Elements per q8 block (one scale each).
inline constexpr size_t kQ8Block = 256;

// Byte-plane shuffle of n = src.size() / elem_size elements: dst[p * n + i] =
// src[i * elem_size + p]. REQUIRES: sizes equal, src.size() % elem_size == 0.
void ShuffleBytes(std::span<const char> src, size_t elem_size, std::span<char> dst);
void UnshuffleBytes(std::span<const char> src, size_t elem_size, std::span<char> dst);

// One per thread: holds zstd contexts and scratch buffers, reused across chunks.
// Not thread-safe.
class ChunkCodec {
 public:
  // zstd level for the compressing codecs (1 favours throughput).
  explicit ChunkCodec(int zstd_level = 1);
  ~ChunkCodec();
  ChunkCodec(const ChunkCodec&) = delete;
  ChunkCodec& operator=(const ChunkCodec&) = delete;

  // Encodes one chunk `raw` of a record of `dtype`, replacing *out with the
  // stored bytes. Delta codecs read `base` (same size as raw), others ignore it.
  // For q8-delta, `base` is updated in place to what the reader will
  // reconstruct (base + dequantized difference), so the next delta is taken
  // against it and errors do not accumulate along a chain; for every other
  // codec `base` is left alone. InvalidArgument for q8-delta on a dtype
  // SupportsQ8 refuses, or sizes that do not fit.
  Status Encode(Codec codec, DType dtype, std::span<const char> raw, std::span<char> base,
                std::string* out);

  // Decodes one stored chunk into `dst` (the chunk's raw size). For delta
  // codecs `dst` holds the base's bytes on entry and is updated in place.
  // DataLoss (naming nothing: the caller adds file and record) when the stored
  // bytes do not decode to exactly dst.size() bytes.
  Status Decode(Codec codec, DType dtype, std::string_view stored, std::span<char> dst);

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// Element i of a floating-point record (f32, f64, f16, bf16) as a double.
// REQUIRES: SupportsQ8(dtype), (i + 1) * DTypeSize(dtype) <= bytes.size().
double FloatElement(DType dtype, std::string_view bytes, size_t i);

// The largest absolute error q8-delta allows for one element, given the
// largest absolute difference `max_abs_delta` in its block: half a
// quantization step plus the rounding of the final addition in the dtype.
double Q8ErrorBound(double max_abs_delta, double value_magnitude, DType dtype);

}  // namespace spot::ckpt
