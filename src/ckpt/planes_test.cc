#include "ckpt/planes.h"

#include <gtest/gtest.h>
#include <zstd.h>

#include <cstdint>
#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <string_view>
#include <vector>

#include "ckpt/codec.h"

namespace spot::ckpt {
namespace {

std::span<char> Span(std::string& s) { return {s.data(), s.size()}; }
std::span<const char> CSpan(const std::string& s) { return {s.data(), s.size()}; }

template <typename T>
T At(const std::string& s, size_t i) {
  T v;
  std::memcpy(&v, s.data() + i * sizeof(T), sizeof(T));
  return v;
}

struct PlaneHeader {
  uint8_t mode;
  uint32_t size;
};

// The (mode, size) of each plane of a planes payload, read independently of
// planes.cc.
std::vector<PlaneHeader> Headers(const std::string& stored) {
  std::vector<PlaneHeader> out;
  for (size_t pos = 0; pos + 5 <= stored.size();) {
    PlaneHeader h{static_cast<uint8_t>(stored[pos]), 0};
    std::memcpy(&h.size, stored.data() + pos + 1, 4);
    out.push_back(h);
    pos += 5 + h.size;
  }
  return out;
}

// Trained-weight-like floats: N(0, 0.05).
std::string Weights(size_t n, std::mt19937_64& rng) {
  std::normal_distribution<float> normal(0, 0.05f);
  std::string s(4 * n, '\0');
  for (size_t i = 0; i < n; ++i) {
    float v = normal(rng);
    std::memcpy(s.data() + 4 * i, &v, 4);
  }
  return s;
}

// Each weight moved by a relative `step` at most, as an optimizer step does.
std::string Step(const std::string& w, float step, std::mt19937_64& rng) {
  std::uniform_real_distribution<float> u(-step, step);
  std::string s = w;
  for (size_t i = 0; i < s.size() / 4; ++i) {
    float v = At<float>(s, i) * (1 + u(rng));
    std::memcpy(s.data() + 4 * i, &v, 4);
  }
  return s;
}

// Whether every block of the zstd frame `f` holds literals only (no
// sequence), read from the frame format (RFC 8878, 3.1), independently of
// zstd's encoder. Fails the test on a frame it cannot walk.
bool LiteralsOnly(std::string_view f) {
  auto byte = [&](size_t i) { return i < f.size() ? static_cast<uint8_t>(f[i]) : uint8_t{0}; };
  EXPECT_GE(f.size(), 6u);
  EXPECT_EQ(byte(0) | byte(1) << 8 | byte(2) << 16 | static_cast<uint32_t>(byte(3)) << 24,
            0xFD2FB528u);
  const uint8_t desc = byte(4);
  const bool single = desc & 0x20;
  const size_t fcs[] = {single ? 1u : 0u, 2, 4, 8}, dict[] = {0, 1, 2, 4};
  size_t pos = 5 + (single ? 0 : 1) + dict[desc & 3] + fcs[desc >> 6];
  for (bool last = false; !last;) {
    if (pos + 3 > f.size()) {
      ADD_FAILURE() << "block header past the frame's end";
      return false;
    }
    const uint32_t h = byte(pos) | byte(pos + 1) << 8 | byte(pos + 2) << 16;
    pos += 3;
    last = h & 1;
    const uint32_t type = (h >> 1) & 3, size = h >> 3;
    if (type != 2) {  // raw or RLE: no sequence
      pos += type == 1 ? 1 : size;
      continue;
    }
    // A compressed block: its literals section, then the sequences' count.
    const uint8_t b0 = byte(pos);
    const uint32_t lit_type = b0 & 3, format = (b0 >> 2) & 3;
    size_t header = 0, content = 0;
    if (lit_type < 2) {  // raw or RLE literals
      header = format == 1 ? 2 : format == 3 ? 3 : 1;
      const uint32_t regenerated = header == 1 ? b0 >> 3
                                   : header == 2
                                       ? (b0 >> 4) | byte(pos + 1) << 4
                                       : (b0 >> 4) | byte(pos + 1) << 4 | byte(pos + 2) << 12;
      content = lit_type == 1 ? 1 : regenerated;
    } else if (format < 2) {
      header = 3;
      content = (byte(pos + 1) >> 6) | byte(pos + 2) << 2;
    } else if (format == 2) {
      header = 4;
      content = (byte(pos + 2) >> 2) | byte(pos + 3) << 6;
    } else {
      header = 5;
      content = (byte(pos + 2) >> 6) | byte(pos + 3) << 2 | byte(pos + 4) << 10;
    }
    if (byte(pos + header + content) != 0) return false;  // Number_of_Sequences
    pos += size;
  }
  EXPECT_LE(pos, f.size());
  return true;
}

TEST(ZigzagDeltaTest, MatchesDefinitionForEveryElementSize) {
  // (raw, base) pairs as 64-bit values, truncated to each size.
  const std::vector<std::pair<uint64_t, uint64_t>> pairs = {
      {5, 5}, {6, 5}, {5, 6}, {0, ~uint64_t{0}}, {~uint64_t{0}, 0}, {1ull << 63, 0}, {0x80, 0x7f}};
  for (size_t es : {1, 2, 4, 8}) {
    std::string raw, base;
    for (auto [r, b] : pairs) {
      raw.append(reinterpret_cast<const char*>(&r), es);
      base.append(reinterpret_cast<const char*>(&b), es);
    }
    std::string delta(raw.size(), '\0');
    ZigzagDelta(CSpan(raw), CSpan(base), es, Span(delta));
    const uint64_t mask = es == 8 ? ~uint64_t{0} : (uint64_t{1} << (8 * es)) - 1;
    const int bits = static_cast<int>(8 * es);
    for (size_t i = 0; i < pairs.size(); ++i) {
      uint64_t d = (pairs[i].first - pairs[i].second) & mask;
      // Sign-extend the es-byte difference, then zigzag: 0, -1, 1, -2, ... -> 0, 1, 2, 3, ...
      int64_t sd = bits == 64 ? static_cast<int64_t>(d)
                              : static_cast<int64_t>(d << (64 - bits)) >> (64 - bits);
      uint64_t want =
          sd >= 0 ? 2 * static_cast<uint64_t>(sd) : 2 * (~static_cast<uint64_t>(sd)) + 1;
      uint64_t got = 0;
      std::memcpy(&got, delta.data() + i * es, es);
      EXPECT_EQ(got, want & mask) << "es " << es << " pair " << i;
    }
    std::string back = base;
    AddZigzagDelta(CSpan(delta), es, Span(back));
    EXPECT_EQ(back, raw) << "es " << es;
  }
}

TEST(PlanesTest, IncompressiblePlanesAreStoredAsIs) {
  std::mt19937_64 rng(1);
  const std::string raw = Weights(kChunkBytes / 4, rng);
  ChunkCodec codec;
  std::string planes, single;
  ASSERT_TRUE(codec.Encode(Codec::kPlanesZstd, DType::kF32, CSpan(raw), {}, &planes).ok());
  ASSERT_TRUE(codec.Encode(Codec::kShuffleZstd, DType::kF32, CSpan(raw), {}, &single).ok());
  const std::vector<PlaneHeader> h = Headers(planes);
  ASSERT_EQ(h.size(), 4u);
  // The two low mantissa bytes are noise: stored; the sign/exponent byte compresses.
  EXPECT_EQ(h[0].mode, 0);
  EXPECT_EQ(h[0].size, kChunkBytes / 4);
  EXPECT_EQ(h[1].mode, 0);
  EXPECT_EQ(h[3].mode, 1);
  EXPECT_LT(h[3].size, kChunkBytes / 4 / 2);
  // Storing planes costs at most a few percent of size against one frame.
  EXPECT_LT(planes.size(), raw.size() * 0.95);
  EXPECT_LT(planes.size(), single.size() * 1.02);
  std::string dst(raw.size(), '\0');
  ASSERT_TRUE(codec.Decode(Codec::kPlanesZstd, DType::kF32, planes, Span(dst)).ok());
  EXPECT_EQ(dst, raw);
}

TEST(PlanesTest, FullVersionsCodeIndependentBytesAsLiteralsDeltasAndRepeatsKeepMatches) {
  // The sign/exponent plane of weights: few values, drawn independently.
  // zstd's Huffman coding of the literals alone is smaller than a level-1
  // frame and decodes faster; matches would only cost.
  std::mt19937_64 rng(4);
  const std::string raw = Weights(kChunkBytes / 4, rng);
  ChunkCodec codec;
  std::string stored;
  ASSERT_TRUE(codec.Encode(Codec::kPlanesZstd, DType::kF32, CSpan(raw), {}, &stored).ok());
  const std::vector<PlaneHeader> h = Headers(stored);
  ASSERT_EQ(h.size(), 4u);
  ASSERT_EQ(h[3].mode, 1);
  const size_t n = kChunkBytes / 4;  // elements, and bytes a plane
  const std::string_view frame =
      std::string_view(stored).substr(stored.size() - h[3].size, h[3].size);
  EXPECT_TRUE(LiteralsOnly(frame));
  std::string exponents(n, '\0');
  for (size_t i = 0; i < n; ++i) exponents[i] = raw[4 * i + 3];
  std::string level1(ZSTD_compressBound(n), '\0');
  level1.resize(ZSTD_compress(level1.data(), level1.size(), exponents.data(), n, 1));
  EXPECT_FALSE(LiteralsOnly(level1)) << "zstd's own level 1 finds matches here";
  EXPECT_LT(h[3].size, level1.size());
  // Deltas keep zstd's matches: the same plane coded as a delta's is level 1's frame.
  {
    std::unique_ptr<ZSTD_CCtx, decltype(&ZSTD_freeCCtx)> cctx(ZSTD_createCCtx(), &ZSTD_freeCCtx);
    ZSTD_CCtx_setParameter(cctx.get(), ZSTD_c_compressionLevel, 1);
    std::string scratch, as_delta;
    ASSERT_TRUE(
        EncodePlanes(exponents, 1, PlaneFrames::kMatches, cctx.get(), &scratch, &as_delta).ok());
    ASSERT_EQ(Headers(as_delta).size(), 1u);
    EXPECT_EQ(as_delta.substr(5), level1);
  }
  std::string dst(raw.size(), '\0');
  ASSERT_TRUE(codec.Decode(Codec::kPlanesZstd, DType::kF32, stored, Span(dst)).ok());
  EXPECT_EQ(dst, raw);
  // A period of 251 bytes: matches, many times smaller than literals could be.
  std::string periodic(1 << 20, '\0');
  for (size_t i = 0; i < periodic.size(); ++i) periodic[i] = static_cast<char>(i * 7 % 251);
  ASSERT_TRUE(codec.Encode(Codec::kPlanesZstd, DType::kU8, CSpan(periodic), {}, &stored).ok());
  ASSERT_EQ(Headers(stored).size(), 1u);
  ASSERT_EQ(Headers(stored)[0].mode, 1);
  EXPECT_FALSE(LiteralsOnly(std::string_view(stored).substr(5)));
  EXPECT_LT(stored.size(), periodic.size() / 100);
}

TEST(PlanesTest, RepeatsThatByteStatisticsMissAreStillCompressed) {
  // Every byte value equally often (8 bits of entropy), yet a period of 256.
  std::string raw(1 << 20, '\0');
  for (size_t i = 0; i < raw.size(); ++i) raw[i] = static_cast<char>(i);
  ChunkCodec codec;
  std::string stored;
  ASSERT_TRUE(codec.Encode(Codec::kPlanesZstd, DType::kU8, CSpan(raw), {}, &stored).ok());
  ASSERT_EQ(Headers(stored).size(), 1u);
  EXPECT_EQ(Headers(stored)[0].mode, 1);
  EXPECT_LT(stored.size(), raw.size() / 100);
  // Random bytes are stored as is, with five bytes of header.
  std::mt19937_64 rng(2);
  for (char& c : raw) c = static_cast<char>(rng());
  ASSERT_TRUE(codec.Encode(Codec::kPlanesZstd, DType::kU8, CSpan(raw), {}, &stored).ok());
  EXPECT_EQ(stored.size(), raw.size() + 5);
}

TEST(PlanesTest, SubDeltaOfAnOptimizerStepIsSmallerThanXor) {
  std::mt19937_64 rng(3);
  const std::string base = Weights(kChunkBytes / 4, rng);
  const std::string raw = Step(base, 0.01f, rng);
  ChunkCodec codec;
  std::string sub, xr, b1 = base, b2 = base;
  ASSERT_TRUE(codec.Encode(Codec::kSubDelta, DType::kF32, CSpan(raw), Span(b1), &sub).ok());
  ASSERT_TRUE(codec.Encode(Codec::kXorDelta, DType::kF32, CSpan(raw), Span(b2), &xr).ok());
  EXPECT_EQ(b1, base) << "sub-delta leaves its base alone";
  EXPECT_LT(sub.size(), xr.size());
  EXPECT_LT(sub.size(), raw.size() * 0.65);  // about 1.7x
  std::string dst = base;
  ASSERT_TRUE(codec.Decode(Codec::kSubDelta, DType::kF32, sub, Span(dst)).ok());
  EXPECT_EQ(dst, raw);
}

TEST(PlanesTest, DecodeRejectsMalformedPayloadsNamingThePlane) {
  std::mt19937_64 rng(4);
  const std::string raw = Weights(20000, rng);
  ChunkCodec codec;
  std::string good;
  ASSERT_TRUE(codec.Encode(Codec::kPlanesZstd, DType::kF32, CSpan(raw), {}, &good).ok());
  const std::vector<PlaneHeader> h = Headers(good);
  ASSERT_EQ(h.size(), 4u);
  const size_t plane1 = 5 + h[0].size;  // offset of plane 1's header
  struct Case {
    const char* name;
    std::string stored;
    const char* message;
  };
  std::vector<Case> cases;
  auto with = [&](size_t pos, std::string bytes) {
    std::string s = good;
    s.replace(pos, bytes.size(), bytes);
    return s;
  };
  auto u32 = [](uint32_t v) { return std::string(reinterpret_cast<const char*>(&v), 4); };
  cases.push_back({"unknown mode", with(plane1, "\x07"), "byte plane 1 of 4: unknown mode 7"});
  cases.push_back({"size beyond the end", with(plane1 + 1, u32(1u << 30)), "byte plane 1 of 4"});
  cases.push_back({"stored plane of the wrong size",
                   with(0, std::string("\0", 1) + u32(h[0].size - 1)), "byte plane 0 of 4"});
  cases.push_back({"header cut short", good.substr(0, plane1 + 3), "byte plane 1 of 4"});
  cases.push_back({"trailing bytes", good + "z", "after the last byte plane"});
  // Plane 3 is a zstd frame: damage its magic number.
  size_t plane3 = 0;
  for (int p = 0; p < 3; ++p) plane3 += 5 + h[p].size;
  ASSERT_EQ(h[3].mode, 1);
  cases.push_back({"bad zstd frame", with(plane3 + 5, "XXXX"), "byte plane 3 of 4: not a zstd"});
  for (const Case& c : cases) {
    std::string dst(raw.size(), '\0');
    Status s = codec.Decode(Codec::kPlanesZstd, DType::kF32, c.stored, Span(dst));
    EXPECT_EQ(s.code(), StatusCode::kDataLoss) << c.name;
    EXPECT_NE(s.message().find(c.message), std::string::npos) << c.name << ": " << s.message();
  }
}

}  // namespace
}  // namespace spot::ckpt
