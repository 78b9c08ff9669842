#include "ckpt/codec.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cfloat>
#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <utility>
#include <vector>

namespace spot::ckpt {
namespace {

constexpr Codec kAllCodecs[] = {Codec::kRaw,     Codec::kShuffleZstd, Codec::kXorDelta,
                                Codec::kQ8Delta, Codec::kPlanesZstd,  Codec::kSubDelta};
constexpr Codec kLossless[] = {Codec::kRaw, Codec::kShuffleZstd, Codec::kXorDelta,
                               Codec::kPlanesZstd, Codec::kSubDelta};
constexpr DType kFloatDTypes[] = {DType::kF32, DType::kF64, DType::kF16, DType::kBF16};

std::vector<DType> AllDTypes() {
  std::vector<DType> all;
  for (int i = 0; i < kNumDTypes; ++i) all.push_back(static_cast<DType>(i));
  return all;
}

std::string RandomBytes(size_t n, std::mt19937_64& rng) {
  std::string s(n, '\0');
  for (char& c : s) c = static_cast<char>(rng());
  return s;
}

std::span<char> Span(std::string& s) { return {s.data(), s.size()}; }
std::span<const char> CSpan(const std::string& s) { return {s.data(), s.size()}; }

// Independent of codec.cc's converters: the value of one element.
double ValueAt(DType t, const std::string& bytes, size_t i) {
  const char* p = bytes.data() + i * DTypeSize(t);
  switch (t) {
    case DType::kF32: {
      float f;
      std::memcpy(&f, p, 4);
      return f;
    }
    case DType::kF64: {
      double d;
      std::memcpy(&d, p, 8);
      return d;
    }
    case DType::kF16: {
      uint16_t h;
      std::memcpy(&h, p, 2);
      int exp = (h >> 10) & 0x1f, man = h & 0x3ff;
      double v = exp == 0 ? std::ldexp(man, -24) : std::ldexp(1024 + man, exp - 25);
      return (h & 0x8000) ? -v : v;
    }
    case DType::kBF16: {
      uint16_t h;
      std::memcpy(&h, p, 2);
      uint32_t bits = uint32_t{h} << 16;
      float f;
      std::memcpy(&f, &bits, 4);
      return f;
    }
    default:
      return 0;
  }
}

// Finite values of a float dtype, magnitudes around 2^-6 .. 2^2.
std::string RandomFloats(DType t, size_t n, std::mt19937_64& rng) {
  std::string s(n * DTypeSize(t), '\0');
  std::normal_distribution<double> normal(0, 1);
  for (size_t i = 0; i < n; ++i) {
    double v = normal(rng);
    char* p = s.data() + i * DTypeSize(t);
    if (t == DType::kF64) {
      std::memcpy(p, &v, 8);
    } else if (t == DType::kF32) {
      auto f = static_cast<float>(v);
      std::memcpy(p, &f, 4);
    } else if (t == DType::kBF16) {
      auto f = static_cast<float>(v);
      uint32_t bits;
      std::memcpy(&bits, &f, 4);
      auto h = static_cast<uint16_t>(bits >> 16);
      std::memcpy(p, &h, 2);
    } else {  // f16: sign, exponent 9..17 (2^-6 .. 2^2), random fraction
      auto h =
          static_cast<uint16_t>(((rng() & 1) << 15) | ((9 + rng() % 9) << 10) | (rng() & 0x3ff));
      std::memcpy(p, &h, 2);
    }
  }
  return s;
}

// Moves each element a few units in the last place (in bit space): a small,
// finite drift for any float dtype.
std::string Perturb(DType t, const std::string& base, int max_ulps, std::mt19937_64& rng) {
  std::string s = base;
  const size_t es = DTypeSize(t);
  for (size_t i = 0; i < s.size() / es; ++i) {
    uint64_t bits = 0;
    std::memcpy(&bits, s.data() + i * es, es);
    bits += static_cast<int64_t>(rng() % (2 * max_ulps + 1)) - max_ulps;
    std::memcpy(s.data() + i * es, &bits, es);
  }
  return s;
}

// Checks every element of `decoded` against `raw` within Q8ErrorBound, with
// each block's largest difference between raw and `base`.
void ExpectWithinQ8Bound(DType t, const std::string& raw, const std::string& base,
                         const std::string& decoded) {
  const size_t n = raw.size() / DTypeSize(t);
  for (size_t begin = 0; begin < n; begin += kQ8Block) {
    const size_t end = std::min(n, begin + kQ8Block);
    double max_abs = 0;
    for (size_t i = begin; i < end; ++i) {
      max_abs = std::max(max_abs, std::fabs(ValueAt(t, raw, i) - ValueAt(t, base, i)));
    }
    for (size_t i = begin; i < end; ++i) {
      double want = ValueAt(t, raw, i), got = ValueAt(t, decoded, i);
      ASSERT_LE(std::fabs(got - want), Q8ErrorBound(max_abs, std::fabs(want), t))
          << DTypeName(t) << " element " << i << " want " << want << " got " << got
          << " block max delta " << max_abs;
    }
  }
}

TEST(CodecTest, NamesRoundTrip) {
  for (Codec c : kAllCodecs) {
    auto parsed = ParseCodec(CodecName(c));
    ASSERT_TRUE(parsed.ok()) << CodecName(c);
    EXPECT_EQ(*parsed, c);
  }
  EXPECT_EQ(CodecName(Codec::kShuffleZstd), "shuffle-zstd");
  EXPECT_EQ(ParseCodec("lz4").status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(ParseCodec("").status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(CodecName(Codec::kPlanesZstd), "planes-zstd");
  EXPECT_EQ(CodecName(Codec::kSubDelta), "sub-delta");
  EXPECT_TRUE(IsDelta(Codec::kXorDelta));
  EXPECT_TRUE(IsDelta(Codec::kSubDelta));
  EXPECT_FALSE(IsDelta(Codec::kShuffleZstd));
  EXPECT_FALSE(IsDelta(Codec::kPlanesZstd));
}

TEST(CodecTest, SupportsQ8OnlyFloats) {
  for (DType t : AllDTypes()) {
    bool is_float = t == DType::kF32 || t == DType::kF64 || t == DType::kF16 || t == DType::kBF16;
    EXPECT_EQ(SupportsQ8(t), is_float) << DTypeName(t);
  }
}

TEST(ShuffleTest, MatchesDefinitionAndInverts) {
  std::mt19937_64 rng(1);
  for (size_t es : {1, 2, 3, 4, 8, 16}) {
    for (size_t n : {0, 1, 2, 7, 15, 16, 17, 31, 32, 33, 63, 100, 257, 1000, 4099}) {
      const std::string src = RandomBytes(n * es, rng);
      std::string shuffled(src.size(), '\0'), back(src.size(), '\0');
      ShuffleBytes(CSpan(src), es, Span(shuffled));
      for (size_t i = 0; i < n; ++i) {
        for (size_t p = 0; p < es; ++p) {
          ASSERT_EQ(shuffled[p * n + i], src[i * es + p]) << es << " " << n << " " << i << " " << p;
        }
      }
      UnshuffleBytes(CSpan(shuffled), es, Span(back));
      ASSERT_EQ(back, src) << "elem_size " << es << " n " << n;
    }
  }
}

TEST(ChunkCodecTest, LosslessCodecsRoundTripEveryDType) {
  std::mt19937_64 rng(2);
  ChunkCodec codec;
  for (Codec c : kLossless) {
    for (DType t : AllDTypes()) {
      for (size_t n : {0, 1, 3, 17, 1000, 4099, 20011}) {
        SCOPED_TRACE(std::string(CodecName(c)) + " " + std::string(DTypeName(t)) +
                     " n=" + std::to_string(n));
        const std::string raw = RandomBytes(n * DTypeSize(t), rng);
        std::string base = raw;
        for (size_t i = 0; i < base.size(); i += 5) base[i] = static_cast<char>(rng());
        const std::string base_before = base;
        std::string stored;
        ASSERT_TRUE(codec.Encode(c, t, CSpan(raw), Span(base), &stored).ok());
        EXPECT_EQ(base, base_before);
        std::string dst = base;  // delta codecs start from the base
        Status s = codec.Decode(c, t, stored, Span(dst));
        ASSERT_TRUE(s.ok()) << s.ToString();
        EXPECT_EQ(dst, raw);
      }
    }
  }
}

TEST(ChunkCodecTest, NonDeltaCodecsIgnoreBase) {
  std::mt19937_64 rng(3);
  ChunkCodec codec;
  const std::string raw = RandomFloats(DType::kF32, 300, rng);
  for (Codec c : {Codec::kRaw, Codec::kShuffleZstd, Codec::kPlanesZstd}) {
    std::string stored;
    ASSERT_TRUE(codec.Encode(c, DType::kF32, CSpan(raw), {}, &stored).ok());
    std::string dst(raw.size(), 'x');
    ASSERT_TRUE(codec.Decode(c, DType::kF32, stored, Span(dst)).ok());
    EXPECT_EQ(dst, raw);
  }
}

TEST(ChunkCodecTest, Q8RoundTripsFloatDTypesWithinBound) {
  std::mt19937_64 rng(4);
  ChunkCodec codec;
  for (DType t : kFloatDTypes) {
    for (size_t n : {0, 1, 255, 256, 257, 1000, 4099}) {
      SCOPED_TRACE(std::string(DTypeName(t)) + " n=" + std::to_string(n));
      const std::string base = RandomFloats(t, n, rng);
      const std::string raw = Perturb(t, base, 1000, rng);
      std::string enc_base = base, stored;
      Status s = codec.Encode(Codec::kQ8Delta, t, CSpan(raw), Span(enc_base), &stored);
      ASSERT_TRUE(s.ok()) << s.ToString();
      std::string dst = base;
      s = codec.Decode(Codec::kQ8Delta, t, stored, Span(dst));
      ASSERT_TRUE(s.ok()) << s.ToString();
      EXPECT_EQ(dst, enc_base) << "encoder and decoder disagree";
      ExpectWithinQ8Bound(t, raw, base, dst);
    }
  }
}

TEST(ChunkCodecTest, Q8IsExactForIntegerDeltasUpTo127) {
  // With a block maximum of exactly 127 the scale is 1 and every integer
  // difference survives; the values stay exactly representable in each dtype.
  ChunkCodec codec;
  for (DType t : kFloatDTypes) {
    const size_t n = 3 * kQ8Block + 10;  // the last, short block has an element 7 too
    std::string base(n * DTypeSize(t), '\0'), raw = base;
    std::vector<double> want(n);
    for (size_t i = 0; i < n; ++i) {
      double b = 64.0 * (i % 3), d = (i % kQ8Block == 7) ? 127 : static_cast<double>(i % 255) - 127;
      want[i] = b + d;
      // Small integers: exact in every dtype.
      for (auto [dst, v] : {std::pair{&base, b}, std::pair{&raw, b + d}}) {
        char* p = dst->data() + i * DTypeSize(t);
        if (t == DType::kF64) {
          std::memcpy(p, &v, 8);
        } else {
          auto f = static_cast<float>(v);
          uint32_t bits;
          std::memcpy(&bits, &f, 4);
          if (t == DType::kF32) {
            std::memcpy(p, &f, 4);
          } else if (t == DType::kBF16) {
            auto h = static_cast<uint16_t>(bits >> 16);  // exact: <= 8 significant bits
            std::memcpy(p, &h, 2);
          } else {
            int e;
            double m = std::frexp(std::fabs(v), &e);  // v = m * 2^e, m in [0.5, 1)
            uint16_t h =
                v == 0
                    ? 0
                    : static_cast<uint16_t>(((e + 14) << 10) | (static_cast<int>(m * 2048) - 1024));
            if (v < 0) h |= 0x8000;
            std::memcpy(p, &h, 2);
          }
        }
      }
    }
    for (size_t i = 0; i < n; ++i) ASSERT_EQ(ValueAt(t, raw, i), want[i]) << DTypeName(t) << i;
    std::string enc_base = base, stored;
    ASSERT_TRUE(codec.Encode(Codec::kQ8Delta, t, CSpan(raw), Span(enc_base), &stored).ok());
    std::string dst = base;
    ASSERT_TRUE(codec.Decode(Codec::kQ8Delta, t, stored, Span(dst)).ok());
    EXPECT_EQ(dst, raw) << DTypeName(t);
    EXPECT_EQ(enc_base, raw) << DTypeName(t);
  }
}

TEST(ChunkCodecTest, Q8ChainOfDeltasDoesNotAccumulateError) {
  std::mt19937_64 rng(5);
  std::normal_distribution<float> init(0, 0.05f), step(0, 1e-4f);
  ChunkCodec writer, reader;
  const size_t n = 100 * kQ8Block + 77;
  std::vector<float> truth(n);
  for (float& v : truth) v = init(rng);
  std::string reader_state(reinterpret_cast<const char*>(truth.data()), n * 4);
  std::string writer_base = reader_state;  // the full checkpoint both sides start from
  for (int k = 0; k < 20; ++k) {
    SCOPED_TRACE("step " + std::to_string(k));
    for (float& v : truth) v += step(rng) + 2e-5f;  // drift, like optimizer steps
    const std::string raw(reinterpret_cast<const char*>(truth.data()), n * 4);
    const std::string base_before = writer_base;
    std::string stored;
    ASSERT_TRUE(
        writer.Encode(Codec::kQ8Delta, DType::kF32, CSpan(raw), Span(writer_base), &stored).ok());
    ASSERT_TRUE(reader.Decode(Codec::kQ8Delta, DType::kF32, stored, Span(reader_state)).ok());
    ASSERT_EQ(reader_state, writer_base) << "bit-for-bit agreement";
    ExpectWithinQ8Bound(DType::kF32, raw, base_before, reader_state);
    EXPECT_LT(stored.size(), raw.size() / 3);
  }
}

TEST(ChunkCodecTest, Q8ChainStaysWithinBoundForNarrowDTypes) {
  std::mt19937_64 rng(6);
  ChunkCodec codec;
  for (DType t : {DType::kF16, DType::kBF16, DType::kF64}) {
    std::string truth = RandomFloats(t, 2000, rng);
    std::string base = truth, state = truth;
    for (int k = 0; k < 20; ++k) {
      truth = Perturb(t, truth, 3, rng);
      const std::string base_before = base;
      std::string stored;
      ASSERT_TRUE(codec.Encode(Codec::kQ8Delta, t, CSpan(truth), Span(base), &stored).ok());
      ASSERT_TRUE(codec.Decode(Codec::kQ8Delta, t, stored, Span(state)).ok());
      ASSERT_EQ(state, base) << DTypeName(t) << " step " << k;
      ExpectWithinQ8Bound(t, truth, base_before, state);
    }
  }
}

TEST(ChunkCodecTest, Q8SaturatesInsteadOfOverflowing) {
  ChunkCodec codec;
  // f16: from -65504 to +65504, the reconstruction must not round to infinity.
  std::string base(2 * kQ8Block, '\0'), raw = base;
  for (size_t i = 0; i < kQ8Block; ++i) {
    uint16_t lo = 0xfbff, hi = 0x7bff;  // -65504, +65504
    std::memcpy(base.data() + 2 * i, &lo, 2);
    std::memcpy(raw.data() + 2 * i, &hi, 2);
  }
  std::string enc = base, stored;
  ASSERT_TRUE(codec.Encode(Codec::kQ8Delta, DType::kF16, CSpan(raw), Span(enc), &stored).ok());
  std::string dst = base;
  ASSERT_TRUE(codec.Decode(Codec::kQ8Delta, DType::kF16, stored, Span(dst)).ok());
  for (size_t i = 0; i < kQ8Block; ++i) ASSERT_TRUE(std::isfinite(ValueAt(DType::kF16, dst, i)));
  ExpectWithinQ8Bound(DType::kF16, raw, base, dst);

  // f32: from -FLT_MAX to FLT_MAX.
  std::vector<float> b(kQ8Block, -FLT_MAX), r(kQ8Block, FLT_MAX);
  std::string b32(reinterpret_cast<char*>(b.data()), b.size() * 4);
  std::string r32(reinterpret_cast<char*>(r.data()), r.size() * 4);
  enc = b32;
  ASSERT_TRUE(codec.Encode(Codec::kQ8Delta, DType::kF32, CSpan(r32), Span(enc), &stored).ok());
  dst = b32;
  ASSERT_TRUE(codec.Decode(Codec::kQ8Delta, DType::kF32, stored, Span(dst)).ok());
  EXPECT_EQ(dst, enc);
  ExpectWithinQ8Bound(DType::kF32, r32, b32, dst);
}

TEST(ChunkCodecTest, Q8HandlesTinyDifferences) {
  // Subnormal f32 values: the scale underflows or is subnormal itself.
  ChunkCodec codec;
  std::vector<float> b(600), r(600);
  for (size_t i = 0; i < b.size(); ++i) {
    b[i] = std::ldexp(static_cast<float>(i % 13), -149);
    r[i] = std::ldexp(static_cast<float>((i * 7) % 11), -149 + static_cast<int>(i / 100));
  }
  std::string b32(reinterpret_cast<char*>(b.data()), b.size() * 4);
  std::string r32(reinterpret_cast<char*>(r.data()), r.size() * 4);
  std::string enc = b32, stored;
  ASSERT_TRUE(codec.Encode(Codec::kQ8Delta, DType::kF32, CSpan(r32), Span(enc), &stored).ok());
  std::string dst = b32;
  ASSERT_TRUE(codec.Decode(Codec::kQ8Delta, DType::kF32, stored, Span(dst)).ok());
  EXPECT_EQ(dst, enc);
  ExpectWithinQ8Bound(DType::kF32, r32, b32, dst);
}

TEST(ChunkCodecTest, Q8RefusesIntegerDTypesAndNonFiniteValues) {
  ChunkCodec codec;
  for (DType t : AllDTypes()) {
    if (SupportsQ8(t)) continue;
    std::string raw(8 * DTypeSize(t), '\1'), base(raw.size(), '\0'), stored;
    EXPECT_EQ(codec.Encode(Codec::kQ8Delta, t, CSpan(raw), Span(base), &stored).code(),
              StatusCode::kInvalidArgument)
        << DTypeName(t);
    EXPECT_EQ(codec.Decode(Codec::kQ8Delta, t, "whatever", Span(base)).code(),
              StatusCode::kDataLoss)
        << DTypeName(t);
  }
  for (float bad : {NAN, INFINITY, -INFINITY}) {
    std::vector<float> r(700, 1.0f), b(700, 0.5f);
    r[650] = bad;
    std::string raw(reinterpret_cast<char*>(r.data()), r.size() * 4);
    std::string base(reinterpret_cast<char*>(b.data()), b.size() * 4);
    const std::string base_before = base;
    std::string stored;
    EXPECT_EQ(codec.Encode(Codec::kQ8Delta, DType::kF32, CSpan(raw), Span(base), &stored).code(),
              StatusCode::kInvalidArgument);
    EXPECT_EQ(base, base_before) << "base untouched on failure";
    // The same with the bad value in the base.
    std::swap(raw, base);
    EXPECT_EQ(codec.Encode(Codec::kQ8Delta, DType::kF32, CSpan(raw), Span(base), &stored).code(),
              StatusCode::kInvalidArgument);
  }
  // f64 differences too large for an f32 scale.
  std::vector<double> r(10, 1e300), b(10, -1e300);
  std::string raw(reinterpret_cast<char*>(r.data()), 80),
      base(reinterpret_cast<char*>(b.data()), 80);
  std::string stored;
  EXPECT_EQ(codec.Encode(Codec::kQ8Delta, DType::kF64, CSpan(raw), Span(base), &stored).code(),
            StatusCode::kInvalidArgument);
}

TEST(ChunkCodecTest, EncodeRejectsSizesThatDoNotFit) {
  ChunkCodec codec;
  std::string raw(10, 'a'), base(10, 'b'), short_base(8, 'b'), stored;
  for (Codec c : kAllCodecs) {
    EXPECT_EQ(codec.Encode(c, DType::kF32, CSpan(raw), Span(base), &stored).code(),
              StatusCode::kInvalidArgument)
        << CodecName(c);
  }
  for (Codec c : {Codec::kXorDelta, Codec::kQ8Delta, Codec::kSubDelta}) {
    std::string r(16, 'a');
    EXPECT_EQ(codec.Encode(c, DType::kF32, CSpan(r), Span(short_base), &stored).code(),
              StatusCode::kInvalidArgument)
        << CodecName(c);
  }
  EXPECT_EQ(codec.Encode(static_cast<Codec>(9), DType::kU8, CSpan(raw), Span(base), &stored).code(),
            StatusCode::kInvalidArgument);
}

TEST(ChunkCodecTest, XorDeltaAgainstIdenticalBaseIsTiny) {
  std::mt19937_64 rng(7);
  ChunkCodec codec;
  std::string raw = RandomFloats(DType::kF32, 256 * 1024, rng), base = raw, stored;
  ASSERT_TRUE(codec.Encode(Codec::kXorDelta, DType::kF32, CSpan(raw), Span(base), &stored).ok());
  EXPECT_LT(stored.size(), 200u) << "1 MiB of zeros after XOR";
  std::string dst = base;
  ASSERT_TRUE(codec.Decode(Codec::kXorDelta, DType::kF32, stored, Span(dst)).ok());
  EXPECT_EQ(dst, raw);
}

TEST(ChunkCodecTest, ShuffleZstdShrinksTrainedWeights) {
  std::mt19937_64 rng(8);
  std::normal_distribution<float> weights(0, 0.05f);
  std::vector<float> w(kChunkBytes / 4);
  for (float& v : w) v = weights(rng);
  const std::string raw(reinterpret_cast<char*>(w.data()), kChunkBytes);
  ChunkCodec codec;
  std::string plain, shuffled;
  ASSERT_TRUE(codec.Encode(Codec::kShuffleZstd, DType::kF32, CSpan(raw), {}, &shuffled).ok());
  // The same bytes without the shuffle (u8 elements) barely compress.
  ASSERT_TRUE(codec.Encode(Codec::kShuffleZstd, DType::kU8, CSpan(raw), {}, &plain).ok());
  EXPECT_LT(shuffled.size(), raw.size() * 0.95);
  EXPECT_LT(shuffled.size(), plain.size());
  std::string dst(raw.size(), '\0');
  ASSERT_TRUE(codec.Decode(Codec::kShuffleZstd, DType::kF32, shuffled, Span(dst)).ok());
  EXPECT_EQ(dst, raw);
}

TEST(ChunkCodecTest, HigherLevelStillRoundTrips) {
  std::mt19937_64 rng(9);
  ChunkCodec fast(1), small(9);
  const std::string raw = RandomFloats(DType::kF32, 50000, rng);
  std::string a, b;
  ASSERT_TRUE(fast.Encode(Codec::kShuffleZstd, DType::kF32, CSpan(raw), {}, &a).ok());
  ASSERT_TRUE(small.Encode(Codec::kShuffleZstd, DType::kF32, CSpan(raw), {}, &b).ok());
  EXPECT_LE(b.size(), a.size());
  std::string dst(raw.size(), '\0');
  ASSERT_TRUE(fast.Decode(Codec::kShuffleZstd, DType::kF32, b, Span(dst)).ok());
  EXPECT_EQ(dst, raw);
}

TEST(ChunkCodecTest, DecodeRejectsWrongSizes) {
  std::mt19937_64 rng(10);
  ChunkCodec codec;
  const std::string raw = RandomFloats(DType::kF32, 100, rng);
  for (Codec c : kAllCodecs) {
    SCOPED_TRACE(CodecName(c));
    std::string base = raw, stored;
    ASSERT_TRUE(codec.Encode(c, DType::kF32, CSpan(raw), Span(base), &stored).ok());
    std::string bigger(raw.size() + 4, '\0'), smaller(raw.size() - 4, '\0');
    EXPECT_EQ(codec.Decode(c, DType::kF32, stored, Span(bigger)).code(), StatusCode::kDataLoss);
    EXPECT_EQ(codec.Decode(c, DType::kF32, stored, Span(smaller)).code(), StatusCode::kDataLoss);
    std::string dst = raw;
    EXPECT_EQ(codec.Decode(c, DType::kF32, stored.substr(0, stored.size() - 1), Span(dst)).code(),
              StatusCode::kDataLoss);
    EXPECT_EQ(codec.Decode(c, DType::kF32, stored + "x", Span(dst)).code(), StatusCode::kDataLoss);
    if (c != Codec::kRaw) {
      EXPECT_EQ(codec.Decode(c, DType::kF32, "", Span(dst)).code(), StatusCode::kDataLoss);
      std::string empty;
      EXPECT_EQ(codec.Decode(c, DType::kF32, stored, Span(empty)).code(), StatusCode::kDataLoss);
    }
    // A second frame after the first is leftover bytes too.
    EXPECT_EQ(codec.Decode(c, DType::kF32, stored + stored, Span(dst)).code(),
              StatusCode::kDataLoss);
  }
  std::string odd(7, '\0');
  EXPECT_EQ(codec.Decode(Codec::kRaw, DType::kF32, "1234567", Span(odd)).code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(codec.Decode(static_cast<Codec>(7), DType::kU8, "", {}).code(), StatusCode::kDataLoss);
}

// A q8 payload (before zstd) for n f32 elements, made into a stored chunk by
// shuffle-zstd on u8, which is zstd alone.
std::string StoreQ8Payload(ChunkCodec& codec, const std::string& payload) {
  std::string stored;
  EXPECT_TRUE(codec.Encode(Codec::kShuffleZstd, DType::kU8, CSpan(payload), {}, &stored).ok());
  return stored;
}

TEST(ChunkCodecTest, Q8DecodeValidatesPayload) {
  std::mt19937_64 rng(11);
  ChunkCodec codec;
  const size_t n = 2 * kQ8Block + 10;
  const std::string base = RandomFloats(DType::kF32, n, rng);
  const std::string raw = Perturb(DType::kF32, base, 10000, rng);
  std::string enc = base, stored;
  ASSERT_TRUE(codec.Encode(Codec::kQ8Delta, DType::kF32, CSpan(raw), Span(enc), &stored).ok());
  std::string payload(4 + 4 * 3 + n, '\0');
  ASSERT_TRUE(codec.Decode(Codec::kShuffleZstd, DType::kU8, stored, Span(payload)).ok());
  uint32_t count;
  std::memcpy(&count, payload.data(), 4);
  ASSERT_EQ(count, n);
  // The plain payload decodes like the original.
  std::string dst = base;
  ASSERT_TRUE(
      codec.Decode(Codec::kQ8Delta, DType::kF32, StoreQ8Payload(codec, payload), Span(dst)).ok());
  EXPECT_EQ(dst, enc);

  auto expect_rejected = [&](std::string bad, const char* what) {
    std::string d = base;
    EXPECT_EQ(
        codec.Decode(Codec::kQ8Delta, DType::kF32, StoreQ8Payload(codec, bad), Span(d)).code(),
        StatusCode::kDataLoss)
        << what;
    EXPECT_EQ(d, base) << what << ": dst changed on failure";
  };
  std::string bad = payload;
  uint32_t wrong = n - 1;
  std::memcpy(bad.data(), &wrong, 4);
  expect_rejected(bad, "count");
  for (float s : {NAN, INFINITY, -1.0f}) {
    bad = payload;
    std::memcpy(bad.data() + 8, &s, 4);
    expect_rejected(bad, "scale");
  }
  bad = payload;
  bad[bad.size() - 3] = static_cast<char>(-128);
  expect_rejected(bad, "-128");
  expect_rejected(payload.substr(0, payload.size() - 1), "short payload");
  expect_rejected(payload + "z", "long payload");
}

// Deterministic mini-fuzz: mutated stored bytes must decode to an error or to
// something, never to undefined behaviour (run under ASan/UBSan to tell).
TEST(ChunkCodecTest, DecodeSurvivesMutatedInput) {
  std::mt19937_64 rng(12);
  ChunkCodec codec;
  for (Codec c : kAllCodecs) {
    for (DType t : {DType::kF32, DType::kF16, DType::kF64, DType::kU8, DType::kI32}) {
      if (c == Codec::kQ8Delta && !SupportsQ8(t)) continue;
      SCOPED_TRACE(std::string(CodecName(c)) + " " + std::string(DTypeName(t)));
      const size_t n = 700 + rng() % 300;
      const bool is_float = SupportsQ8(t);
      const std::string base =
          is_float ? RandomFloats(t, n, rng) : RandomBytes(n * DTypeSize(t), rng);
      std::string raw = is_float ? Perturb(t, base, 50, rng) : base;
      for (size_t i = 0; !is_float && i < raw.size(); i += 7) raw[i] = static_cast<char>(rng());
      std::string enc = base, stored;
      ASSERT_TRUE(codec.Encode(c, t, CSpan(raw), Span(enc), &stored).ok());
      int errors = 0;
      for (int k = 0; k < 1500; ++k) {
        std::string m = stored;
        bool must_fail = false;
        switch (k % 5) {
          case 0:  // truncate
            m.resize(rng() % m.size());
            must_fail = true;
            break;
          case 1:  // flip bits in one to three bytes
            for (int f = 0, flips = 1 + rng() % 3; f < flips; ++f) {
              m[rng() % m.size()] ^= static_cast<char>(1 + rng() % 255);
            }
            break;
          case 2:  // overwrite a run with garbage
            for (size_t i = rng() % m.size(), e = std::min(m.size(), i + 1 + rng() % 16); i < e;
                 ++i) {
              m[i] = static_cast<char>(rng());
            }
            break;
          case 3:  // append bytes
            m += RandomBytes(1 + rng() % 8, rng);
            must_fail = true;
            break;
          case 4:  // garbage of any length, sometimes behind a valid frame header
            m = RandomBytes(rng() % 64, rng);
            if (rng() % 2) m = stored.substr(0, std::min<size_t>(stored.size(), 6 + rng() % 8)) + m;
            break;
        }
        std::string dst = base;
        Status s = codec.Decode(c, t, m, Span(dst));
        if (must_fail) {
          EXPECT_FALSE(s.ok()) << "mutation " << k;
        }
        if (!s.ok()) {
          ++errors;
          EXPECT_EQ(s.code(), StatusCode::kDataLoss) << s.ToString();
        }
      }
      EXPECT_GT(errors, 600);
    }
  }
}

TEST(Q8ErrorBoundTest, IsHalfAStepPlusRounding) {
  EXPECT_NEAR(Q8ErrorBound(127, 0, DType::kF32), 0.5, 1e-6);
  EXPECT_GT(Q8ErrorBound(127, 0, DType::kF32), 0.5);
  EXPECT_NEAR(Q8ErrorBound(0, 1, DType::kF16), 0x1p-11, 1e-7);  // + half a subnormal step
  EXPECT_NEAR(Q8ErrorBound(0, 1, DType::kBF16), 0x1p-8, 1e-9);
  EXPECT_LT(Q8ErrorBound(0, 1, DType::kF64), 1e-15);
  EXPECT_GT(Q8ErrorBound(0, 0, DType::kF32), 0.0);
  EXPECT_EQ(Q8ErrorBound(1, 1, DType::kI32), 0.0);
}

}  // namespace
}  // namespace spot::ckpt
