// Byte planes stored one by one, and the integer difference that sub-delta
// takes against a base (docs/checkpoint-format.md, codecs 4 and 5).
//
// After a byte-plane shuffle the planes of floating-point data differ
// sharply: the sign/exponent plane compresses several-fold, the low mantissa
// planes not at all. One zstd frame over all of them spends most of its time
// failing to compress the low planes. A planes payload is, for each of the
// element size's planes in order (n bytes each, n = elements in the chunk):
//
//   u8  mode       0 stored as is, 1 one zstd frame
//   u32 size       bytes that follow for this plane (little-endian)
//   size bytes     the plane, or its zstd frame (content size recorded, = n)
//
// A plane is stored as is when a sample says zstd would gain little: its
// byte entropy is high and a trial compression of a contiguous piece saves
// under kPlaneMinSaving. Otherwise one zstd frame: with PlaneFrames::
// kLiteralsFirst (full versions) a frame of literals only (zstd's Huffman
// coding of the bytes, which decodes faster than a frame of matches) unless
// matches make the trial piece kMatchesMinSaving smaller; with kMatches
// (deltas) a frame with matches, as zstd makes it.
#pragma once

#include <cstddef>
#include <span>
#include <string>
#include <string_view>

#include "core/status.h"

struct ZSTD_CCtx_s;
struct ZSTD_DCtx_s;

namespace spot::ckpt {

// A plane is compressed only when that is expected to save at least this
// fraction of its bytes.
inline constexpr double kPlaneMinSaving = 0.05;
// A compressed plane's frame holds matches only when they make its trial
// piece at least this fraction smaller than literals alone do.
inline constexpr double kMatchesMinSaving = 0.10;

// dst[i] = zigzag(raw[i] - base[i]) for elements of `elem_size` bytes (1, 2,
// 4 or 8) taken as little-endian unsigned integers, the difference wrapping
// around: values close to their base (floats of the same sign and nearby
// magnitude included) give small numbers whose high bytes are zero.
// REQUIRES: sizes equal and a multiple of elem_size; dst may alias nothing.
void ZigzagDelta(std::span<const char> raw, std::span<const char> base, size_t elem_size,
                 std::span<char> dst);
// inout[i] = inout[i] + unzigzag(delta[i]): the inverse of ZigzagDelta with
// the base in `inout`.
void AddZigzagDelta(std::span<const char> delta, size_t elem_size, std::span<char> inout);

// How a compressed plane's frame is made. A float's sign and exponent bytes
// in a full version are drawn almost independently: literals only are
// smaller and faster there. A delta's planes hold runs (bytes that did not
// move) reaching across the plane, which a 16 KiB trial piece underrates: on
// a trained MLP's Adam state a per-step delta came out 2.7% larger when the
// trial chose literals (docs/benchmarks.md), so deltas keep zstd's matches.
enum class PlaneFrames { kLiteralsFirst, kMatches };

// Encodes `planes` (elem_size planes of equal length, already shuffled) as a
// planes payload, appending to *out. `cctx` is a zstd context set to the
// wanted level; `scratch` is reused for zstd output.
Status EncodePlanes(std::string_view planes, size_t elem_size, PlaneFrames frames,
                    ZSTD_CCtx_s* cctx, std::string* scratch, std::string* out);

// Decompresses `stored`, which must be exactly one zstd frame recording a
// content size of exactly dst.size() bytes, into dst. DataLoss otherwise.
Status DecompressFrame(ZSTD_DCtx_s* dctx, std::string_view stored, std::span<char> dst);

// Decodes a planes payload into `planes` (its raw size: elem_size planes).
// DataLoss naming the plane when `stored` is anything but exactly one valid
// payload of that size.
Status DecodePlanes(std::string_view stored, size_t elem_size, ZSTD_DCtx_s* dctx,
                    std::span<char> planes);

// The same without copying planes stored as is: on success planes[p] (for p <
// elem_size) points at plane p's n = size / elem_size bytes, inside `stored`
// for a plane stored as is, inside `scratch` (size bytes, plane p at p * n)
// for a decompressed one. Same checks and errors as DecodePlanes.
Status DecodePlanesInPlace(std::string_view stored, size_t elem_size, size_t size,
                           ZSTD_DCtx_s* dctx, std::span<char> scratch, const char** planes);

}  // namespace spot::ckpt
