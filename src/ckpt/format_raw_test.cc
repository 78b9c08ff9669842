// Chunks stored as is (checkpoint format 3): a chunk whose codec would save
// too little is written raw, read straight into its destination and checked
// once; version 2 files still read. The rest of the format: format_test.cc.
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

#include "ckpt/format.h"
#include "ckpt/format_test_util.h"

namespace spot::ckpt {
namespace {

using namespace format_testing;  // NOLINT: test helpers

// The stored size of each chunk of `f`, and how many equal their raw size.
int RawChunks(const CheckpointFile& f) {
  int n = 0;
  for (const RecordEntry& e : f.records()) {
    for (size_t k = 0; k < e.chunks.size(); ++k) {
      const uint64_t raw = std::min<uint64_t>(kChunkBytes, e.raw_bytes - k * kChunkBytes);
      EXPECT_LE(e.chunks[k].stored_bytes, raw) << e.name << " chunk " << k;
      if (f.StoredRaw(e, k)) {
        EXPECT_EQ(e.chunks[k].stored_bytes, raw) << e.name << " chunk " << k;
        ++n;
      }
    }
  }
  return n;
}

TEST(FormatTest, ChunksACodecBarelyShrinksAreStoredRawAndRoundTrip) {
  for (Codec full : {Codec::kPlanesZstd, Codec::kShuffleZstd}) {
    SCOPED_TRACE(CodecName(full));
    MemoryBlobStore store;
    ChunkCodec codec;
    Container c = Make(SampleSpecs(/*big=*/true), 5);
    const Container want = Clone(c);
    Container ref;
    // The random fill's f32 values compress by a fifth at most: a threshold
    // of a half stores every chunk as is, zero only the incompressible ones.
    CodecPlan all_raw{.full = full, .raw_below_saving = 0.5};
    auto f = WriteTo(store, "raw", c, all_raw, &ref, 1, -1, codec);
    ASSERT_TRUE(f.ok()) << f.status().ToString();
    auto file = CheckpointFile::Open(store, "raw");
    ASSERT_TRUE(file.ok()) << file.status().ToString();
    EXPECT_EQ(file->format_version(), kFormatVersion);
    EXPECT_EQ(file->index_checksum(), f->index_checksum);
    int chunks = 0;
    for (const RecordEntry& e : file->records()) chunks += static_cast<int>(e.chunks.size());
    EXPECT_EQ(RawChunks(*file), chunks);
    EXPECT_EQ(f->raw_chunks, chunks);
    EXPECT_EQ(file->records()[0].codec, full);  // the record keeps its codec
    for (int threads : {1, 2}) {
      auto got = file->ReadAll(nullptr, codec, threads);
      ASSERT_TRUE(got.ok()) << got.status().ToString();
      ExpectSame(*got, want, "all raw");
      EXPECT_EQ(got->VerifyRecords(), "");
    }
    for (size_t i = 0; i < file->records().size(); ++i) {
      const RecordEntry& e = file->records()[i];
      std::string one(e.raw_bytes, '\0');
      ASSERT_TRUE(file->ReadRecord(i, std::span<char>(one), codec).ok()) << e.name;
      EXPECT_TRUE(one == want.Find(e.name)->data) << e.name;
    }

    Container c0 = Clone(want);
    Container ref0;
    auto mixed = WriteTo(store, "mixed", c0, CodecPlan{.full = full, .raw_below_saving = 0}, &ref0,
                         1, -1, codec);
    ASSERT_TRUE(mixed.ok());
    auto mf = CheckpointFile::Open(store, "mixed");
    ASSERT_TRUE(mf.ok());
    // Tiny records do not shrink (stored raw); the big f32 record does.
    EXPECT_GT(RawChunks(*mf), 0);
    EXPECT_LT(RawChunks(*mf), chunks);
    EXPECT_LT(mixed->file_bytes, f->file_bytes);
    auto got = mf->ReadAll(nullptr, codec);
    ASSERT_TRUE(got.ok()) << got.status().ToString();
    ExpectSame(*got, want, "mixed");
  }
}

TEST(FormatTest, DeltaChunksStoredRawDecodeOnTheirBase) {
  for (Codec delta : {Codec::kSubDelta, Codec::kXorDelta, Codec::kQ8Delta}) {
    SCOPED_TRACE(CodecName(delta));
    MemoryBlobStore store;
    ChunkCodec codec;
    Container c1 = Make(SampleSpecs(/*big=*/true), 8);
    Container c2 = Next(c1, 9);
    Container ref;
    CodecPlan plan{.delta = delta, .q8_optimizer_state = true, .raw_below_saving = 0.999};
    ASSERT_TRUE(WriteTo(store, "v1", c1, plan, &ref, 1, -1, codec).ok());
    const Container base = Clone(ref);
    const Container want = Clone(c2);
    auto f = WriteTo(store, "v2", c2, plan, &ref, 2, 1, codec);
    ASSERT_TRUE(f.ok()) << f.status().ToString();
    EXPECT_GT(f->delta_records, 0);
    auto file = CheckpointFile::Open(store, "v2");
    ASSERT_TRUE(file.ok());
    // Records that changed do not shrink by 99.9%: stored as is. (The
    // unchanged ones do, under every delta codec.)
    EXPECT_GT(RawChunks(*file), 0);
    Container b = Clone(base);
    auto got = file->ReadAll(&b, codec);
    ASSERT_TRUE(got.ok()) << got.status().ToString();
    // A raw chunk holds the saved values themselves, q8-delta's included:
    // the reference (what a reader decodes) is exact there.
    ExpectSame(*got, ref, "decoded vs the writer's reference");
    for (const Record& r : want.records()) {
      const RecordEntry* e = nullptr;
      for (const RecordEntry& x : file->records()) {
        if (x.name == r.name) e = &x;
      }
      ASSERT_NE(e, nullptr);
      bool all_raw = !e->chunks.empty();
      for (size_t k = 0; k < e->chunks.size(); ++k) all_raw &= file->StoredRaw(*e, k);
      if (all_raw) EXPECT_TRUE(got->Find(r.name)->data == r.data) << r.name;
    }
  }
}

TEST(FormatTest, ADamagedRawChunkIsRefused) {
  MemoryBlobStore store;
  ChunkCodec codec;
  Container c = Make(SampleSpecs(/*big=*/true), 4), ref;
  ASSERT_TRUE(WriteTo(store, "v", c, CodecPlan{.raw_below_saving = 0.5}, &ref, 1, -1, codec).ok());
  const std::string good = store.blob("v");
  auto f = CheckpointFile::Open(store, "v");
  ASSERT_TRUE(f.ok());
  const RecordEntry* big = nullptr;
  for (const RecordEntry& e : f->records()) {
    if (e.name == "model/big") big = &e;
  }
  ASSERT_NE(big, nullptr);
  ASSERT_EQ(big->chunks.size(), 3u);
  for (size_t k = 0; k < big->chunks.size(); ++k) {
    ASSERT_TRUE(f->StoredRaw(*big, k));
    for (uint64_t at :
         {uint64_t{0}, big->chunks[k].stored_bytes / 2, big->chunks[k].stored_bytes - 1}) {
      std::string bad = good;
      bad[big->chunks[k].offset + at] ^= 0x10;
      store.Set("bad", bad);
      auto bf = CheckpointFile::Open(store, "bad");
      ASSERT_TRUE(bf.ok());  // the index is intact
      for (int threads : {1, 2}) {
        auto got = bf->ReadAll(nullptr, codec, threads);
        ASSERT_EQ(got.status().code(), StatusCode::kDataLoss) << "chunk " << k << " byte " << at;
        EXPECT_NE(got.status().message().find("record 'model/big': decoded bytes do not match"),
                  std::string::npos)
            << got.status().message();
      }
    }
  }
}

TEST(FormatTest, Version2FilesStillRead) {
  // A version 2 file: every chunk of a raw record is stored raw in both
  // versions, so patching the header gives exactly what a version 2 writer
  // wrote.
  MemoryBlobStore store;
  ChunkCodec codec;
  Container c = Make(SampleSpecs(/*big=*/true), 6), ref;
  const Container want = Clone(c);
  ASSERT_TRUE(WriteTo(store, "v", c, CodecPlan{.full = Codec::kRaw}, &ref, 1, -1, codec).ok());
  const uint32_t two = 2;
  // The header says 2, and the footer's index checksum covers the index
  // alone, as in format 2.
  auto as_version2 = [&](std::string b) {
    std::memcpy(b.data() + 8, &two, 4);
    const size_t footer = b.size() - kFooterBytes;
    uint64_t index_offset, index_bytes;
    std::memcpy(&index_offset, b.data() + footer, 8);
    std::memcpy(&index_bytes, b.data() + footer + 8, 8);
    const uint64_t sum = Checksum(std::string_view(b).substr(index_offset, index_bytes));
    std::memcpy(b.data() + footer + 16, &sum, 8);
    return b;
  };
  const std::string v2 = as_version2(store.blob("v"));
  // Format 3 binds the header in the index checksum: the version alone
  // changed is damage.
  std::string flipped = store.blob("v");
  std::memcpy(flipped.data() + 8, &two, 4);
  store.Set("flipped", flipped);
  auto ff = CheckpointFile::Open(store, "flipped");
  EXPECT_EQ(ff.status().code(), StatusCode::kDataLoss);
  EXPECT_NE(ff.status().message().find("index checksum mismatch"), std::string::npos)
      << ff.status().ToString();
  store.Set("v2", v2);
  auto f = CheckpointFile::Open(store, "v2");
  ASSERT_TRUE(f.ok()) << f.status().ToString();
  EXPECT_EQ(f->format_version(), 2u);
  auto got = f->ReadAll(nullptr, codec);
  ASSERT_TRUE(got.ok()) << got.status().ToString();
  ExpectSame(*got, want, "version 2");

  // In version 2 a chunk at its raw size under a compressing codec is that
  // codec's output, not raw bytes: a version 3 file read as version 2 fails.
  Container c3 = Clone(want), ref3;
  ASSERT_TRUE(
      WriteTo(store, "v3", c3, CodecPlan{.raw_below_saving = 0.5}, &ref3, 1, -1, codec).ok());
  store.Set("as_v2", as_version2(store.blob("v3")));
  auto g = CheckpointFile::Open(store, "as_v2");
  ASSERT_TRUE(g.ok());
  EXPECT_EQ(g->ReadAll(nullptr, codec).status().code(), StatusCode::kDataLoss);
}

TEST(FormatTest, RejectsARawThresholdOutsideZeroToOne) {
  MemoryBlobStore store;
  ChunkCodec codec;
  for (double bad : {-0.1, 1.0, std::nan("")}) {
    Container c = Make(SampleSpecs(false), 1), ref;
    auto f = WriteTo(store, "x", c, CodecPlan{.raw_below_saving = bad}, &ref, 1, -1, codec);
    EXPECT_EQ(f.status().code(), StatusCode::kInvalidArgument) << bad;
    EXPECT_NE(f.status().message().find("raw_below_saving"), std::string::npos);
  }
}

}  // namespace
}  // namespace spot::ckpt
