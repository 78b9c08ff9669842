// Helpers shared by the format tests (format_test.cc, format_damage_test.cc):
// deterministic training-state-like containers, comparisons, and writing and
// reading checkpoint files in a MemoryBlobStore.
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "ckpt/format.h"

namespace spot::ckpt::format_testing {

// ---------------------------------------------------------------------------
// Deterministic contents.

inline uint64_t SplitMix(uint64_t* state) {
  uint64_t z = (*state += 0x9E3779B97F4A7C15ULL);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
  return z ^ (z >> 31);
}

// Finite values around +-[0.01, 4) for float dtypes, arbitrary bytes for the
// rest (0/1 for bool).
inline void Fill(DType t, std::span<char> dst, uint64_t seed) {
  uint64_t st = seed * 0x1234567ULL + 17;
  const size_t es = DTypeSize(t);
  const size_t n = dst.size() / es;
  for (size_t i = 0; i < n; ++i) {
    uint64_t r = SplitMix(&st);
    char* p = dst.data() + i * es;
    double v = (static_cast<double>(r >> 11) * 0x1p-53 * 4 + 0.01) * ((r & 1) ? -1 : 1);
    switch (t) {
      case DType::kF32: {
        auto f = static_cast<float>(v);
        std::memcpy(p, &f, 4);
        break;
      }
      case DType::kF64:
        std::memcpy(p, &v, 8);
        break;
      case DType::kBF16: {
        auto f = static_cast<float>(v);
        uint32_t bits;
        std::memcpy(&bits, &f, 4);
        auto h = static_cast<uint16_t>(bits >> 16);
        std::memcpy(p, &h, 2);
        break;
      }
      case DType::kF16: {  // sign, exponent 9..17, random fraction
        auto h = static_cast<uint16_t>(((r & 1) << 15) | ((9 + (r >> 8) % 9) << 10) |
                                       ((r >> 20) & 0x3ff));
        std::memcpy(p, &h, 2);
        break;
      }
      case DType::kBool:
        *p = static_cast<char>(r & 1);
        break;
      default:
        std::memcpy(p, &r, es);
    }
  }
}

// The value of element i of a float record.
inline double ValueAt(DType t, std::string_view bytes, size_t i) {
  return FloatElement(t, bytes, i);
}

inline bool IsFloat(DType t) {
  return t == DType::kF32 || t == DType::kF64 || t == DType::kF16 || t == DType::kBF16;
}

struct Spec {
  std::string name;
  DType dtype;
  std::vector<int64_t> shape;
};

// Every dtype, a scalar, an empty record, optimizer state, and optionally a
// record of `big_floats` f32 (9 Mi bytes by default: three chunks).
inline std::vector<Spec> SampleSpecs(bool big, int64_t big_floats = 9 * 262144) {
  std::vector<Spec> s = {
      {"model/u8", DType::kU8, {7}},
      {"model/i8", DType::kI8, {3, 5}},
      {"model/i16", DType::kI16, {9}},
      {"model/i32", DType::kI32, {4, 4}},
      {"model/i64", DType::kI64, {6}},
      {"model/f16", DType::kF16, {600}},
      {"model/bf16", DType::kBF16, {3, 200}},
      {"model/f32", DType::kF32, {16, 40}},
      {"model/f64", DType::kF64, {300}},
      {"model/bool", DType::kBool, {11}},
      {"step", DType::kI64, {}},
      {"model/empty", DType::kF32, {0, 5}},
      {"optim/f32.momentum", DType::kF32, {700}},
      {"optim/f64.exp_avg", DType::kF64, {2, 70}},
  };
  if (big) s.push_back({"model/big", DType::kF32, {big_floats}});
  return s;
}

// A few small records of every kind: floats, an integer scalar, an empty
// record, int32 and bfloat16.
inline std::vector<Spec> SmallSpecs() {
  return {{"model/w", DType::kF32, {8, 8}},  {"model/b", DType::kF32, {8}},
          {"optim/m", DType::kF32, {8, 8}},  {"step", DType::kI64, {}},
          {"model/empty", DType::kF32, {0}}, {"model/i", DType::kI32, {5}},
          {"model/h", DType::kBF16, {12}}};
}

inline Container Make(const std::vector<Spec>& specs, uint64_t seed) {
  Container c;
  uint64_t k = 0;
  for (const Spec& s : specs) {
    std::span<char> d = c.AddUninitialized(s.name, s.dtype, s.shape);
    Fill(s.dtype, d, seed * 1000 + k++);
  }
  c.AddBytes("trainer/state", "{\"step\":" + std::to_string(seed) + "}");
  return c;
}

// The next state: float records drift a little from `prev` (so q8 has small
// differences to quantize), integer records change in a few places, and
// every third record stays the same.
inline Container Next(const Container& prev, uint64_t seed) {
  Container c;
  uint64_t st = seed;
  for (size_t i = 0; i < prev.records().size(); ++i) {
    const Record& r = prev.records()[i];
    std::span<char> d = c.AddUninitialized(r.name, r.dtype, r.shape);
    if (!r.data.empty()) std::memcpy(d.data(), r.data.data(), r.data.size());
    if (i % 3 == 0 || r.data.empty()) continue;
    const size_t es = DTypeSize(r.dtype), n = r.data.size() / es;
    if (IsFloat(r.dtype)) {
      std::string step(d.size(), '\0');
      Fill(r.dtype, std::span<char>(step), seed * 7919 + i);
      for (size_t j = 0; j < n; ++j) {
        double v = ValueAt(r.dtype, r.data, j) + 0.01 * ValueAt(r.dtype, step, j);
        char* p = d.data() + j * es;
        if (r.dtype == DType::kF32) {
          auto f = static_cast<float>(v);
          std::memcpy(p, &f, 4);
        } else if (r.dtype == DType::kF64) {
          std::memcpy(p, &v, 8);
        } else {
          // f16 / bf16: move a few units in the last place.
          uint16_t h;
          std::memcpy(&h, p, 2);
          h = static_cast<uint16_t>(h + (SplitMix(&st) % 5) - 2);
          std::memcpy(p, &h, 2);
        }
      }
    } else {
      for (int k = 0; k < 3; ++k) {
        size_t j = SplitMix(&st) % d.size();
        d[j] = static_cast<char>(r.dtype == DType::kBool ? !d[j] : d[j] + 1 + k);
      }
    }
  }
  return c;
}

inline Container Clone(const Container& c) {
  Container out;
  for (size_t i = 0; i < c.records().size(); ++i) {
    const Record& r = c.records()[i];
    out.AddWithStorage(r.name, r.dtype, r.shape, Buffer(r.data));
    out.mutable_record(i).checksum = r.checksum;
  }
  return out;
}

inline void ExpectSame(const Container& got, const Container& want, const std::string& what = "") {
  ASSERT_EQ(got.records().size(), want.records().size()) << what;
  for (size_t i = 0; i < want.records().size(); ++i) {
    const Record& g = got.records()[i];
    const Record& w = want.records()[i];
    EXPECT_EQ(g.name, w.name) << what;
    EXPECT_EQ(g.dtype, w.dtype) << what << " " << w.name;
    EXPECT_EQ(g.shape, w.shape) << what << " " << w.name;
    EXPECT_TRUE(g.data == w.data) << what << " " << w.name << ": bytes differ";
  }
}

// Every element of `got` within Q8ErrorBound of `want`, with each block's
// largest difference between `want` and `base`.
inline void ExpectWithinQ8Bound(DType t, std::string_view want, std::string_view base,
                                std::string_view got, const std::string& what) {
  ASSERT_EQ(got.size(), want.size());
  const size_t n = want.size() / DTypeSize(t);
  for (size_t begin = 0; begin < n; begin += kQ8Block) {
    const size_t end = std::min(n, begin + kQ8Block);
    double max_abs = 0;
    for (size_t i = begin; i < end; ++i) {
      max_abs = std::max(max_abs, std::fabs(ValueAt(t, want, i) - ValueAt(t, base, i)));
    }
    for (size_t i = begin; i < end; ++i) {
      double w = ValueAt(t, want, i), g = ValueAt(t, got, i);
      ASSERT_LE(std::fabs(g - w), Q8ErrorBound(max_abs, std::fabs(w), t))
          << what << " element " << i << " want " << w << " got " << g;
    }
  }
}

inline Result<WrittenFile> WriteTo(BlobStore& store, const std::string& name, Container& c,
                                   const CodecPlan& plan, Container* reference, int64_t id,
                                   int64_t base_id, ChunkCodec& codec) {
  SPOT_ASSIGN_OR_RETURN(std::unique_ptr<BlobWriter> w, store.Create(name));
  SPOT_ASSIGN_OR_RETURN(WrittenFile f,
                        WriteCheckpointFile(c, plan, reference, id, base_id, codec, *w));
  SPOT_RETURN_IF_ERROR(w->Commit());
  return f;
}

inline Result<Container> ReadFrom(const BlobStore& store, const std::string& name, Container* base,
                                  ChunkCodec& codec) {
  SPOT_ASSIGN_OR_RETURN(CheckpointFile f, CheckpointFile::Open(store, name));
  return f.ReadAll(base, codec);
}

}  // namespace spot::ckpt::format_testing
