#include "ckpt/planes.h"

#include <fmt/format.h>
// ZSTD_compressSequences: in zstd's experimental API, exported by libzstd 1.5.
#define ZSTD_STATIC_LINKING_ONLY
#include <zstd.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <type_traits>
#include <vector>

#if defined(__SSE2__)
#include <emmintrin.h>
#endif

namespace spot::ckpt {
namespace {

template <typename T>
T Load(const char* p) {
  T v;
  std::memcpy(&v, p, sizeof(T));
  return v;
}

// The SSE2 kernels do 16 bytes per step and return how many elements they
// did; the scalar loops below finish (and do everything without SSE2).
#if defined(__SSE2__)
inline __m128i LoadV(const char* p) { return _mm_loadu_si128(reinterpret_cast<const __m128i*>(p)); }
inline void StoreV(char* p, __m128i v) { _mm_storeu_si128(reinterpret_cast<__m128i*>(p), v); }

// All ones in the lanes whose top bit is set.
template <size_t kSize>
__m128i SignMask(__m128i d) {
  if constexpr (kSize == 2) return _mm_srai_epi16(d, 15);
  if constexpr (kSize == 4) return _mm_srai_epi32(d, 31);
  // No 64-bit arithmetic shift in SSE2: 0 - (d >> 63).
  return _mm_sub_epi64(_mm_setzero_si128(), _mm_srli_epi64(d, 63));
}

template <size_t kSize>
__m128i Sub(__m128i a, __m128i b) {
  if constexpr (kSize == 2) return _mm_sub_epi16(a, b);
  if constexpr (kSize == 4) return _mm_sub_epi32(a, b);
  return _mm_sub_epi64(a, b);
}

template <size_t kSize>
__m128i Add(__m128i a, __m128i b) {
  if constexpr (kSize == 2) return _mm_add_epi16(a, b);
  if constexpr (kSize == 4) return _mm_add_epi32(a, b);
  return _mm_add_epi64(a, b);
}

template <size_t kSize>
__m128i ShiftLeft1(__m128i d) {
  if constexpr (kSize == 2) return _mm_slli_epi16(d, 1);
  if constexpr (kSize == 4) return _mm_slli_epi32(d, 1);
  return _mm_slli_epi64(d, 1);
}

template <size_t kSize>
__m128i ShiftRight1(__m128i d) {
  if constexpr (kSize == 2) return _mm_srli_epi16(d, 1);
  if constexpr (kSize == 4) return _mm_srli_epi32(d, 1);
  return _mm_srli_epi64(d, 1);
}

template <size_t kSize>
size_t ZigzagDeltaSimd(const char* raw, const char* base, size_t n, char* dst) {
  if constexpr (kSize == 1) return 0;
  constexpr size_t kPer = 16 / kSize;
  size_t i = 0;
  for (; i + kPer <= n; i += kPer) {
    const __m128i d = Sub<kSize>(LoadV(raw + i * kSize), LoadV(base + i * kSize));
    StoreV(dst + i * kSize, _mm_xor_si128(ShiftLeft1<kSize>(d), SignMask<kSize>(d)));
  }
  return i;
}

template <size_t kSize>
size_t AddZigzagDeltaSimd(const char* delta, size_t n, char* inout) {
  if constexpr (kSize == 1) return 0;
  constexpr size_t kPer = 16 / kSize;
  const __m128i one = kSize == 2   ? _mm_set1_epi16(1)
                      : kSize == 4 ? _mm_set1_epi32(1)
                                   : _mm_set1_epi64x(1);
  size_t i = 0;
  for (; i + kPer <= n; i += kPer) {
    const __m128i z = LoadV(delta + i * kSize);
    // (z >> 1) ^ -(z & 1)
    const __m128i neg = Sub<kSize>(_mm_setzero_si128(), _mm_and_si128(z, one));
    const __m128i d = _mm_xor_si128(ShiftRight1<kSize>(z), neg);
    StoreV(inout + i * kSize, Add<kSize>(LoadV(inout + i * kSize), d));
  }
  return i;
}
#else
template <size_t kSize>
size_t ZigzagDeltaSimd(const char*, const char*, size_t, char*) {
  return 0;
}
template <size_t kSize>
size_t AddZigzagDeltaSimd(const char*, size_t, char*) {
  return 0;
}
#endif

template <typename T>
void ZigzagDeltaOf(const char* raw, const char* base, size_t n, char* dst) {
  using S = std::make_signed_t<T>;
  constexpr int kTopBit = 8 * sizeof(T) - 1;
  for (size_t i = ZigzagDeltaSimd<sizeof(T)>(raw, base, n, dst); i < n; ++i) {
    const T d = static_cast<T>(Load<T>(raw + i * sizeof(T)) - Load<T>(base + i * sizeof(T)));
    const T z =
        static_cast<T>(static_cast<T>(d << 1) ^ static_cast<T>(static_cast<S>(d) >> kTopBit));
    std::memcpy(dst + i * sizeof(T), &z, sizeof(T));
  }
}

template <typename T>
void AddZigzagDeltaOf(const char* delta, size_t n, char* inout) {
  for (size_t i = AddZigzagDeltaSimd<sizeof(T)>(delta, n, inout); i < n; ++i) {
    const T z = Load<T>(delta + i * sizeof(T));
    const T d = static_cast<T>((z >> 1) ^ static_cast<T>(T{0} - (z & 1)));
    const T v = static_cast<T>(Load<T>(inout + i * sizeof(T)) + d);
    std::memcpy(inout + i * sizeof(T), &v, sizeof(T));
  }
}

void PutU32(std::string* out, uint32_t v) {
  char b[4];
  std::memcpy(b, &v, 4);  // little-endian hosts only, as the rest of the format
  out->append(b, 4);
}

// Order-0 entropy in bits per byte of an evenly spread sample of `plane`.
double SampleEntropy(std::string_view plane) {
  constexpr size_t kSample = 16384;
  const size_t step = std::max<size_t>(1, plane.size() / kSample);
  uint32_t count[256] = {};
  size_t m = 0;
  for (size_t i = 0; i < plane.size(); i += step, ++m) ++count[static_cast<uint8_t>(plane[i])];
  double h = 0;
  for (uint32_t c : count) {
    if (c == 0) continue;
    const double q = static_cast<double>(c) / static_cast<double>(m);
    h -= q * std::log2(q);
  }
  return h;
}

// One zstd frame of `in` in `dst` (capacity `cap`), literals only: no match
// search, zstd's Huffman coding of the bytes (ZSTD_compressSequences with no
// sequence). Any zstd decoder reads it. Returns the frame's size or a zstd
// error code.
size_t CompressLiterals(ZSTD_CCtx* cctx, std::string_view in, char* dst, size_t cap) {
  return ZSTD_compressSequences(cctx, dst, cap, nullptr, 0, in.data(), in.size());
}

size_t CompressMatches(ZSTD_CCtx* cctx, std::string_view in, char* dst, size_t cap) {
  return ZSTD_compress2(cctx, dst, cap, in.data(), in.size());
}

enum class PlaneCoding { kStore, kLiterals, kMatches };

// How `plane` is stored: as is when zstd is expected to save under
// kPlaneMinSaving of it (its byte entropy is high and a trial compression of
// a piece from its middle saves too little: repeats that byte statistics
// miss); else, with kLiteralsFirst, as literals only unless matches make
// that piece a further kMatchesMinSaving smaller (a literals-only frame
// of normal weights' exponents decodes about 1.7x faster), with kMatches as
// zstd makes it.
PlaneCoding ChooseCoding(std::string_view plane, PlaneFrames frames, ZSTD_CCtx* cctx,
                         std::string* scratch) {
  constexpr size_t kTrial = 16384;
  const bool high_entropy =
      plane.size() > 2 * kTrial && SampleEntropy(plane) >= 8 * (1 - kPlaneMinSaving);
  if (frames == PlaneFrames::kMatches && !high_entropy) return PlaneCoding::kMatches;
  const std::string_view piece =
      plane.size() <= kTrial ? plane : plane.substr(plane.size() / 2 - kTrial / 2, kTrial);
  const size_t bound = ZSTD_compressBound(piece.size());
  if (scratch->size() < bound) scratch->resize(bound);
  constexpr double kNone = std::numeric_limits<double>::infinity();
  auto size = [](size_t z) { return ZSTD_isError(z) ? kNone : static_cast<double>(z); };
  const double match = size(CompressMatches(cctx, piece, scratch->data(), scratch->size()));
  const double lit = frames == PlaneFrames::kLiteralsFirst
                         ? size(CompressLiterals(cctx, piece, scratch->data(), scratch->size()))
                         : kNone;
  const bool matches = match < (1 - kMatchesMinSaving) * lit;
  const double best = matches ? match : lit;
  if (best == kNone ||
      (high_entropy && best > (1 - kPlaneMinSaving) * static_cast<double>(piece.size()))) {
    return PlaneCoding::kStore;
  }
  return matches ? PlaneCoding::kMatches : PlaneCoding::kLiterals;
}

}  // namespace

void ZigzagDelta(std::span<const char> raw, std::span<const char> base, size_t elem_size,
                 std::span<char> dst) {
  const size_t n = raw.size() / elem_size;
  switch (elem_size) {
    case 1:
      return ZigzagDeltaOf<uint8_t>(raw.data(), base.data(), n, dst.data());
    case 2:
      return ZigzagDeltaOf<uint16_t>(raw.data(), base.data(), n, dst.data());
    case 4:
      return ZigzagDeltaOf<uint32_t>(raw.data(), base.data(), n, dst.data());
    default:
      return ZigzagDeltaOf<uint64_t>(raw.data(), base.data(), n, dst.data());
  }
}

void AddZigzagDelta(std::span<const char> delta, size_t elem_size, std::span<char> inout) {
  const size_t n = delta.size() / elem_size;
  switch (elem_size) {
    case 1:
      return AddZigzagDeltaOf<uint8_t>(delta.data(), n, inout.data());
    case 2:
      return AddZigzagDeltaOf<uint16_t>(delta.data(), n, inout.data());
    case 4:
      return AddZigzagDeltaOf<uint32_t>(delta.data(), n, inout.data());
    default:
      return AddZigzagDeltaOf<uint64_t>(delta.data(), n, inout.data());
  }
}

Status EncodePlanes(std::string_view planes, size_t elem_size, PlaneFrames frames, ZSTD_CCtx* cctx,
                    std::string* scratch, std::string* out) {
  if (!cctx) return InternalError("zstd: cannot create a compression context");
  const size_t n = planes.size() / elem_size;
  if (n > UINT32_MAX) return InvalidArgumentError("chunk too large for a planes payload");
  out->reserve(out->size() + planes.size() + 5 * elem_size);
  for (size_t p = 0; p < elem_size; ++p) {
    const std::string_view plane = planes.substr(p * n, n);
    const PlaneCoding coding = ChooseCoding(plane, frames, cctx, scratch);
    if (coding != PlaneCoding::kStore) {
      if (scratch->size() < ZSTD_compressBound(n)) scratch->resize(ZSTD_compressBound(n));
      const size_t z = coding == PlaneCoding::kLiterals
                           ? CompressLiterals(cctx, plane, scratch->data(), scratch->size())
                           : CompressMatches(cctx, plane, scratch->data(), scratch->size());
      if (ZSTD_isError(z)) return InternalError(fmt::format("zstd: {}", ZSTD_getErrorName(z)));
      if (z < n) {
        out->push_back(1);
        PutU32(out, static_cast<uint32_t>(z));
        out->append(scratch->data(), z);
        continue;
      }
    }
    out->push_back(0);
    PutU32(out, static_cast<uint32_t>(n));
    out->append(plane);
  }
  return Status::Ok();
}

Status DecompressFrame(ZSTD_DCtx* dctx, std::string_view stored, std::span<char> dst) {
  if (!dctx) return InternalError("zstd: cannot create a decompression context");
  const unsigned long long content = ZSTD_getFrameContentSize(stored.data(), stored.size());
  if (content == ZSTD_CONTENTSIZE_ERROR) return DataLossError("not a zstd frame");
  if (content == ZSTD_CONTENTSIZE_UNKNOWN) return DataLossError("zstd frame without a size");
  if (content != dst.size()) {
    return DataLossError(
        fmt::format("zstd frame holds {} bytes, {} expected", content, dst.size()));
  }
  const size_t frame = ZSTD_findFrameCompressedSize(stored.data(), stored.size());
  if (ZSTD_isError(frame)) return DataLossError("truncated zstd frame");
  if (frame != stored.size()) {
    return DataLossError(fmt::format("{} bytes after the zstd frame", stored.size() - frame));
  }
  const size_t got =
      ZSTD_decompressDCtx(dctx, dst.data(), dst.size(), stored.data(), stored.size());
  if (ZSTD_isError(got)) return DataLossError(fmt::format("zstd: {}", ZSTD_getErrorName(got)));
  if (got != dst.size()) return DataLossError("zstd frame shorter than it says");
  return Status::Ok();
}

Status DecodePlanesInPlace(std::string_view stored, size_t elem_size, size_t size, ZSTD_DCtx* dctx,
                           std::span<char> scratch, const char** planes) {
  const size_t n = size / elem_size;
  size_t pos = 0;
  for (size_t p = 0; p < elem_size; ++p) {
    if (stored.size() - pos < 5) {
      return DataLossError(fmt::format("byte plane {} of {}: header cut short", p, elem_size));
    }
    const auto mode = static_cast<uint8_t>(stored[pos]);
    const uint32_t bytes = Load<uint32_t>(stored.data() + pos + 1);
    pos += 5;
    if (bytes > stored.size() - pos) {
      return DataLossError(fmt::format("byte plane {} of {}: {} bytes stored, {} left", p,
                                       elem_size, bytes, stored.size() - pos));
    }
    const std::string_view body = stored.substr(pos, bytes);
    pos += bytes;
    if (mode == 0) {
      if (bytes != n) {
        return DataLossError(fmt::format("byte plane {} of {}: {} bytes stored as is, {} expected",
                                         p, elem_size, bytes, n));
      }
      planes[p] = body.data();
    } else if (mode == 1) {
      const std::span<char> dst = scratch.subspan(p * n, n);
      Status s = DecompressFrame(dctx, body, dst);
      if (!s.ok()) {
        return DataLossError(fmt::format("byte plane {} of {}: {}", p, elem_size, s.message()));
      }
      planes[p] = dst.data();
    } else {
      return DataLossError(fmt::format("byte plane {} of {}: unknown mode {}", p, elem_size, mode));
    }
  }
  if (pos != stored.size()) {
    return DataLossError(fmt::format("{} bytes after the last byte plane", stored.size() - pos));
  }
  return Status::Ok();
}

Status DecodePlanes(std::string_view stored, size_t elem_size, ZSTD_DCtx* dctx,
                    std::span<char> planes) {
  const size_t n = planes.size() / elem_size;
  std::vector<const char*> at(elem_size);
  SPOT_RETURN_IF_ERROR(
      DecodePlanesInPlace(stored, elem_size, planes.size(), dctx, planes, at.data()));
  for (size_t p = 0; p < elem_size; ++p) {
    if (n && at[p] != planes.data() + p * n) std::memcpy(planes.data() + p * n, at[p], n);
  }
  return Status::Ok();
}

}  // namespace spot::ckpt
