#include "ckpt/format.h"

#include <fmt/format.h>
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

#include "ckpt/format_test_util.h"

namespace spot::ckpt {
namespace {

using namespace format_testing;  // NOLINT: test helpers

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

INSTANTIATE_TEST_SUITE_P(Codecs, FullCodecTest,
                         ::testing::Values(Codec::kRaw, Codec::kShuffleZstd, Codec::kPlanesZstd),
                         [](const auto& info) {
                           std::string name(CodecName(info.param));
                           std::erase(name, '-');
                           return name;
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

class LosslessDeltaTest : public ::testing::TestWithParam<Codec> {};

TEST_P(LosslessDeltaTest, ChainIsBitwiseExact) {
  CodecPlan plan;
  plan.delta = plan.lossless_delta = GetParam();
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
    auto f = WriteTo(store, name, state, plan, &ref, id, base, codec);
    ASSERT_TRUE(f.ok()) << f.status().ToString();
    EXPECT_EQ(f->delta_records, id == 1 ? 0 : f->records) << name;
    if (id > 1) {
      EXPECT_EQ(f->codecs, fmt::format("{}:{}", CodecName(GetParam()), f->records));
    }
    EXPECT_EQ(f->checksum, Checksum(store.blob(name)));
    auto file = CheckpointFile::Open(store, name);
    ASSERT_TRUE(file.ok()) << file.status().ToString();
    EXPECT_EQ(file->base_id(), base);
    auto got = file->ReadAll(id == 1 ? nullptr : &prev_decoded, codec);
    ASSERT_TRUE(got.ok()) << name << ": " << got.status().ToString();
    ExpectSame(*got, want, name);
    ExpectSame(ref, *got, name + " reference");
    // Unchanged records cost next to nothing as deltas.
    if (id > 1) {
      const RecordEntry& e = file->records()[0];  // every third record is unchanged
      EXPECT_LT(e.stored_bytes(), e.raw_bytes / 4 + 64) << e.name;
    }
    prev_decoded = std::move(got).value();
    state = Next(want, static_cast<uint64_t>(id) + 100);
  }
}

INSTANTIATE_TEST_SUITE_P(Codecs, LosslessDeltaTest,
                         ::testing::Values(Codec::kSubDelta, Codec::kXorDelta),
                         [](const auto& info) {
                           std::string name(CodecName(info.param));
                           std::erase(name, '-');
                           return name;
                         });

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
        Codec expect = Codec::kPlanesZstd;
        if (id > 1) {
          expect = SupportsQ8(w.dtype) && (!optim || q8_optim) ? Codec::kQ8Delta : Codec::kSubDelta;
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
  EXPECT_EQ(f->codecs, "planes-zstd:3,sub-delta:1");
  auto file = CheckpointFile::Open(store, "v2");
  ASSERT_TRUE(file.ok());
  EXPECT_EQ(file->base_id(), 1);
  std::vector<Codec> codecs;
  for (const RecordEntry& e : file->records()) codecs.push_back(e.codec);
  EXPECT_EQ(codecs, (std::vector<Codec>{Codec::kPlanesZstd, Codec::kPlanesZstd, Codec::kSubDelta,
                                        Codec::kPlanesZstd}));
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

TEST(FormatTest, NonFiniteValuesFallBackFromQ8ToLosslessDelta) {
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
  for (const RecordEntry& e : file->records()) EXPECT_EQ(e.codec, Codec::kSubDelta) << e.name;
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
      partial.AddWithStorage(r.name, r.dtype, r.shape, Buffer(r.data));
  }
  auto s = file->ReadAll(&partial, codec).status();
  EXPECT_EQ(s.code(), StatusCode::kDataLoss);
  EXPECT_NE(s.message().find("model/i32"), std::string::npos) << s.message();

  // The base has it with another shape.
  Container reshaped;
  for (const Record& r : base.records()) {
    std::vector<int64_t> shape = r.shape;
    if (r.name == "model/i32") shape = {16};
    reshaped.AddWithStorage(r.name, r.dtype, shape, Buffer(r.data));
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
  CodecPlan lossy_fallback;
  lossy_fallback.lossless_delta = Codec::kQ8Delta;
  EXPECT_EQ(WriteTo(store, "x", c, lossy_fallback, &ref, 1, -1, codec).status().code(),
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

}  // namespace
}  // namespace spot::ckpt
