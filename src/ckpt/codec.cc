#include "ckpt/codec.h"

#include <fmt/format.h>
#include <zstd.h>

#include <algorithm>
#include <bit>
#include <cassert>
#include <cfloat>
#include <cmath>
#include <cstring>

#include "ckpt/planes.h"

#if defined(__SSE2__)
#include <emmintrin.h>
#endif

namespace spot::ckpt {
namespace {

// ---------------------------------------------------------------------------
// Byte-plane shuffle. The SSE2 kernels move 16 elements per step; a scalar
// loop does the tail (and everything on targets without SSE2).

template <size_t kSize>
void ShuffleTail(const char* src, size_t n, size_t begin, char* dst) {
  for (size_t i = begin; i < n; ++i) {
    for (size_t p = 0; p < kSize; ++p) dst[p * n + i] = src[i * kSize + p];
  }
}

// Unshuffling reads plane p from planes[p]: the planes need not be
// contiguous (a planes payload leaves those stored as is where they are).
template <size_t kSize>
void UnshuffleTail(const char* const* planes, size_t n, size_t begin, char* dst) {
  for (size_t i = begin; i < n; ++i) {
    for (size_t p = 0; p < kSize; ++p) dst[i * kSize + p] = planes[p][i];
  }
}

#if defined(__SSE2__)
inline __m128i Load(const char* p) { return _mm_loadu_si128(reinterpret_cast<const __m128i*>(p)); }
inline void Store(char* p, __m128i v) { _mm_storeu_si128(reinterpret_cast<__m128i*>(p), v); }

// The even and the odd bytes of the 32 bytes a:b, in order.
inline void Deinterleave(__m128i a, __m128i b, __m128i* even, __m128i* odd) {
  const __m128i low = _mm_set1_epi16(0x00ff);
  *even = _mm_packus_epi16(_mm_and_si128(a, low), _mm_and_si128(b, low));
  *odd = _mm_packus_epi16(_mm_srli_epi16(a, 8), _mm_srli_epi16(b, 8));
}

// Each step splits bytes by the lowest bit of their index within the
// element, so log2(size) rounds leave one register per byte plane.
size_t Shuffle2Simd(const char* src, size_t n, char* dst) {
  size_t i = 0;
  for (; i + 16 <= n; i += 16) {
    __m128i p0, p1;
    Deinterleave(Load(src + 2 * i), Load(src + 2 * i + 16), &p0, &p1);
    Store(dst + i, p0);
    Store(dst + n + i, p1);
  }
  return i;
}

size_t Shuffle4Simd(const char* src, size_t n, char* dst) {
  size_t i = 0;
  for (; i + 16 <= n; i += 16) {
    const char* s = src + 4 * i;
    __m128i e0, o0, e1, o1, p[4];
    Deinterleave(Load(s), Load(s + 16), &e0, &o0);       // elements 0-7: bytes 0,2 / 1,3
    Deinterleave(Load(s + 32), Load(s + 48), &e1, &o1);  // elements 8-15
    Deinterleave(e0, e1, &p[0], &p[2]);
    Deinterleave(o0, o1, &p[1], &p[3]);
    for (size_t k = 0; k < 4; ++k) Store(dst + k * n + i, p[k]);
  }
  return i;
}

size_t Shuffle8Simd(const char* src, size_t n, char* dst) {
  size_t i = 0;
  for (; i + 16 <= n; i += 16) {
    const char* s = src + 8 * i;
    __m128i e[4], o[4], ee[2], eo[2], oe[2], oo[2], p[8];
    for (int k = 0; k < 4; ++k) Deinterleave(Load(s + 32 * k), Load(s + 32 * k + 16), &e[k], &o[k]);
    for (int k = 0; k < 2; ++k) {
      Deinterleave(e[2 * k], e[2 * k + 1], &ee[k], &eo[k]);  // bytes 0,4 / 2,6
      Deinterleave(o[2 * k], o[2 * k + 1], &oe[k], &oo[k]);  // bytes 1,5 / 3,7
    }
    Deinterleave(ee[0], ee[1], &p[0], &p[4]);
    Deinterleave(eo[0], eo[1], &p[2], &p[6]);
    Deinterleave(oe[0], oe[1], &p[1], &p[5]);
    Deinterleave(oo[0], oo[1], &p[3], &p[7]);
    for (size_t k = 0; k < 8; ++k) Store(dst + k * n + i, p[k]);
  }
  return i;
}

// Unshuffling interleaves planes pairwise, widening the unit each round.
size_t Unshuffle2Simd(const char* const* pl, size_t n, char* dst) {
  size_t i = 0;
  for (; i + 16 <= n; i += 16) {
    __m128i p0 = Load(pl[0] + i), p1 = Load(pl[1] + i);
    Store(dst + 2 * i, _mm_unpacklo_epi8(p0, p1));
    Store(dst + 2 * i + 16, _mm_unpackhi_epi8(p0, p1));
  }
  return i;
}

size_t Unshuffle4Simd(const char* const* pl, size_t n, char* dst) {
  size_t i = 0;
  for (; i + 16 <= n; i += 16) {
    __m128i p0 = Load(pl[0] + i), p1 = Load(pl[1] + i);
    __m128i p2 = Load(pl[2] + i), p3 = Load(pl[3] + i);
    __m128i a_lo = _mm_unpacklo_epi8(p0, p1), a_hi = _mm_unpackhi_epi8(p0, p1);
    __m128i b_lo = _mm_unpacklo_epi8(p2, p3), b_hi = _mm_unpackhi_epi8(p2, p3);
    char* d = dst + 4 * i;
    Store(d, _mm_unpacklo_epi16(a_lo, b_lo));
    Store(d + 16, _mm_unpackhi_epi16(a_lo, b_lo));
    Store(d + 32, _mm_unpacklo_epi16(a_hi, b_hi));
    Store(d + 48, _mm_unpackhi_epi16(a_hi, b_hi));
  }
  return i;
}

size_t Unshuffle8Simd(const char* const* pl, size_t n, char* dst) {
  size_t i = 0;
  for (; i + 16 <= n; i += 16) {
    __m128i pairs[4][2];  // planes 2k, 2k+1 interleaved: elements 0-7, 8-15
    for (size_t k = 0; k < 4; ++k) {
      __m128i a = Load(pl[2 * k] + i), b = Load(pl[2 * k + 1] + i);
      pairs[k][0] = _mm_unpacklo_epi8(a, b);
      pairs[k][1] = _mm_unpackhi_epi8(a, b);
    }
    char* d = dst + 8 * i;
    for (size_t h = 0; h < 2; ++h) {                                // elements 8h .. 8h+7
      __m128i lo03 = _mm_unpacklo_epi16(pairs[0][h], pairs[1][h]);  // bytes 0-3, elements +0..3
      __m128i hi03 = _mm_unpackhi_epi16(pairs[0][h], pairs[1][h]);  // bytes 0-3, elements +4..7
      __m128i lo47 = _mm_unpacklo_epi16(pairs[2][h], pairs[3][h]);  // bytes 4-7
      __m128i hi47 = _mm_unpackhi_epi16(pairs[2][h], pairs[3][h]);
      Store(d + 64 * h, _mm_unpacklo_epi32(lo03, lo47));
      Store(d + 64 * h + 16, _mm_unpackhi_epi32(lo03, lo47));
      Store(d + 64 * h + 32, _mm_unpacklo_epi32(hi03, hi47));
      Store(d + 64 * h + 48, _mm_unpackhi_epi32(hi03, hi47));
    }
  }
  return i;
}
#else
size_t Shuffle2Simd(const char*, size_t, char*) { return 0; }
size_t Shuffle4Simd(const char*, size_t, char*) { return 0; }
size_t Shuffle8Simd(const char*, size_t, char*) { return 0; }
size_t Unshuffle2Simd(const char* const*, size_t, char*) { return 0; }
size_t Unshuffle4Simd(const char* const*, size_t, char*) { return 0; }
size_t Unshuffle8Simd(const char* const*, size_t, char*) { return 0; }
#endif

// dst = a ^ b (dst may be a or b).
void Xor(const char* a, const char* b, size_t size, char* dst) {
  size_t i = 0;
#if defined(__SSE2__)
  for (; i + 16 <= size; i += 16) Store(dst + i, _mm_xor_si128(Load(a + i), Load(b + i)));
#endif
  for (; i + 8 <= size; i += 8) {
    uint64_t x, y;
    std::memcpy(&x, a + i, 8);
    std::memcpy(&y, b + i, 8);
    x ^= y;
    std::memcpy(dst + i, &x, 8);
  }
  for (; i < size; ++i) dst[i] = static_cast<char>(a[i] ^ b[i]);
}

// ---------------------------------------------------------------------------
// Floating-point element types for q8-delta: each loads to double exactly and
// stores a double rounded to nearest-even. Values beyond the type's range
// saturate to its largest finite value, so a reconstruction of a finite value
// stays finite. (Infinities saturate too: only a base holding one, which the
// encoder refuses, can produce them.)

// Shifts v right by `shift` (1..63) bits, rounding to nearest, ties to even.
uint64_t ShiftRoundEven(uint64_t v, int shift) {
  uint64_t q = v >> shift;
  uint64_t rest = v & ((uint64_t{1} << shift) - 1);
  uint64_t half = uint64_t{1} << (shift - 1);
  return (rest > half || (rest == half && (q & 1))) ? q + 1 : q;
}

// A double to a binary float of kExpBits exponent and kManBits fraction bits
// (f16: 5, 10; bf16: 8, 7), rounded once, to nearest-even, subnormals
// included. Values beyond the largest finite one, infinity included,
// saturate to it; NaN stays NaN (quiet).
template <int kExpBits, int kManBits>
uint16_t ToNarrowFloat(double x) {
  constexpr int kBias = (1 << (kExpBits - 1)) - 1;
  constexpr uint32_t kInf = ((1u << kExpBits) - 1) << kManBits;
  const uint64_t bits = std::bit_cast<uint64_t>(x);
  const auto sign = static_cast<uint16_t>((bits >> 63) << (kExpBits + kManBits));
  const uint64_t abs = bits & ~(uint64_t{1} << 63);
  constexpr uint64_t kDoubleInf = uint64_t{0x7ff} << 52;
  if (abs > kDoubleInf) return static_cast<uint16_t>(sign | kInf | (1u << (kManBits - 1)));
  const int e = static_cast<int>(abs >> 52) - 1023;
  if (e < -kBias - kManBits) return sign;  // below half the smallest subnormal
  if (e > kBias) return static_cast<uint16_t>(sign | (kInf - 1));
  const uint64_t sig = (abs & ((uint64_t{1} << 52) - 1)) | (uint64_t{1} << 52);
  uint64_t v;
  if (e >= 1 - kBias) {  // normal; a carry out of the fraction bumps the exponent
    v = (static_cast<uint64_t>(e + kBias) << kManBits) + ShiftRoundEven(sig, 52 - kManBits) -
        (uint64_t{1} << kManBits);
  } else {  // in units of the smallest subnormal
    v = ShiftRoundEven(sig, 52 - kManBits + (1 - kBias) - e);
  }
  return static_cast<uint16_t>(sign | std::min<uint64_t>(v, kInf - 1));
}

double HalfToDouble(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h >> 15) << 31;
  const uint32_t exp = (h >> 10) & 0x1f;
  const uint32_t man = h & 0x3ff;
  if (exp == 0) {
    double v = man * 0x1p-24;
    return sign ? -v : v;
  }
  uint32_t f =
      exp == 0x1f ? (sign | 0x7f800000u | (man << 13)) : (sign | ((exp + 112) << 23) | (man << 13));
  return std::bit_cast<float>(f);
}

// min/max compile to minsd/maxsd, no branches; NaN passes through.
double Clamp(double x, double limit) { return std::min(std::max(x, -limit), limit); }

float ToF32(double x) { return static_cast<float>(Clamp(x, FLT_MAX)); }

// Unaligned little-endian access to one element.
struct ElementBytes {
  template <typename T>
  static T Get(const char* p) {
    T v;
    std::memcpy(&v, p, sizeof(T));
    return v;
  }
  template <typename T>
  static void Put(char* p, T v) {
    std::memcpy(p, &v, sizeof(T));
  }
};

struct F32 : ElementBytes {
  static constexpr size_t kSize = 4;
  static double Load(const char* p) { return Get<float>(p); }
  static void Store(char* p, double x) { Put(p, ToF32(x)); }
};

struct F64 : ElementBytes {
  static constexpr size_t kSize = 8;
  static double Load(const char* p) { return Get<double>(p); }
  static void Store(char* p, double x) { Put(p, x); }
};

struct F16 : ElementBytes {
  static constexpr size_t kSize = 2;
  static double Load(const char* p) { return HalfToDouble(Get<uint16_t>(p)); }
  static void Store(char* p, double x) { Put(p, ToNarrowFloat<5, 10>(x)); }
};

struct BF16 : ElementBytes {
  static constexpr size_t kSize = 2;
  static double Load(const char* p) {
    return std::bit_cast<float>(uint32_t{Get<uint16_t>(p)} << 16);
  }
  static void Store(char* p, double x) { Put(p, ToNarrowFloat<8, 7>(x)); }
};

// Calls f(F32{}) etc. for the float dtypes; REQUIRES: SupportsQ8(t).
template <typename Fn>
auto VisitFloat(DType t, Fn&& f) {
  switch (t) {
    case DType::kF64:
      return f(F64{});
    case DType::kF16:
      return f(F16{});
    case DType::kBF16:
      return f(BF16{});
    default:
      return f(F32{});
  }
}

// ---------------------------------------------------------------------------
// q8-delta. Stored (before zstd): u32 element count, one f32 scale per block,
// one int8 per element.

size_t Q8Blocks(size_t n) { return (n + kQ8Block - 1) / kQ8Block; }
size_t Q8Bytes(size_t n) { return 4 + 4 * Q8Blocks(n) + n; }

// Rounds to the nearest integer, ties to even, for |x| < 2^51: adding
// 1.5 * 2^52 leaves no fraction bits. (Plain SSE2 has no rounding
// instruction, and nearbyint would be a library call.)
double RoundEven(double x) {
  constexpr double kMagic = 0x1.8p52;
  return (x + kMagic) - kMagic;
}

// base[j] += q[j] * scale, in T. The encoder updates its base with this very
// function, so both sides agree bit for bit. q * scale is exact in double
// (8 x 24 significant bits), so a fused multiply-add rounds the same way.
template <typename T>
void AddDequantized(const int8_t* q, float scale, size_t len, char* base) {
  for (size_t j = 0; j < len; ++j) {
    char* p = base + j * T::kSize;
    T::Store(p, T::Load(p) + q[j] * double{scale});
  }
}

#if defined(__SSE2__)
// The same for f32, four at a time and with the same roundings: the sum
// rounded once to double, the clamp of ToF32 (maxpd/minpd pass NaN through
// in this operand order), then one rounding to f32.
template <>
void AddDequantized<F32>(const int8_t* q, float scale, size_t len, char* base) {
  const __m128d s = _mm_set1_pd(scale);
  const __m128d hi = _mm_set1_pd(FLT_MAX), lo = _mm_set1_pd(-double{FLT_MAX});
  auto finish = [&](__m128d b, __m128d qd) {
    return _mm_cvtpd_ps(_mm_min_pd(hi, _mm_max_pd(lo, _mm_add_pd(b, _mm_mul_pd(qd, s)))));
  };
  size_t j = 0;
  for (; j + 4 <= len; j += 4) {
    int32_t four;
    std::memcpy(&four, q + j, 4);
    __m128i x = _mm_cvtsi32_si128(four);
    x = _mm_unpacklo_epi8(x, x);
    x = _mm_srai_epi32(_mm_unpacklo_epi16(x, x), 24);  // sign-extended to int32
    char* p = base + 4 * j;
    const __m128 b = _mm_loadu_ps(reinterpret_cast<const float*>(p));
    const __m128 r01 = finish(_mm_cvtps_pd(b), _mm_cvtepi32_pd(x));
    const __m128 r23 =
        finish(_mm_cvtps_pd(_mm_movehl_ps(b, b)), _mm_cvtepi32_pd(_mm_shuffle_epi32(x, 0x0e)));
    _mm_storeu_ps(reinterpret_cast<float*>(p), _mm_movelh_ps(r01, r23));
  }
  for (; j < len; ++j) {
    char* p = base + 4 * j;
    F32::Store(p, F32::Load(p) + q[j] * double{scale});
  }
}
#endif

// Quantizes raw - base block by block into `scales` and `q`. InvalidArgument
// for non-finite values or a block whose scale does not fit an f32.
template <typename T>
Status QuantizeDelta(const char* raw, const char* base, size_t n, char* scales, int8_t* q) {
  double d[kQ8Block];
  for (size_t begin = 0; begin < n; begin += kQ8Block) {
    const size_t len = std::min(kQ8Block, n - begin);
    const size_t offset = begin * T::kSize;
    double max_abs = 0;
    bool finite = true;
    for (size_t j = 0; j < len; ++j) {
      d[j] = T::Load(raw + offset + j * T::kSize) - T::Load(base + offset + j * T::kSize);
      double a = std::fabs(d[j]);
      finite &= a <= DBL_MAX;  // false for NaN too
      max_abs = std::max(max_abs, a);
    }
    if (!finite) {
      return InvalidArgumentError(
          fmt::format("q8-delta: non-finite value or difference near element {}", begin));
    }
    if (max_abs / 127 > FLT_MAX) {
      return InvalidArgumentError(fmt::format(
          "q8-delta: difference {} near element {} too large for an f32 scale", max_abs, begin));
    }
    const auto scale = static_cast<float>(max_abs / 127);
    std::memcpy(scales + 4 * (begin / kQ8Block), &scale, 4);
    const double inverse = scale > 0 ? 1.0 / scale : 0.0;
    for (size_t j = 0; j < len; ++j) {
      q[begin + j] = static_cast<int8_t>(RoundEven(Clamp(d[j] * inverse, 127)));
    }
  }
  return Status::Ok();
}

// dst += the dequantized payload of n elements (both encoder and decoder).
template <typename T>
void DequantizeInto(const char* payload, size_t n, char* dst) {
  const char* scales = payload + 4;
  const auto* q = reinterpret_cast<const int8_t*>(scales + 4 * Q8Blocks(n));
  for (size_t begin = 0; begin < n; begin += kQ8Block) {
    float scale;
    std::memcpy(&scale, scales + 4 * (begin / kQ8Block), 4);
    AddDequantized<T>(q + begin, scale, std::min(kQ8Block, n - begin), dst + begin * T::kSize);
  }
}

// Checks a decompressed q8 payload for `n` elements before anything is
// written: the count, finite non-negative scales, no -128.
Status ValidateQ8(const char* payload, size_t n) {
  uint32_t count;
  std::memcpy(&count, payload, 4);
  if (count != n) {
    return DataLossError(fmt::format("q8-delta: {} elements stored, {} expected", count, n));
  }
  for (size_t b = 0; b < Q8Blocks(n); ++b) {
    float s;
    std::memcpy(&s, payload + 4 + 4 * b, 4);
    if (!(s >= 0 && s <= FLT_MAX)) return DataLossError("q8-delta: bad block scale");
  }
  const char* q = payload + 4 + 4 * Q8Blocks(n);
  if (n > 0 && std::memchr(q, 0x80, n) != nullptr) {  // int8 -128
    return DataLossError("q8-delta: value -128 out of range");
  }
  return Status::Ok();
}

// Grows a scratch buffer (never shrinks it, so steady state allocates nothing).
char* Scratch(std::string* s, size_t n) {
  if (s->size() < n) s->resize(n);
  return s->data();
}

}  // namespace

std::string_view CodecName(Codec c) {
  switch (c) {
    case Codec::kRaw:
      return "raw";
    case Codec::kShuffleZstd:
      return "shuffle-zstd";
    case Codec::kXorDelta:
      return "xor-delta";
    case Codec::kQ8Delta:
      return "q8-delta";
    case Codec::kPlanesZstd:
      return "planes-zstd";
    case Codec::kSubDelta:
      return "sub-delta";
  }
  return "invalid";
}

Result<Codec> ParseCodec(std::string_view name) {
  for (int i = 0; i < kNumCodecs; ++i) {
    auto c = static_cast<Codec>(i);
    if (CodecName(c) == name) return c;
  }
  return InvalidArgumentError(
      fmt::format("unknown codec '{}' (want raw, shuffle-zstd, xor-delta, q8-delta, planes-zstd "
                  "or sub-delta)",
                  name));
}

bool SupportsQ8(DType t) {
  return t == DType::kF32 || t == DType::kF64 || t == DType::kF16 || t == DType::kBF16;
}

void ShuffleBytes(std::span<const char> src, size_t elem_size, std::span<char> dst) {
  assert(elem_size > 0 && src.size() == dst.size() && src.size() % elem_size == 0);
  const size_t n = src.size() / elem_size;
  switch (elem_size) {
    case 1:
      if (n) std::memcpy(dst.data(), src.data(), n);
      return;
    case 2:
      return ShuffleTail<2>(src.data(), n, Shuffle2Simd(src.data(), n, dst.data()), dst.data());
    case 4:
      return ShuffleTail<4>(src.data(), n, Shuffle4Simd(src.data(), n, dst.data()), dst.data());
    case 8:
      return ShuffleTail<8>(src.data(), n, Shuffle8Simd(src.data(), n, dst.data()), dst.data());
  }
  for (size_t i = 0; i < n; ++i) {
    for (size_t p = 0; p < elem_size; ++p) dst[p * n + i] = src[i * elem_size + p];
  }
}

namespace {

// dst[i * elem_size + p] = planes[p][i] for n elements of elem_size 2, 4 or 8.
void UnshufflePlanes(const char* const* planes, size_t elem_size, size_t n, char* d) {
  switch (elem_size) {
    case 2:
      return UnshuffleTail<2>(planes, n, Unshuffle2Simd(planes, n, d), d);
    case 4:
      return UnshuffleTail<4>(planes, n, Unshuffle4Simd(planes, n, d), d);
    default:
      return UnshuffleTail<8>(planes, n, Unshuffle8Simd(planes, n, d), d);
  }
}

}  // namespace

void UnshuffleBytes(std::span<const char> src, size_t elem_size, std::span<char> dst) {
  assert(elem_size > 0 && src.size() == dst.size() && src.size() % elem_size == 0);
  const size_t n = src.size() / elem_size;
  const char* s = src.data();
  char* d = dst.data();
  if (elem_size == 2 || elem_size == 4 || elem_size == 8) {
    const char* planes[8];
    for (size_t p = 0; p < elem_size; ++p) planes[p] = s + p * n;
    return UnshufflePlanes(planes, elem_size, n, d);
  }
  if (elem_size == 1) {
    if (n) std::memcpy(d, s, n);
    return;
  }
  for (size_t i = 0; i < n; ++i) {
    for (size_t p = 0; p < elem_size; ++p) d[i * elem_size + p] = s[p * n + i];
  }
}

// ---------------------------------------------------------------------------

struct ChunkCodec::Impl {
  explicit Impl(int level) : cctx(ZSTD_createCCtx()), dctx(ZSTD_createDCtx()) {
    if (cctx) ZSTD_CCtx_setParameter(cctx, ZSTD_c_compressionLevel, level);
  }
  ~Impl() {
    ZSTD_freeCCtx(cctx);
    ZSTD_freeDCtx(dctx);
  }

  // out = one zstd frame of src (content size recorded).
  Status Compress(std::string_view src, std::string* out) {
    if (!cctx) return InternalError("zstd: cannot create a compression context");
    char* z = Scratch(&compressed, ZSTD_compressBound(src.size()));
    size_t n = ZSTD_compress2(cctx, z, compressed.size(), src.data(), src.size());
    if (ZSTD_isError(n)) return InternalError(fmt::format("zstd: {}", ZSTD_getErrorName(n)));
    out->assign(z, n);
    return Status::Ok();
  }

  // Decompresses `stored`, which must be exactly one frame holding exactly
  // `size` bytes, into dst.
  Status Decompress(std::string_view stored, size_t size, char* dst) {
    return DecompressFrame(dctx, stored, {dst, size});
  }

  Status EncodeQ8(DType dtype, std::span<const char> raw, std::span<char> base, std::string* out) {
    const size_t n = raw.size() / DTypeSize(dtype);
    if (n > UINT32_MAX) return InvalidArgumentError("q8-delta: chunk too large");
    char* p = Scratch(&scratch_a, Q8Bytes(n));
    const auto count = static_cast<uint32_t>(n);
    std::memcpy(p, &count, 4);
    char* scales = p + 4;
    auto* q = reinterpret_cast<int8_t*>(scales + 4 * Q8Blocks(n));
    SPOT_RETURN_IF_ERROR(VisitFloat(dtype, [&]<typename T>(T) {
      return QuantizeDelta<T>(raw.data(), base.data(), n, scales, q);
    }));
    SPOT_RETURN_IF_ERROR(Compress({p, Q8Bytes(n)}, out));
    // base changes only after everything else succeeded, so on failure the
    // caller can still fall back to another codec against the same base.
    VisitFloat(dtype, [&]<typename T>(T) { DequantizeInto<T>(p, n, base.data()); });
    return Status::Ok();
  }

  Status DecodeQ8(DType dtype, std::string_view stored, std::span<char> dst) {
    const size_t n = dst.size() / DTypeSize(dtype);
    char* p = Scratch(&scratch_a, Q8Bytes(n));
    SPOT_RETURN_IF_ERROR(Decompress(stored, Q8Bytes(n), p));
    SPOT_RETURN_IF_ERROR(ValidateQ8(p, n));
    VisitFloat(dtype, [&]<typename T>(T) { DequantizeInto<T>(p, n, dst.data()); });
    return Status::Ok();
  }

  ZSTD_CCtx* cctx;
  ZSTD_DCtx* dctx;
  // Scratch, grown on demand and kept: shuffled, XORed or q8 bytes, and zstd output.
  std::string scratch_a, scratch_b, compressed;
};

ChunkCodec::ChunkCodec(int zstd_level) : impl_(std::make_unique<Impl>(zstd_level)) {}
ChunkCodec::~ChunkCodec() = default;

Status ChunkCodec::Encode(Codec codec, DType dtype, std::span<const char> raw, std::span<char> base,
                          std::string* out) {
  const size_t es = DTypeSize(dtype);
  if (es == 0) return InvalidArgumentError("invalid dtype");
  if (raw.size() % es != 0) {
    return InvalidArgumentError(
        fmt::format("{} bytes is not a whole number of {} elements", raw.size(), DTypeName(dtype)));
  }
  if (IsDelta(codec) && base.size() != raw.size()) {
    return InvalidArgumentError(
        fmt::format("base has {} bytes, chunk {}", base.size(), raw.size()));
  }
  Impl& m = *impl_;
  switch (codec) {
    case Codec::kRaw:
      out->assign(raw.data(), raw.size());
      return Status::Ok();
    case Codec::kShuffleZstd: {
      if (es == 1) return m.Compress({raw.data(), raw.size()}, out);
      char* s = Scratch(&m.scratch_a, raw.size());
      ShuffleBytes(raw, es, {s, raw.size()});
      return m.Compress({s, raw.size()}, out);
    }
    case Codec::kXorDelta: {
      char* x = Scratch(&m.scratch_a, raw.size());
      Xor(raw.data(), base.data(), raw.size(), x);
      if (es == 1) return m.Compress({x, raw.size()}, out);
      char* s = Scratch(&m.scratch_b, raw.size());
      ShuffleBytes({x, raw.size()}, es, {s, raw.size()});
      return m.Compress({s, raw.size()}, out);
    }
    case Codec::kQ8Delta:
      if (!SupportsQ8(dtype)) {
        return InvalidArgumentError(
            fmt::format("q8-delta does not apply to {} records", DTypeName(dtype)));
      }
      return m.EncodeQ8(dtype, raw, base, out);
    case Codec::kPlanesZstd: {
      out->clear();
      constexpr PlaneFrames kFull = PlaneFrames::kLiteralsFirst;
      if (es == 1) {
        return EncodePlanes({raw.data(), raw.size()}, 1, kFull, m.cctx, &m.compressed, out);
      }
      char* s = Scratch(&m.scratch_a, raw.size());
      ShuffleBytes(raw, es, {s, raw.size()});
      return EncodePlanes({s, raw.size()}, es, kFull, m.cctx, &m.compressed, out);
    }
    case Codec::kSubDelta: {
      out->clear();
      char* d = Scratch(&m.scratch_a, raw.size());
      ZigzagDelta(raw, base, es, {d, raw.size()});
      constexpr PlaneFrames kDelta = PlaneFrames::kMatches;
      if (es == 1) return EncodePlanes({d, raw.size()}, 1, kDelta, m.cctx, &m.compressed, out);
      char* s = Scratch(&m.scratch_b, raw.size());
      ShuffleBytes({d, raw.size()}, es, {s, raw.size()});
      return EncodePlanes({s, raw.size()}, es, kDelta, m.cctx, &m.compressed, out);
    }
  }
  return InvalidArgumentError(fmt::format("unknown codec {}", static_cast<int>(codec)));
}

Status ChunkCodec::Decode(Codec codec, DType dtype, std::string_view stored, std::span<char> dst) {
  const size_t es = DTypeSize(dtype);
  if (es == 0) return InvalidArgumentError("invalid dtype");
  if (dst.size() % es != 0) {
    return InvalidArgumentError(
        fmt::format("{} bytes is not a whole number of {} elements", dst.size(), DTypeName(dtype)));
  }
  Impl& m = *impl_;
  switch (codec) {
    case Codec::kRaw:
      if (stored.size() != dst.size()) {
        return DataLossError(fmt::format("{} raw bytes, {} expected", stored.size(), dst.size()));
      }
      if (!dst.empty()) std::memcpy(dst.data(), stored.data(), dst.size());
      return Status::Ok();
    case Codec::kShuffleZstd: {
      if (es == 1) return m.Decompress(stored, dst.size(), dst.data());
      char* s = Scratch(&m.scratch_a, dst.size());
      SPOT_RETURN_IF_ERROR(m.Decompress(stored, dst.size(), s));
      UnshuffleBytes({s, dst.size()}, es, dst);
      return Status::Ok();
    }
    case Codec::kXorDelta: {
      char* s = Scratch(&m.scratch_a, dst.size());
      SPOT_RETURN_IF_ERROR(m.Decompress(stored, dst.size(), s));
      if (es > 1) {
        char* u = Scratch(&m.scratch_b, dst.size());
        UnshuffleBytes({s, dst.size()}, es, {u, dst.size()});
        s = u;
      }
      Xor(dst.data(), s, dst.size(), dst.data());
      return Status::Ok();
    }
    case Codec::kQ8Delta:
      if (!SupportsQ8(dtype)) {
        return DataLossError(fmt::format("q8-delta on a {} record", DTypeName(dtype)));
      }
      return m.DecodeQ8(dtype, stored, dst);
    case Codec::kPlanesZstd: {
      if (es == 1) return DecodePlanes(stored, 1, m.dctx, dst);
      // Planes stored as is are unshuffled from where they lie in `stored`.
      const char* planes[8];
      char* s = Scratch(&m.scratch_a, dst.size());
      SPOT_RETURN_IF_ERROR(
          DecodePlanesInPlace(stored, es, dst.size(), m.dctx, {s, dst.size()}, planes));
      UnshufflePlanes(planes, es, dst.size() / es, dst.data());
      return Status::Ok();
    }
    case Codec::kSubDelta: {
      char* s = Scratch(&m.scratch_a, dst.size());
      if (es == 1) {
        SPOT_RETURN_IF_ERROR(DecodePlanes(stored, es, m.dctx, {s, dst.size()}));
      } else {
        const char* planes[8];
        SPOT_RETURN_IF_ERROR(
            DecodePlanesInPlace(stored, es, dst.size(), m.dctx, {s, dst.size()}, planes));
        // Block by block through a buffer that stays in L1: the differences
        // are added as soon as they are unshuffled.
        constexpr size_t kBlockBytes = 16 << 10;
        alignas(64) char block[kBlockBytes];
        const size_t n = dst.size() / es, per = kBlockBytes / es;
        for (size_t i = 0; i < n; i += per) {
          const size_t count = std::min(per, n - i);
          const char* at[8];
          for (size_t p = 0; p < es; ++p) at[p] = planes[p] + i;
          UnshufflePlanes(at, es, count, block);
          AddZigzagDelta({block, count * es}, es, dst.subspan(i * es, count * es));
        }
        return Status::Ok();
      }
      AddZigzagDelta({s, dst.size()}, es, dst);
      return Status::Ok();
    }
  }
  return DataLossError(fmt::format("unknown codec {}", static_cast<int>(codec)));
}

// Where the bound comes from, for a block whose largest |raw - base| is m:
//  - Quantization. The scale s = f32(m / 127), so s <= m/127 * (1 + 2^-23)
//    while it is a normal f32, and every element has |d - q*s| <= s/2 (the
//    block's largest lands within 127 * (1 +- 2^-23) < 127.5 steps). A
//    subnormal or underflowed scale is off by at most 2^-150, which the clamp
//    at +-127 can turn into 127 * 2^-150 < 2^-142. The difference d and d/s
//    are computed in double: a relative 2^-50 of m covers both.
//  - Reconstruction. base + q*s is exact before rounding to double (relative
//    2^-53) and then to the dtype: half an ulp, relative u = 2^-24 (f32, taken
//    as 2^-23 to cover the double rounding), 2^-11 (f16), 2^-8 (bf16), none
//    further for f64 (2^-53 in all), of a result at most |value| + the
//    quantization error; plus half the smallest subnormal step of the dtype
//    for results in the subnormal range. Saturation at the dtype's largest
//    finite value only moves the result towards the saved value.
double FloatElement(DType dtype, std::string_view bytes, size_t i) {
  return VisitFloat(dtype, [&](auto e) { return e.Load(bytes.data() + i * e.kSize); });
}

double Q8ErrorBound(double max_abs_delta, double value_magnitude, DType dtype) {
  double relative, absolute;
  switch (dtype) {
    case DType::kF32:
      relative = 0x1p-23, absolute = 0x1p-150;
      break;
    case DType::kF64:
      relative = 0x1p-53, absolute = 0x1p-1074;
      break;  // the smallest subnormal
    case DType::kF16:
      relative = 0x1p-11 + 0x1p-52, absolute = 0x1p-25;
      break;
    case DType::kBF16:
      relative = 0x1p-8 + 0x1p-52, absolute = 0x1p-134;
      break;
    default:
      return 0;  // q8-delta never applies
  }
  const double m = std::fabs(max_abs_delta);
  const double quantization = 0.5 * m / 127 * (1 + 0x1p-23) + m * 0x1p-50 + 0x1p-142;
  return quantization + relative * (std::fabs(value_magnitude) + quantization) + absolute;
}

}  // namespace spot::ckpt
