#include "ckpt/format.h"

#include <fmt/format.h>
#include <gtest/gtest.h>

#include <cfloat>
#include <cmath>
#include <cstring>
#include <functional>
#include <limits>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <random>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "ckpt/blob_store.h"
#include "ckpt/format_test_util.h"
#include "core/temp_dir.h"

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

// A full version written once (a durable copy written in full) keeps no
// reference: the same file as with an empty one, and no copy of the state.
TEST(FormatTest, AFullVersionWithoutAReferenceIsTheSameFile) {
  MemoryBlobStore store;
  ChunkCodec codec;
  Container c = Make(SampleSpecs(true), 3);
  const Container want = Clone(c);
  Container ref;
  auto kept = WriteTo(store, "kept", c, CodecPlan{}, &ref, 7, -1, codec);
  ASSERT_TRUE(kept.ok()) << kept.status().ToString();
  auto once = WriteTo(store, "once", c, CodecPlan{}, nullptr, 7, -1, codec);
  ASSERT_TRUE(once.ok()) << once.status().ToString();
  EXPECT_EQ(*store.Read("once"), *store.Read("kept"));
  EXPECT_EQ(once->checksum, kept->checksum);
  EXPECT_EQ(once->raw_chunks, kept->raw_chunks);
  auto got = ReadFrom(store, "once", nullptr, codec);
  ASSERT_TRUE(got.ok()) << got.status().ToString();
  ExpectSame(*got, want);
  // A delta plan with a base id but no reference writes every record in full.
  auto lone = WriteTo(store, "lone", c, CodecPlan{}, nullptr, 8, 7, codec);
  ASSERT_TRUE(lone.ok()) << lone.status().ToString();
  EXPECT_EQ(lone->delta_records, 0);
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
    if (r.name != "model/i32") partial.AddWithStorage(r.name, r.dtype, r.shape, Buffer(r.data));
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

// ---------------------------------------------------------------------------
// Parallel decoding and chains.

// Four versions, a full one and three deltas (ids 1-4, each on the one
// before), in which "model/i32" changes layout at 3 (written full in a delta
// version), "optim/f64.exp_avg" is dropped at 3 and "added" appears at 4.
struct Chain {
  MemoryBlobStore store;
  std::vector<Container> want;  // what version i + 1 decodes to
  std::vector<CheckpointFile> files;
  std::vector<const CheckpointFile*> Files(size_t from = 0) const {
    std::vector<const CheckpointFile*> out;
    for (size_t i = from; i < files.size(); ++i) out.push_back(&files[i]);
    return out;
  }
};

Container Edited(const Container& c, int64_t id) {
  Container out;
  for (const Record& r : c.records()) {
    if (id == 3 && r.name == "optim/f64.exp_avg") continue;
    std::vector<int64_t> shape = r.shape;
    if (id == 3 && r.name == "model/i32") shape = {r.numel()};
    out.AddWithStorage(r.name, r.dtype, shape, Buffer(r.data));
  }
  if (id == 4) out.AddBytes("added", "new at version 4");
  return out;
}

std::unique_ptr<Chain> WriteChain(const CodecPlan& plan) {
  auto ch = std::make_unique<Chain>();
  ChunkCodec codec;
  Container ref;
  // Two chunks in the big record, the second short.
  Container state = Make(SampleSpecs(/*big=*/true, (kChunkBytes + 4000) / 4), 1);
  for (int64_t id = 1; id <= 4; ++id) {
    Container next = Edited(Next(state, static_cast<uint64_t>(id) + 100), id + 1);
    auto f = WriteTo(ch->store, "v" + std::to_string(id), state, plan, &ref, id,
                     id == 1 ? -1 : id - 1, codec);
    EXPECT_TRUE(f.ok()) << f.status().ToString();
    ch->want.push_back(Clone(ref));
    state = std::move(next);
  }
  for (int64_t id = 1; id <= 4; ++id) {
    auto f = CheckpointFile::Open(ch->store, "v" + std::to_string(id));
    EXPECT_TRUE(f.ok()) << f.status().ToString();
    if (f.ok()) ch->files.push_back(std::move(f).value());
  }
  return ch;
}

class ChainTest : public ::testing::TestWithParam<Codec> {
 protected:
  CodecPlan Plan() const {
    CodecPlan p;
    p.delta = GetParam();
    return p;
  }
};

TEST_P(ChainTest, ReadChainGivesWhatReadAllFileByFileGives) {
  auto ch = WriteChain(Plan());
  ASSERT_EQ(ch->files.size(), 4u);
  // The chain is what the test means it to be.
  EXPECT_EQ(ch->files[0].base_id(), -1);
  for (int i = 1; i < 4; ++i) EXPECT_EQ(ch->files[i].base_id(), i);
  EXPECT_LT(ch->want[3].FindIndex("optim/f64.exp_avg"), 0);
  EXPECT_GE(ch->want[3].FindIndex("added"), 0);
  ChunkCodec codec;
  // File by file, each on the one before.
  Container prev;
  for (int i = 0; i < 4; ++i) {
    auto got = ch->files[i].ReadAll(i == 0 ? nullptr : &prev, codec, /*threads=*/1);
    ASSERT_TRUE(got.ok()) << i << ": " << got.status().ToString();
    ExpectSame(*got, ch->want[i], "file by file, version " + std::to_string(i + 1));
    EXPECT_TRUE(got->VerifyRecords().empty());
    prev = std::move(got).value();
  }
  for (int threads : {1, 2, 5, 0}) {
    const std::string what = fmt::format("{} threads", threads);
    auto got = CheckpointFile::ReadChain(ch->Files(), nullptr, codec, threads);
    ASSERT_TRUE(got.ok()) << what << ": " << got.status().ToString();
    ExpectSame(*got, ch->want[3], what);
    EXPECT_TRUE(got->VerifyRecords().empty()) << what;
    // From the middle of the chain, on the decoded base.
    Container base = Clone(ch->want[0]);
    got = CheckpointFile::ReadChain(ch->Files(1), &base, codec, threads);
    ASSERT_TRUE(got.ok()) << what << ": " << got.status().ToString();
    ExpectSame(*got, ch->want[3], what + ", from version 2");
    // One file is ReadAll.
    Container base3 = Clone(ch->want[2]);
    auto one = ch->files[3].ReadAll(&base3, codec, threads);
    ASSERT_TRUE(one.ok()) << what << ": " << one.status().ToString();
    ExpectSame(*one, ch->want[3], what + ", ReadAll");
  }
}

TEST_P(ChainTest, EveryDamagedChunkOfEveryVersionIsRejected) {
  auto ch = WriteChain(Plan());
  ASSERT_EQ(ch->files.size(), 4u);
  ChunkCodec codec;
  int checked = 0;
  for (size_t j = 0; j < 4; ++j) {
    const std::string name = "v" + std::to_string(j + 1);
    for (const RecordEntry& e : ch->files[j].records()) {
      for (size_t k = 0; k < e.chunks.size(); ++k) {
        const ChunkRef& c = e.chunks[k];
        std::string& blob = ch->store.blob(name);
        const size_t at = c.offset + c.stored_bytes / 2;
        blob[at] = static_cast<char>(blob[at] ^ 0x20);
        std::string first;
        for (int threads : {1, 3}) {
          auto got = CheckpointFile::ReadChain(ch->Files(), nullptr, codec, threads);
          ASSERT_FALSE(got.ok()) << name << " " << e.name << " chunk " << k;
          EXPECT_EQ(got.status().code(), StatusCode::kDataLoss);
          const std::string msg(got.status().message());
          EXPECT_NE(msg.find(ch->store.Describe(name) + ": record '" + e.name + "'"),
                    std::string::npos)
              << msg;
          // A chunk stored as is is checked by its record's checksum.
          EXPECT_NE(
              msg.find(ch->files[j].StoredRaw(e, k) ? std::string("decoded bytes do not match")
                                                    : fmt::format("chunk {}", k)),
              std::string::npos)
              << msg;
          if (threads == 1) first = msg;
          EXPECT_EQ(msg, first) << "the error does not depend on the thread count";
        }
        blob[at] = static_cast<char>(blob[at] ^ 0x20);
        ++checked;
      }
    }
  }
  // The dropped record's last version (2) is checked though nothing uses it.
  EXPECT_GT(checked, 4 * 15);
  auto intact = CheckpointFile::ReadChain(ch->Files(), nullptr, codec, 3);
  ASSERT_TRUE(intact.ok()) << intact.status().ToString();
  ExpectSame(*intact, ch->want[3], "after repair");
}

INSTANTIATE_TEST_SUITE_P(Codecs, ChainTest,
                         ::testing::Values(Codec::kSubDelta, Codec::kXorDelta, Codec::kQ8Delta),
                         [](const auto& info) {
                           std::string name(CodecName(info.param));
                           std::erase(name, '-');
                           return name;
                         });

TEST(FormatTest, ReadChainRefusesWhatIsNotAChain) {
  auto ch = WriteChain(CodecPlan{});
  ASSERT_EQ(ch->files.size(), 4u);
  ChunkCodec codec;
  EXPECT_EQ(CheckpointFile::ReadChain({}, nullptr, codec).status().code(),
            StatusCode::kInvalidArgument);
  const CheckpointFile* gap[] = {&ch->files[0], &ch->files[2]};
  auto s = CheckpointFile::ReadChain(gap, nullptr, codec).status();
  EXPECT_EQ(s.code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(s.message().find("against version 2, not 1"), std::string::npos) << s.message();
  EXPECT_EQ(CheckpointFile::ReadChain(ch->Files(1), nullptr, codec).status().code(),
            StatusCode::kFailedPrecondition)
      << "a chain starting with a delta needs its base";
  // A base without a record the chain's first delta needs.
  Container partial;
  for (const Record& r : ch->want[0].records()) {
    if (r.name != "model/f32") partial.AddWithStorage(r.name, r.dtype, r.shape, Buffer(r.data));
  }
  s = CheckpointFile::ReadChain(ch->Files(1), &partial, codec).status();
  EXPECT_EQ(s.code(), StatusCode::kDataLoss);
  EXPECT_NE(s.message().find("record 'model/f32': base version 1 has no such record"),
            std::string::npos)
      << s.message();
}

// Every byte of a small file flipped: each flip is caught, with the same error
// whatever the thread count.
TEST(FormatTest, ReadAllDecodesIntoShareableMemory) {
  MemoryBlobStore store;
  ChunkCodec codec;
  Container c = Make(SampleSpecs(true), 11), ref;
  ASSERT_TRUE(WriteTo(store, "v", c, CodecPlan{}, &ref, 1, -1, codec).ok());
  auto f = CheckpointFile::Open(store, "v");
  ASSERT_TRUE(f.ok());
  std::vector<std::pair<std::shared_ptr<void>, std::string_view>> kept;
  for (int threads : {1, 2}) {
    auto got = f->ReadAll(nullptr, codec, threads);
    ASSERT_TRUE(got.ok()) << got.status().ToString();
    ExpectSame(*got, ref, fmt::format("{} threads", threads));
    for (size_t i = 0; i < got->records().size(); ++i) {
      ASSERT_NE(got->SharedOwner(i), nullptr) << got->records()[i].name;
      kept.emplace_back(got->SharedOwner(i), got->records()[i].data);
    }
  }
  // The decoded bytes outlive their Containers while a share is held.
  for (size_t i = 0; i < kept.size(); ++i) {
    const Record& r = ref.records()[i % ref.records().size()];
    EXPECT_EQ(kept[i].second, r.data) << r.name;
  }
}

// A directory's files of kMapMinBytes and more are read through a mapping
// of the file instead of into a buffer: the same bytes, the same checks.
TEST(FormatTest, MappedFilesDecodeAndRejectDamageAsReadFilesDo) {
  auto tmp = TempDir::Create("format-mapped");
  ASSERT_TRUE(tmp.ok()) << tmp.status().ToString();
  auto opened = DirectoryBlobStore::Open(tmp->path().string());
  ASSERT_TRUE(opened.ok()) << opened.status().ToString();
  DirectoryBlobStore& store = **opened;
  ChunkCodec codec;
  Container c = Make(SampleSpecs(/*big=*/true), 5), ref;  // a record of three chunks
  ASSERT_TRUE(WriteTo(store, "v", c, CodecPlan{}, &ref, 1, -1, codec).ok());
  auto bytes = store.Read("v");
  ASSERT_TRUE(bytes.ok());
  ASSERT_GE(bytes->size(), kMapMinBytes);
  auto reader = store.OpenReader("v");
  ASSERT_TRUE(reader.ok());
  EXPECT_EQ((*reader)->mapped(), *bytes);

  auto f = CheckpointFile::Open(store, "v");
  ASSERT_TRUE(f.ok()) << f.status().ToString();
  for (int threads : {1, 2}) {
    auto got = f->ReadAll(nullptr, codec, threads);
    ASSERT_TRUE(got.ok()) << got.status().ToString();
    ExpectSame(*got, ref, fmt::format("{} threads", threads));
  }
  for (size_t i = 0; i < f->records().size(); ++i) {
    std::string out(f->records()[i].raw_bytes, '\0');
    ASSERT_TRUE(f->ReadRecord(i, std::span<char>(out), codec).ok()) << f->records()[i].name;
    EXPECT_EQ(out, ref.records()[i].data) << f->records()[i].name;
  }

  // Each chunk of the large record damaged on disk in turn.
  size_t big = f->records().size();
  for (size_t i = 0; i < f->records().size(); ++i) {
    if (f->records()[i].name == "model/big") big = i;
  }
  ASSERT_LT(big, f->records().size());
  const RecordEntry& e = f->records()[big];
  ASSERT_EQ(e.chunks.size(), 3u);
  for (size_t k = 0; k < e.chunks.size(); ++k) {
    std::string damaged = *bytes;
    const size_t at = e.chunks[k].offset + e.chunks[k].stored_bytes / 2;
    damaged[at] = static_cast<char>(damaged[at] ^ 0x20);
    ASSERT_TRUE(store.Put("d", damaged).ok());
    auto d = CheckpointFile::Open(store, "d");
    ASSERT_TRUE(d.ok()) << d.status().ToString();
    const std::string want =
        f->StoredRaw(e, k) ? std::string("decoded bytes do not match") : fmt::format("chunk {}", k);
    for (int threads : {1, 2}) {
      auto got = d->ReadAll(nullptr, codec, threads);
      ASSERT_FALSE(got.ok()) << "chunk " << k;
      EXPECT_EQ(got.status().code(), StatusCode::kDataLoss);
      EXPECT_NE(got.status().message().find(want), std::string::npos) << got.status().message();
    }
    std::string out(e.raw_bytes, '\0');
    Status one = d->ReadRecord(big, std::span<char>(out), codec);
    EXPECT_EQ(one.code(), StatusCode::kDataLoss);
    EXPECT_NE(one.message().find(want), std::string::npos) << one.message();
  }
}

TEST(FormatTest, ParallelReadAllRejectsEveryFlippedByteAsSerialDoes) {
  MemoryBlobStore store;
  ChunkCodec codec;
  Container c = Make(SampleSpecs(false), 3), ref;
  ASSERT_TRUE(WriteTo(store, "v", c, CodecPlan{}, &ref, 1, -1, codec).ok());
  const std::string good = store.blob("v");
  for (int threads : {2, 4}) {
    store.Set("f", good);
    auto f = CheckpointFile::Open(store, "f");
    ASSERT_TRUE(f.ok());
    auto got = f->ReadAll(nullptr, codec, threads);
    ASSERT_TRUE(got.ok()) << got.status().ToString();
    ExpectSame(*got, ref, fmt::format("{} threads", threads));
  }
  for (size_t i = 0; i < good.size(); ++i) {
    std::string bad = good;
    bad[i] = static_cast<char>(bad[i] ^ 0x01);
    store.Set("f", bad);
    auto f = CheckpointFile::Open(store, "f");
    if (!f.ok()) continue;  // header, index or footer: Open's checks
    auto serial = f->ReadAll(nullptr, codec, 1);
    auto parallel = f->ReadAll(nullptr, codec, 4);
    ASSERT_FALSE(serial.ok()) << "byte " << i;
    ASSERT_FALSE(parallel.ok()) << "byte " << i;
    EXPECT_EQ(serial.status().message(), parallel.status().message()) << "byte " << i;
  }
}

}  // namespace
}  // namespace spot::ckpt
