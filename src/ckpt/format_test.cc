#include "ckpt/format.h"

#include <gtest/gtest.h>

#include <cfloat>
#include <cmath>
#include <cstring>
#include <functional>
#include <limits>
#include <map>
#include <mutex>
#include <optional>
#include <random>
#include <set>
#include <string>
#include <vector>

namespace spot::ckpt {
namespace {

// ---------------------------------------------------------------------------
// Deterministic contents.

uint64_t SplitMix(uint64_t* state) {
  uint64_t z = (*state += 0x9E3779B97F4A7C15ULL);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
  return z ^ (z >> 31);
}

// Finite values around +-[0.01, 4) for float dtypes, arbitrary bytes for the
// rest (0/1 for bool).
void Fill(DType t, std::span<char> dst, uint64_t seed) {
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
double ValueAt(DType t, std::string_view bytes, size_t i) { return FloatElement(t, bytes, i); }

bool IsFloat(DType t) {
  return t == DType::kF32 || t == DType::kF64 || t == DType::kF16 || t == DType::kBF16;
}

struct Spec {
  std::string name;
  DType dtype;
  std::vector<int64_t> shape;
};

// Every dtype, a scalar, an empty record, optimizer state, and optionally a
// record of `big_floats` f32 (9 Mi bytes by default: three chunks).
std::vector<Spec> SampleSpecs(bool big, int64_t big_floats = 9 * 262144) {
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

Container Make(const std::vector<Spec>& specs, uint64_t seed) {
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
Container Next(const Container& prev, uint64_t seed) {
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

Container Clone(const Container& c) {
  Container out;
  for (size_t i = 0; i < c.records().size(); ++i) {
    const Record& r = c.records()[i];
    out.AddWithStorage(r.name, r.dtype, r.shape, std::string(r.data));
    out.mutable_record(i).checksum = r.checksum;
  }
  return out;
}

void ExpectSame(const Container& got, const Container& want, const std::string& what = "") {
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
void ExpectWithinQ8Bound(DType t, std::string_view want, std::string_view base,
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

Result<WrittenFile> WriteTo(MemoryBlobStore& store, const std::string& name, Container& c,
                            const CodecPlan& plan, Container* reference, int64_t id,
                            int64_t base_id, ChunkCodec& codec) {
  SPOT_ASSIGN_OR_RETURN(std::unique_ptr<BlobWriter> w, store.Create(name));
  SPOT_ASSIGN_OR_RETURN(WrittenFile f,
                        WriteCheckpointFile(c, plan, reference, id, base_id, codec, *w));
  SPOT_RETURN_IF_ERROR(w->Commit());
  return f;
}

Result<Container> ReadFrom(const BlobStore& store, const std::string& name, Container* base,
                           ChunkCodec& codec) {
  SPOT_ASSIGN_OR_RETURN(CheckpointFile f, CheckpointFile::Open(store, name));
  return f.ReadAll(base, codec);
}

// ---------------------------------------------------------------------------
// Round trips.

class FullCodecTest : public ::testing::TestWithParam<Codec> {};

TEST_P(FullCodecTest, RoundTripsEveryDTypeScalarEmptyAndMultiChunkRecords) {
  MemoryBlobStore store;
  ChunkCodec codec;
  Container c = Make(SampleSpecs(/*big=*/true), 1);
  const Container want = Clone(c);
  Container ref;
  CodecPlan plan;
  plan.full = GetParam();
  auto f = WriteTo(store, "v1", c, plan, &ref, 7, -1, codec);
  ASSERT_TRUE(f.ok()) << f.status().ToString();
  const std::string& bytes = store.blob("v1");
  EXPECT_EQ(f->file_bytes, bytes.size());
  EXPECT_EQ(f->checksum, Checksum(bytes));
  EXPECT_EQ(f->records, static_cast<int>(want.records().size()));
  EXPECT_EQ(f->delta_records, 0);
  EXPECT_EQ(f->payload_bytes, want.payload_bytes());
  EXPECT_EQ(f->codecs,
            std::string(CodecName(GetParam())) + ":" + std::to_string(want.records().size()));
  EXPECT_EQ(bytes.substr(0, 8), kMagic);
  EXPECT_EQ(bytes.substr(bytes.size() - 8), kFooterMagic);
  // The writer set each record's checksum.
  EXPECT_EQ(c.VerifyRecords(), "");
  // The reference is now exactly the saved state.
  ExpectSame(ref, want, "reference");
  EXPECT_EQ(ref.VerifyRecords(), "");

  auto file = CheckpointFile::Open(store, "v1");
  ASSERT_TRUE(file.ok()) << file.status().ToString();
  EXPECT_EQ(file->id(), 7);
  EXPECT_EQ(file->base_id(), -1);
  EXPECT_EQ(file->file_bytes(), bytes.size());
  EXPECT_EQ(file->source(), "mem:v1");
  ASSERT_EQ(file->records().size(), want.records().size());
  for (size_t i = 0; i < want.records().size(); ++i) {
    const RecordEntry& e = file->records()[i];
    const Record& r = want.records()[i];
    EXPECT_EQ(e.name, r.name);
    EXPECT_EQ(e.dtype, r.dtype);
    EXPECT_EQ(e.shape, r.shape);
    EXPECT_EQ(e.codec, GetParam());
    EXPECT_EQ(e.raw_bytes, r.data.size());
    EXPECT_EQ(e.raw_checksum, Checksum(r.data));
    EXPECT_EQ(e.chunks.size(), (r.data.size() + kChunkBytes - 1) / kChunkBytes) << r.name;
    if (GetParam() == Codec::kRaw) {
      EXPECT_EQ(e.stored_bytes(), e.raw_bytes);
    }
  }
  const RecordEntry& big = file->records()[static_cast<size_t>(want.FindIndex("model/big"))];
  ASSERT_EQ(big.chunks.size(), 3u);
  EXPECT_EQ(file->records()[static_cast<size_t>(want.FindIndex("model/empty"))].chunks.size(), 0u);

  auto got = file->ReadAll(nullptr, codec);
  ASSERT_TRUE(got.ok()) << got.status().ToString();
  ExpectSame(*got, want, "decoded");
  EXPECT_EQ(got->VerifyRecords(), "");

  // One record on its own.
  std::string dst(big.raw_bytes, '\0');
  ASSERT_TRUE(file->ReadRecord(static_cast<size_t>(want.FindIndex("model/big")),
                               std::span<char>(dst), codec)
                  .ok());
  EXPECT_TRUE(dst == want.Find("model/big")->data);
}

INSTANTIATE_TEST_SUITE_P(Codecs, FullCodecTest, ::testing::Values(Codec::kRaw, Codec::kShuffleZstd),
                         [](const auto& info) {
                           return info.param == Codec::kRaw ? "Raw" : "ShuffleZstd";
                         });

TEST(FormatTest, EmptyContainerRoundTrips) {
  MemoryBlobStore store;
  ChunkCodec codec;
  Container c, ref;
  auto f = WriteTo(store, "e", c, CodecPlan{}, &ref, 1, -1, codec);
  ASSERT_TRUE(f.ok()) << f.status().ToString();
  EXPECT_EQ(f->records, 0);
  EXPECT_EQ(f->codecs, "");
  // Header, the index's fixed fields, footer.
  EXPECT_EQ(f->file_bytes, kHeaderBytes + 24 + kFooterBytes);
  auto got = ReadFrom(store, "e", nullptr, codec);
  ASSERT_TRUE(got.ok()) << got.status().ToString();
  EXPECT_TRUE(got->empty());
}

TEST(FormatTest, XorDeltaChainIsBitwiseExact) {
  MemoryBlobStore store;
  ChunkCodec codec;
  // Two chunks, the second short (a whole number of q8 blocks or not: 1000 floats).
  const std::vector<Spec> specs = SampleSpecs(/*big=*/true, (kChunkBytes + 4000) / 4);
  Container ref;
  Container prev_decoded;
  Container state = Make(specs, 1);
  for (int64_t id = 1; id <= 4; ++id) {
    const std::string name = "v" + std::to_string(id);
    const Container want = Clone(state);
    const int64_t base = id == 1 ? -1 : id - 1;
    auto f = WriteTo(store, name, state, CodecPlan{}, &ref, id, base, codec);
    ASSERT_TRUE(f.ok()) << f.status().ToString();
    EXPECT_EQ(f->delta_records, id == 1 ? 0 : f->records) << name;
    if (id > 1) {
      EXPECT_EQ(f->codecs, "xor-delta:" + std::to_string(f->records));
    }
    EXPECT_EQ(f->checksum, Checksum(store.blob(name)));
    auto file = CheckpointFile::Open(store, name);
    ASSERT_TRUE(file.ok()) << file.status().ToString();
    EXPECT_EQ(file->base_id(), base);
    auto got = file->ReadAll(id == 1 ? nullptr : &prev_decoded, codec);
    ASSERT_TRUE(got.ok()) << name << ": " << got.status().ToString();
    ExpectSame(*got, want, name);
    ExpectSame(ref, *got, name + " reference");
    // Unchanged records cost next to nothing as xor-deltas.
    if (id > 1) {
      const RecordEntry& e = file->records()[0];  // every third record is unchanged
      EXPECT_LT(e.stored_bytes(), e.raw_bytes / 4 + 64) << e.name;
    }
    prev_decoded = std::move(got).value();
    state = Next(want, static_cast<uint64_t>(id) + 100);
  }
}

TEST(FormatTest, Q8DeltaIsWithinBoundAndOptimizerStateIsExact) {
  for (bool q8_optim : {false, true}) {
    SCOPED_TRACE(q8_optim ? "q8_optimizer_state" : "default plan");
    MemoryBlobStore store;
    ChunkCodec codec;
    CodecPlan plan;
    plan.delta = Codec::kQ8Delta;
    plan.q8_optimizer_state = q8_optim;
    Container ref;
    Container decoded;
    Container state = Make(SampleSpecs(/*big=*/true, (kChunkBytes + 4000) / 4), 3);
    for (int64_t id = 1; id <= 3; ++id) {
      const std::string name = "v" + std::to_string(id);
      const Container want = Clone(state);
      // What the reader holds for the base: the reference before this write.
      const Container base_state = Clone(ref);
      auto f = WriteTo(store, name, state, plan, &ref, id, id - 1 > 0 ? id - 1 : -1, codec);
      ASSERT_TRUE(f.ok()) << f.status().ToString();
      auto file = CheckpointFile::Open(store, name);
      ASSERT_TRUE(file.ok()) << file.status().ToString();
      auto got = file->ReadAll(id == 1 ? nullptr : &decoded, codec);
      ASSERT_TRUE(got.ok()) << name << ": " << got.status().ToString();
      // The invariant delta chains rely on: the reference is what a reader decodes.
      ExpectSame(ref, *got, name + " reference vs decoded");
      EXPECT_EQ(got->VerifyRecords(), "");
      for (size_t i = 0; i < want.records().size(); ++i) {
        const Record& w = want.records()[i];
        const RecordEntry& e = file->records()[i];
        const bool optim = w.name.starts_with("optim/");
        Codec expect = Codec::kShuffleZstd;
        if (id > 1) {
          expect = SupportsQ8(w.dtype) && (!optim || q8_optim) ? Codec::kQ8Delta : Codec::kXorDelta;
        }
        EXPECT_EQ(e.codec, expect) << name << " " << w.name;
        if (e.codec == Codec::kQ8Delta) {
          const Record* b = base_state.Find(w.name);
          ASSERT_NE(b, nullptr);
          ExpectWithinQ8Bound(w.dtype, w.data, b->data, got->records()[i].data,
                              name + " " + w.name);
        } else {
          EXPECT_TRUE(got->records()[i].data == w.data) << name << " " << w.name;
        }
      }
      decoded = std::move(got).value();
      state = Next(want, static_cast<uint64_t>(id) + 500);
    }
  }
}

TEST(FormatTest, ChangedLayoutsAreWrittenFull) {
  MemoryBlobStore store;
  ChunkCodec codec;
  Container c1;
  Fill(DType::kF32, c1.AddUninitialized("a", DType::kF32, {4, 4}), 1);
  Fill(DType::kF32, c1.AddUninitialized("b", DType::kF32, {16}), 2);
  Fill(DType::kI32, c1.AddUninitialized("c", DType::kI32, {8}), 3);
  Fill(DType::kF32, c1.AddUninitialized("d", DType::kF32, {10}), 4);
  Container ref;
  ASSERT_TRUE(WriteTo(store, "v1", c1, CodecPlan{}, &ref, 1, -1, codec).ok());
  Container base = Clone(ref);

  Container c2;
  Fill(DType::kF32, c2.AddUninitialized("a", DType::kF32, {2, 8}), 5);  // same bytes, new shape
  Fill(DType::kF64, c2.AddUninitialized("b", DType::kF64, {8}), 6);     // same bytes, new dtype
  Fill(DType::kI32, c2.AddUninitialized("c", DType::kI32, {8}), 7);     // same layout
  Fill(DType::kF32, c2.AddUninitialized("e", DType::kF32, {3}), 8);     // new record
  const Container want = Clone(c2);
  auto f = WriteTo(store, "v2", c2, CodecPlan{}, &ref, 2, 1, codec);
  ASSERT_TRUE(f.ok()) << f.status().ToString();
  EXPECT_EQ(f->delta_records, 1);
  EXPECT_EQ(f->codecs, "shuffle-zstd:3,xor-delta:1");
  auto file = CheckpointFile::Open(store, "v2");
  ASSERT_TRUE(file.ok());
  EXPECT_EQ(file->base_id(), 1);
  std::vector<Codec> codecs;
  for (const RecordEntry& e : file->records()) codecs.push_back(e.codec);
  EXPECT_EQ(codecs, (std::vector<Codec>{Codec::kShuffleZstd, Codec::kShuffleZstd, Codec::kXorDelta,
                                        Codec::kShuffleZstd}));
  auto got = file->ReadAll(&base, codec);
  ASSERT_TRUE(got.ok()) << got.status().ToString();
  ExpectSame(*got, want);
  ExpectSame(ref, want, "reference");
}

TEST(FormatTest, AVersionWithoutDeltaRecordsNeedsNoBase) {
  // A reference is given but no record matches it: the file is a full
  // version, and says so (base -1), so readers do not ask for a base.
  MemoryBlobStore store;
  ChunkCodec codec;
  Container c1;
  Fill(DType::kF32, c1.AddUninitialized("a", DType::kF32, {4}), 1);
  Container ref;
  ASSERT_TRUE(WriteTo(store, "v1", c1, CodecPlan{}, &ref, 1, -1, codec).ok());
  Container c2;
  Fill(DType::kF32, c2.AddUninitialized("a", DType::kF32, {2, 2}), 2);
  Fill(DType::kF32, c2.AddUninitialized("b", DType::kF32, {4}), 3);
  const Container want = Clone(c2);
  auto f = WriteTo(store, "v2", c2, CodecPlan{}, &ref, 2, 1, codec);
  ASSERT_TRUE(f.ok());
  EXPECT_EQ(f->delta_records, 0);
  auto file = CheckpointFile::Open(store, "v2");
  ASSERT_TRUE(file.ok()) << file.status().ToString();
  EXPECT_EQ(file->base_id(), -1);
  auto got = file->ReadAll(nullptr, codec);
  ASSERT_TRUE(got.ok()) << got.status().ToString();
  ExpectSame(*got, want);
}

TEST(FormatTest, AFullVersionReusesTheReferenceStorage) {
  MemoryBlobStore store;
  ChunkCodec codec;
  Container c = Make(SampleSpecs(false), 1);
  Container ref;
  ASSERT_TRUE(WriteTo(store, "v1", c, CodecPlan{}, &ref, 1, -1, codec).ok());
  const char* p = ref.Find("model/f32")->data.data();
  Container c2 = Next(c, 9);
  const Container want = Clone(c2);
  ASSERT_TRUE(WriteTo(store, "v2", c2, CodecPlan{}, &ref, 2, -1, codec).ok());  // full
  EXPECT_EQ(ref.Find("model/f32")->data.data(), p);
  ExpectSame(ref, want);
  auto f = CheckpointFile::Open(store, "v2");
  ASSERT_TRUE(f.ok());
  EXPECT_EQ(f->base_id(), -1);
}

TEST(FormatTest, NonFiniteValuesFallBackFromQ8ToXorDelta) {
  // q8-delta refuses NaN and infinities; a model holding one (an attention
  // mask of -inf, a diverged weight) must still be saved, losslessly.
  MemoryBlobStore store;
  ChunkCodec codec;
  CodecPlan plan;
  plan.delta = Codec::kQ8Delta;
  Container c1;
  Fill(DType::kF32, c1.AddUninitialized("model/mask", DType::kF32, {1000}), 1);
  Fill(DType::kF32, c1.AddUninitialized("model/w", DType::kF32, {1000}), 2);
  Fill(DType::kF64, c1.AddUninitialized("model/huge", DType::kF64, {10}), 3);
  float inf = -std::numeric_limits<float>::infinity();
  std::memcpy(c1.mutable_data(0).data() + 40, &inf, 4);
  Container ref;
  ASSERT_TRUE(WriteTo(store, "v1", c1, plan, &ref, 1, -1, codec).ok());
  Container base = Clone(ref);
  Container c2 = Next(c1, 5);
  float nan = std::numeric_limits<float>::quiet_NaN();
  std::memcpy(c2.mutable_data(1).data() + 400, &nan, 4);
  double big = 1e300;
  std::memcpy(c2.mutable_data(2).data(), &big, 8);
  big = -1e300;
  std::memcpy(base.mutable_data(2).data(), &big, 8);
  std::memcpy(ref.mutable_data(2).data(), &big, 8);
  const Container want = Clone(c2);
  auto f = WriteTo(store, "v2", c2, plan, &ref, 2, 1, codec);
  ASSERT_TRUE(f.ok()) << f.status().ToString();
  auto file = CheckpointFile::Open(store, "v2");
  ASSERT_TRUE(file.ok());
  for (const RecordEntry& e : file->records()) EXPECT_EQ(e.codec, Codec::kXorDelta) << e.name;
  auto got = file->ReadAll(&base, codec);
  ASSERT_TRUE(got.ok()) << got.status().ToString();
  ExpectSame(*got, want);
  ExpectSame(ref, want, "reference");
}

TEST(FormatTest, DeltaVersionsNeedTheirBase) {
  MemoryBlobStore store;
  ChunkCodec codec;
  Container c1 = Make(SampleSpecs(false), 1);
  Container ref;
  ASSERT_TRUE(WriteTo(store, "v1", c1, CodecPlan{}, &ref, 1, -1, codec).ok());
  Container base = Clone(ref);
  Container c2 = Next(c1, 2);
  ASSERT_TRUE(WriteTo(store, "v2", c2, CodecPlan{}, &ref, 2, 1, codec).ok());
  auto file = CheckpointFile::Open(store, "v2");
  ASSERT_TRUE(file.ok());

  EXPECT_EQ(file->ReadAll(nullptr, codec).status().code(), StatusCode::kFailedPrecondition);

  // The base lacks a record.
  Container partial;
  for (const Record& r : base.records()) {
    if (r.name != "model/i32")
      partial.AddWithStorage(r.name, r.dtype, r.shape, std::string(r.data));
  }
  auto s = file->ReadAll(&partial, codec).status();
  EXPECT_EQ(s.code(), StatusCode::kDataLoss);
  EXPECT_NE(s.message().find("model/i32"), std::string::npos) << s.message();

  // The base has it with another shape.
  Container reshaped;
  for (const Record& r : base.records()) {
    std::vector<int64_t> shape = r.shape;
    if (r.name == "model/i32") shape = {16};
    reshaped.AddWithStorage(r.name, r.dtype, shape, std::string(r.data));
  }
  EXPECT_EQ(file->ReadAll(&reshaped, codec).status().code(), StatusCode::kDataLoss);

  // The wrong base (other bytes): the decoded checksums catch it.
  Container wrong = Clone(base);
  wrong.mutable_data(static_cast<size_t>(wrong.FindIndex("model/f32")))[5] ^= 0x10;
  s = file->ReadAll(&wrong, codec).status();
  EXPECT_EQ(s.code(), StatusCode::kDataLoss);
  EXPECT_NE(s.message().find("wrong base"), std::string::npos) << s.message();

  // The right one works.
  auto got = file->ReadAll(&base, codec);
  ASSERT_TRUE(got.ok()) << got.status().ToString();
}

TEST(FormatTest, RejectsBadPlans) {
  MemoryBlobStore store;
  ChunkCodec codec;
  Container c = Make(SampleSpecs(false), 1);
  Container ref;
  CodecPlan bad_full;
  bad_full.full = Codec::kXorDelta;
  EXPECT_EQ(WriteTo(store, "x", c, bad_full, &ref, 1, -1, codec).status().code(),
            StatusCode::kInvalidArgument);
  CodecPlan bad_delta;
  bad_delta.delta = Codec::kShuffleZstd;
  EXPECT_EQ(WriteTo(store, "x", c, bad_delta, &ref, 1, -1, codec).status().code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(store.Size("x").status().code(), StatusCode::kNotFound);
}

TEST(FormatTest, OpenAndReadRecordReportDataLoss) {
  MemoryBlobStore store;
  ChunkCodec codec;
  auto missing = CheckpointFile::Open(store, "missing");
  EXPECT_EQ(missing.status().code(), StatusCode::kDataLoss);
  EXPECT_NE(missing.status().message().find("missing"), std::string::npos);

  Container c = Make(SampleSpecs(false), 1), ref;
  ASSERT_TRUE(WriteTo(store, "v", c, CodecPlan{}, &ref, 1, -1, codec).ok());
  auto f = CheckpointFile::Open(store, "v");
  ASSERT_TRUE(f.ok());
  std::string small(3, '\0');
  EXPECT_EQ(f->ReadRecord(0, std::span<char>(small), codec).code(), StatusCode::kDataLoss);

  // Another format version.
  std::string bytes = store.blob("v");
  bytes[8] = 1;
  store.Set("v1", bytes);
  auto old = CheckpointFile::Open(store, "v1");
  EXPECT_EQ(old.status().code(), StatusCode::kDataLoss);
  EXPECT_NE(old.status().message().find("version 1"), std::string::npos) << old.status().message();
}

// ---------------------------------------------------------------------------
// Damage: every truncation and every byte flip must be caught.

std::vector<Spec> SmallSpecs() {
  return {{"model/w", DType::kF32, {8, 8}},  {"model/b", DType::kF32, {8}},
          {"optim/m", DType::kF32, {8, 8}},  {"step", DType::kI64, {}},
          {"model/empty", DType::kF32, {0}}, {"model/i", DType::kI32, {5}},
          {"model/h", DType::kBF16, {12}}};
}

struct SmallFiles {
  MemoryBlobStore store;
  std::string full_raw, full_zstd, delta;
  Container base;  // what v1 decodes to (the delta's base)
  Container delta_decoded;
};

std::unique_ptr<SmallFiles> MakeSmallFiles() {
  auto s = std::make_unique<SmallFiles>();
  ChunkCodec codec;
  Container c1 = Make(SmallSpecs(), 11);
  Container ref;
  CodecPlan raw;
  raw.full = Codec::kRaw;
  Container scratch;
  Container c1_copy = Clone(c1);
  EXPECT_TRUE(WriteTo(s->store, "raw", c1_copy, raw, &scratch, 1, -1, codec).ok());
  CodecPlan q8;
  q8.delta = Codec::kQ8Delta;
  EXPECT_TRUE(WriteTo(s->store, "zstd", c1, q8, &ref, 1, -1, codec).ok());
  s->base = Clone(ref);
  Container c2 = Next(c1, 12);
  EXPECT_TRUE(WriteTo(s->store, "delta", c2, q8, &ref, 2, 1, codec).ok());
  s->delta_decoded = Clone(ref);
  s->full_raw = s->store.blob("raw");
  s->full_zstd = s->store.blob("zstd");
  s->delta = s->store.blob("delta");
  return s;
}

// Opens and decodes `bytes`; the base given when the file asks for one.
Status TryDecode(MemoryBlobStore& store, const std::string& bytes, const Container& base,
                 ChunkCodec& codec, Container* out = nullptr) {
  store.Set("f", bytes);
  auto f = CheckpointFile::Open(store, "f");
  if (!f.ok()) return f.status();
  Container b = Clone(base);
  auto c = f->ReadAll(&b, codec);
  if (!c.ok()) return c.status();
  // A decode that succeeded is consistent with its index.
  if (c->records().size() != f->records().size()) return InternalError("record count");
  for (size_t i = 0; i < f->records().size(); ++i) {
    if (c->records()[i].data.size() != f->records()[i].raw_bytes) return InternalError("size");
  }
  if (!c->VerifyRecords().empty()) return InternalError("checksums");
  if (out) *out = std::move(c).value();
  return Status::Ok();
}

class DamageTest : public ::testing::Test {
 protected:
  void SetUp() override { files_ = MakeSmallFiles(); }

  struct File {
    std::string name;
    const std::string* bytes;
    const Container* base;
  };
  std::vector<File> Files() const {
    static const Container kNone;
    return {{"raw", &files_->full_raw, &kNone},
            {"zstd", &files_->full_zstd, &kNone},
            {"delta", &files_->delta, &files_->base}};
  }

  std::unique_ptr<SmallFiles> files_;
  MemoryBlobStore scratch_;
  ChunkCodec codec_;
};

TEST_F(DamageTest, IntactFilesDecode) {
  for (const File& f : Files()) {
    Container got;
    Status s = TryDecode(scratch_, *f.bytes, *f.base, codec_, &got);
    ASSERT_TRUE(s.ok()) << f.name << ": " << s.ToString();
    if (f.name == "delta") ExpectSame(got, files_->delta_decoded, "delta");
    if (f.name != "delta") ExpectSame(got, files_->base, f.name);
  }
  // The delta file really has delta records of both kinds.
  scratch_.Set("f", files_->delta);
  auto f = CheckpointFile::Open(scratch_, "f");
  ASSERT_TRUE(f.ok());
  std::set<Codec> codecs;
  for (const RecordEntry& e : f->records()) codecs.insert(e.codec);
  EXPECT_TRUE(codecs.count(Codec::kQ8Delta));
  EXPECT_TRUE(codecs.count(Codec::kXorDelta));
}

TEST_F(DamageTest, EveryTruncationIsDataLoss) {
  for (const File& f : Files()) {
    for (size_t len = 0; len < f.bytes->size(); ++len) {
      Status s = TryDecode(scratch_, f.bytes->substr(0, len), *f.base, codec_);
      ASSERT_EQ(s.code(), StatusCode::kDataLoss)
          << f.name << " truncated to " << len << ": " << s.ToString();
    }
  }
}

TEST_F(DamageTest, EveryByteFlipIsDataLoss) {
  for (const File& f : Files()) {
    for (size_t i = 0; i < f.bytes->size(); ++i) {
      for (unsigned mask : {0x01u, 0x80u}) {
        std::string b = *f.bytes;
        b[i] = static_cast<char>(b[i] ^ mask);
        Status s = TryDecode(scratch_, b, *f.base, codec_);
        ASSERT_EQ(s.code(), StatusCode::kDataLoss)
            << f.name << " byte " << i << " ^ " << mask << " of " << f.bytes->size() << ": "
            << s.ToString();
      }
    }
  }
}

TEST_F(DamageTest, AppendedBytesAreDataLoss) {
  for (const File& f : Files()) {
    for (size_t extra : {1, 7, 32, 100}) {
      Status s = TryDecode(scratch_, *f.bytes + std::string(extra, '\0'), *f.base, codec_);
      EXPECT_EQ(s.code(), StatusCode::kDataLoss) << f.name << " + " << extra;
    }
  }
}

TEST_F(DamageTest, RandomMutationsAreDataLoss) {
  std::mt19937_64 rng(20240601);
  for (const File& f : Files()) {
    int tried = 0;
    for (int k = 0; k < 1500; ++k) {
      std::string b = *f.bytes;
      switch (rng() % 4) {
        case 0: {  // overwrite a few bytes
          int n = 1 + static_cast<int>(rng() % 8);
          for (int j = 0; j < n; ++j) b[rng() % b.size()] = static_cast<char>(rng());
          break;
        }
        case 1: {  // overwrite a run
          size_t at = rng() % b.size();
          size_t n = std::min<size_t>(1 + rng() % 16, b.size() - at);
          for (size_t j = 0; j < n; ++j) b[at + j] = static_cast<char>(rng());
          break;
        }
        case 2: {  // insert bytes
          size_t at = rng() % (b.size() + 1);
          b.insert(at, std::string(1 + rng() % 8, static_cast<char>(rng())));
          break;
        }
        default: {  // delete bytes
          size_t at = rng() % b.size();
          b.erase(at, 1 + rng() % 8);
          break;
        }
      }
      if (b == *f.bytes) continue;
      ++tried;
      Status s = TryDecode(scratch_, b, *f.base, codec_);
      ASSERT_EQ(s.code(), StatusCode::kDataLoss)
          << f.name << " mutation " << k << ": " << s.ToString();
    }
    EXPECT_GT(tried, 1400);
  }
}

// ---------------------------------------------------------------------------
// A damaged index with a valid checksum: the structural checks must hold.

struct Located {
  uint64_t index_offset, index_bytes;
};

Located Locate(const std::string& file) {
  Located l;
  std::memcpy(&l.index_offset, file.data() + file.size() - kFooterBytes, 8);
  std::memcpy(&l.index_bytes, file.data() + file.size() - kFooterBytes + 8, 8);
  return l;
}

// `file` with its index replaced by `index` and the footer patched to match,
// checksum included.
std::string WithIndex(const std::string& file, const std::string& index) {
  Located l = Locate(file);
  std::string out = file.substr(0, l.index_offset) + index;
  auto put = [&](uint64_t v) { out.append(reinterpret_cast<const char*>(&v), 8); };
  put(l.index_offset);
  put(index.size());
  put(Checksum(index));
  out.append(kFooterMagic);
  return out;
}

std::string IndexOf(const std::string& file) {
  Located l = Locate(file);
  return file.substr(l.index_offset, l.index_bytes);
}

// The index, parsed the way docs/checkpoint-format.md lays it out, to be
// edited field by field and serialized again.
struct IndexModel {
  struct Entry {
    std::string name;
    uint8_t dtype, codec;
    std::vector<int64_t> shape;
    uint64_t raw_bytes, raw_checksum;
    std::vector<ChunkRef> chunks;
  };
  int64_t id, base;
  uint32_t chunk_bytes;
  std::vector<Entry> entries;
  std::string trailing;

  static IndexModel Parse(const std::string& index) {
    IndexModel m;
    size_t pos = 0;
    auto get = [&](auto* v) {
      std::memcpy(v, index.data() + pos, sizeof(*v));
      pos += sizeof(*v);
    };
    uint32_t count;
    get(&m.id);
    get(&m.base);
    get(&m.chunk_bytes);
    get(&count);
    for (uint32_t i = 0; i < count; ++i) {
      Entry e;
      uint32_t len;
      get(&len);
      e.name = index.substr(pos, len);
      pos += len;
      uint8_t ndim;
      get(&e.dtype);
      get(&e.codec);
      get(&ndim);
      e.shape.resize(ndim);
      for (int64_t& d : e.shape) get(&d);
      get(&e.raw_bytes);
      get(&e.raw_checksum);
      uint32_t chunks;
      get(&chunks);
      e.chunks.resize(chunks);
      for (ChunkRef& c : e.chunks) {
        get(&c.offset);
        get(&c.stored_bytes);
        get(&c.checksum);
      }
      m.entries.push_back(std::move(e));
    }
    EXPECT_EQ(pos, index.size());
    return m;
  }

  std::string Serialize(std::optional<uint32_t> count = std::nullopt) const {
    std::string out;
    auto put = [&](auto v) { out.append(reinterpret_cast<const char*>(&v), sizeof(v)); };
    put(id);
    put(base);
    put(chunk_bytes);
    put(count.value_or(static_cast<uint32_t>(entries.size())));
    for (const Entry& e : entries) {
      put(static_cast<uint32_t>(e.name.size()));
      out.append(e.name);
      put(e.dtype);
      put(e.codec);
      put(static_cast<uint8_t>(e.shape.size()));
      for (int64_t d : e.shape) put(d);
      put(e.raw_bytes);
      put(e.raw_checksum);
      put(static_cast<uint32_t>(e.chunks.size()));
      for (const ChunkRef& c : e.chunks) {
        put(c.offset);
        put(c.stored_bytes);
        put(c.checksum);
      }
    }
    out.append(trailing);
    return out;
  }

  Entry& Find(std::string_view name) {
    for (Entry& e : entries) {
      if (e.name == name) return e;
    }
    ADD_FAILURE() << "no entry " << name;
    return entries[0];
  }
};

TEST_F(DamageTest, IndexModelRoundTrips) {
  for (const File& f : Files()) {
    std::string index = IndexOf(*f.bytes);
    EXPECT_EQ(IndexModel::Parse(index).Serialize(), index) << f.name;
    EXPECT_EQ(WithIndex(*f.bytes, index), *f.bytes) << f.name;
  }
}

TEST_F(DamageTest, StructurallyBadIndexesAreDataLoss) {
  struct Case {
    const char* what;
    const char* file;
    std::function<void(IndexModel&)> edit;
    std::function<uint32_t(uint32_t)> count;  // the record count to write, from the real one
  };
  const uint64_t kMax = std::numeric_limits<uint64_t>::max();
  std::vector<Case> cases = {
      {"negative id", "zstd", [](IndexModel& m) { m.id = -1; }, {}},
      {"base below -1", "zstd", [](IndexModel& m) { m.base = -2; }, {}},
      {"base equal to id", "delta", [](IndexModel& m) { m.base = m.id; }, {}},
      {"base above id", "delta", [](IndexModel& m) { m.base = m.id + 5; }, {}},
      {"chunk size 0", "zstd", [](IndexModel& m) { m.chunk_bytes = 0; }, {}},
      {"chunk size not a multiple of q8 blocks",
       "zstd",
       [](IndexModel& m) { m.chunk_bytes = 1000; },
       {}},
      {"count one more", "zstd", [](IndexModel&) {}, [](uint32_t n) { return n + 1; }},
      {"count one less", "zstd", [](IndexModel&) {}, [](uint32_t n) { return n - 1; }},
      {"count huge", "zstd", [](IndexModel&) {}, [](uint32_t) { return 0xffffffffu; }},
      {"count zero", "zstd", [](IndexModel&) {}, [](uint32_t) { return 0u; }},
      {"trailing bytes", "zstd", [](IndexModel& m) { m.trailing = "x"; }, {}},
      {"bad dtype", "zstd", [](IndexModel& m) { m.Find("model/i").dtype = kNumDTypes; }, {}},
      {"bad codec", "zstd", [](IndexModel& m) { m.Find("model/i").codec = kNumCodecs; }, {}},
      {"delta codec in a full version",
       "zstd",
       [](IndexModel& m) { m.Find("model/w").codec = static_cast<uint8_t>(Codec::kXorDelta); },
       {}},
      {"q8 on integers",
       "delta",
       [](IndexModel& m) { m.Find("model/i").codec = static_cast<uint8_t>(Codec::kQ8Delta); },
       {}},
      {"17 dimensions",
       "zstd",
       [](IndexModel& m) { m.Find("model/empty").shape = std::vector<int64_t>(17, 0); },
       {}},
      {"negative dimension",
       "zstd",
       [](IndexModel& m) {
         auto& e = m.Find("model/w");
         e.shape = {-8, -8};
       },
       {}},
      {"shape does not match bytes",
       "zstd",
       [](IndexModel& m) {
         m.Find("model/w").shape = {8, 9};
       },
       {}},
      {"dimensions overflow",
       "zstd",
       [](IndexModel& m) {
         auto& e = m.Find("model/empty");
         e.shape = {int64_t{1} << 62, 8};
         e.raw_bytes = 0;
       },
       {}},
      // 0xffffffff * 0x100000001 = 2^64 - 1 bytes: no overflow in the product,
      // but rounding up to whole chunks wraps around to 0 chunks.
      {"bytes just below 2^64 with no chunks",
       "zstd",
       [kMax](IndexModel& m) {
         auto& e = m.Find("model/empty");
         e.dtype = static_cast<uint8_t>(DType::kU8);
         e.shape = {0xffffffffLL, 0x100000001LL};
         e.raw_bytes = kMax;
       },
       {}},
      {"bytes 2^63 with no chunks",
       "zstd",
       [](IndexModel& m) {
         auto& e = m.Find("model/empty");
         e.dtype = static_cast<uint8_t>(DType::kU8);
         e.shape = {int64_t{1} << 62, 2};
         e.raw_bytes = uint64_t{1} << 63;
       },
       {}},
      {"too few chunks",
       "zstd",
       [](IndexModel& m) {
         auto& w = m.Find("model/w");
         auto& b = m.Find("model/b");
         // Move w's chunk into b so the chunks still tile the file.
         b.chunks.insert(b.chunks.begin(), w.chunks.begin(), w.chunks.end());
         w.chunks.clear();
       },
       {}},
      {"raw chunk of the wrong size",
       "raw",
       [](IndexModel& m) {
         m.Find("model/w").chunks[0].stored_bytes -= 4;
         m.Find("model/b").chunks[0].offset -= 4;
         m.Find("model/b").chunks[0].stored_bytes += 4;
       },
       {}},
      {"chunk larger than the file",
       "zstd",
       [](IndexModel& m) { m.Find("model/w").chunks[0].stored_bytes = uint64_t{1} << 40; },
       {}},
      {"chunk size wraps the tiling",
       "zstd",
       [kMax](IndexModel& m) { m.Find("model/w").chunks[0].stored_bytes = kMax; },
       {}},
      {"chunk that cannot expand enough",
       "zstd",
       [](IndexModel& m) {
         auto& e = m.Find("model/empty");
         e.dtype = static_cast<uint8_t>(DType::kU8);
         e.shape = {int64_t{4} << 20};
         e.raw_bytes = uint64_t{4} << 20;
         e.chunks = {ChunkRef{0, 0, Checksum("")}};
       },
       {}},
      {"chunks out of order",
       "zstd",
       [](IndexModel& m) {
         std::swap(m.Find("model/w").chunks[0].offset, m.Find("model/b").chunks[0].offset);
       },
       {}},
      {"chunk overlaps the index",
       "zstd",
       [](IndexModel& m) { m.entries.back().chunks[0].stored_bytes += 1; },
       {}},
      {"gap before the index",
       "zstd",
       [](IndexModel& m) { m.entries.back().chunks[0].stored_bytes -= 1; },
       {}},
      {"duplicate names", "zstd", [](IndexModel& m) { m.Find("model/b").name = "model/w"; }, {}},
      {"name too long",
       "zstd",
       [](IndexModel& m) { m.Find("model/b").name = std::string(5000, 'n'); },
       {}},
      {"wrong raw checksum",
       "zstd",
       [](IndexModel& m) { m.Find("model/w").raw_checksum ^= 1; },
       {}},
      {"wrong chunk checksum",
       "zstd",
       [](IndexModel& m) { m.Find("model/w").chunks[0].checksum ^= 1; },
       {}},
      {"wrong codec (raw for zstd)",
       "zstd",
       [](IndexModel& m) { m.Find("model/w").codec = static_cast<uint8_t>(Codec::kRaw); },
       {}},
      {"wrong codec (zstd for raw)",
       "raw",
       [](IndexModel& m) { m.Find("model/w").codec = static_cast<uint8_t>(Codec::kShuffleZstd); },
       {}},
      {"wrong codec (xor for q8)",
       "delta",
       [](IndexModel& m) { m.Find("model/w").codec = static_cast<uint8_t>(Codec::kXorDelta); },
       {}},
      {"wrong codec (q8 for xor)",
       "delta",
       [](IndexModel& m) { m.Find("optim/m").codec = static_cast<uint8_t>(Codec::kQ8Delta); },
       {}},
      {"another element size, same bytes",
       "zstd",
       [](IndexModel& m) {
         auto& e = m.Find("model/w");
         e.dtype = static_cast<uint8_t>(DType::kI16);
         e.shape = {8, 16};
       },
       {}},
  };
  const std::vector<File> files = Files();
  for (const Case& c : cases) {
    const File* file = nullptr;
    for (const File& f : files) {
      if (f.name == c.file) file = &f;
    }
    ASSERT_NE(file, nullptr);
    IndexModel m = IndexModel::Parse(IndexOf(*file->bytes));
    c.edit(m);
    std::optional<uint32_t> count;
    if (c.count) count = c.count(static_cast<uint32_t>(m.entries.size()));
    std::string bytes = WithIndex(*file->bytes, m.Serialize(count));
    Status s = TryDecode(scratch_, bytes, *file->base, codec_);
    EXPECT_EQ(s.code(), StatusCode::kDataLoss) << c.what << ": " << s.ToString();
    if (s.code() == StatusCode::kDataLoss) {
      EXPECT_NE(s.message().find("mem:f"), std::string::npos) << c.what << ": " << s.message();
    }
  }
}

TEST_F(DamageTest, ConsistentIndexEditsStillDecode) {
  // Edits that leave a consistent file: renaming a record, a smaller chunk
  // size that still holds each record in one chunk.
  IndexModel m = IndexModel::Parse(IndexOf(files_->full_zstd));
  m.Find("model/w").name = "model/renamed";
  m.chunk_bytes = 2048;
  Container got;
  Status s =
      TryDecode(scratch_, WithIndex(files_->full_zstd, m.Serialize()), Container(), codec_, &got);
  ASSERT_TRUE(s.ok()) << s.ToString();
  ASSERT_NE(got.Find("model/renamed"), nullptr);
  EXPECT_TRUE(got.Find("model/renamed")->data == files_->base.Find("model/w")->data);
}

// Mutates index fields in place (bytes and machine words at every offset),
// patches the checksum, and requires a clean result: DataLoss, or a
// consistent decode. Run under ASan this also checks for memory errors.
TEST_F(DamageTest, IndexMutationsWithValidChecksumFailCleanly) {
  const uint64_t kWords[] = {0,
                             1,
                             2,
                             0x7f,
                             0xff,
                             0x800,
                             0xffff,
                             0x10000,
                             0x7fffffff,
                             0x80000000,
                             0xffffffff,
                             0x100000000ULL,
                             0x7fffffffffffffffULL,
                             0x8000000000000000ULL,
                             0xfffffffffffffff8ULL,
                             0xffffffffffffffffULL};
  int decoded_ok = 0, failed = 0;
  for (const File& f : Files()) {
    const std::string index = IndexOf(*f.bytes);
    auto check = [&](const std::string& mutated, const std::string& what) {
      if (mutated == index) return;
      Status s = TryDecode(scratch_, WithIndex(*f.bytes, mutated), *f.base, codec_);
      if (s.ok()) {
        ++decoded_ok;
      } else {
        ++failed;
        ASSERT_EQ(s.code(), StatusCode::kDataLoss) << f.name << " " << what << ": " << s.ToString();
      }
    };
    for (size_t i = 0; i < index.size(); ++i) {
      for (int v : {0x00, 0xff, 0x7f, 0x80, 0x01}) {
        std::string b = index;
        b[i] = static_cast<char>(v);
        check(b, "byte " + std::to_string(i) + " = " + std::to_string(v));
      }
      for (int delta : {1, -1}) {
        std::string b = index;
        b[i] = static_cast<char>(b[i] + delta);
        check(b, "byte " + std::to_string(i) + " + " + std::to_string(delta));
      }
      for (size_t width : {4, 8}) {
        if (i + width > index.size()) continue;
        for (uint64_t w : kWords) {
          std::string b = index;
          std::memcpy(b.data() + i, &w, width);
          check(b, "word" + std::to_string(width) + " at " + std::to_string(i) + " = " +
                       std::to_string(w));
        }
      }
    }
    // Random multi-field damage.
    std::mt19937_64 rng(99);
    for (int k = 0; k < 1500; ++k) {
      std::string b = index;
      int n = 1 + static_cast<int>(rng() % 4);
      for (int j = 0; j < n; ++j) {
        size_t at = rng() % b.size();
        if (rng() % 2 && at + 8 <= b.size()) {
          uint64_t w = kWords[rng() % std::size(kWords)];
          std::memcpy(b.data() + at, &w, 1 + rng() % 8);
        } else {
          b[at] = static_cast<char>(rng());
        }
      }
      if (rng() % 8 == 0) b.resize(rng() % b.size());  // and truncate
      check(b, "random " + std::to_string(k));
    }
  }
  EXPECT_GT(failed, 1000);
  // A few edits are harmless (a name's byte, a base id a full file ignores).
  EXPECT_GT(decoded_ok, 0);
}

}  // namespace
}  // namespace spot::ckpt
