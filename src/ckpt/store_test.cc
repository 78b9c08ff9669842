#include "ckpt/store.h"

#include <gtest/gtest.h>

#include "ckpt/store_testing.h"

namespace spot::ckpt {
namespace {

using namespace store_testing;  // NOLINT: the fixture and its helpers

TEST(StoreNamesTest, FileNamesAndIds) {
  EXPECT_EQ(CheckpointStore::DataFileName(7), "ckpt-000007.bin");
  EXPECT_EQ(CheckpointStore::ManifestFileName(1234567), "ckpt-1234567.json");
  EXPECT_EQ(CheckpointStore::ParseId("ckpt-000007.bin"), 7);
  EXPECT_EQ(CheckpointStore::ParseId("ckpt-000007.json"), 7);
  EXPECT_EQ(CheckpointStore::ParseId("ckpt-1234567.json"), 1234567);
  for (const char* bad :
       {"ckpt-.bin", "ckpt-12a.bin", "ckpt-000007.txt", "xckpt-1.bin", "ckpt--1.bin",
        "ckpt-1234567890123456.bin", ".tmp.ckpt-000001.bin.12", "ckpt-000007.bin.bak", ""}) {
    EXPECT_EQ(CheckpointStore::ParseId(bad), -1) << bad;
  }
  EXPECT_EQ(TierName(Tier::kLocal), "local");
  EXPECT_EQ(TierName(Tier::kDurable), "durable");
}

TEST_F(StoreTest, OpenValidatesOptions) {
  StoreOptions o;
  EXPECT_EQ(CheckpointStore::Open(o).status().code(), StatusCode::kInvalidArgument);
  o.dir = local_.string();
  o.retention.keep_last = 0;
  EXPECT_EQ(CheckpointStore::Open(o).status().code(), StatusCode::kInvalidArgument);
  o.retention.keep_last = 1;
  o.durable_dir = o.dir;
  EXPECT_EQ(CheckpointStore::Open(o).status().code(), StatusCode::kInvalidArgument);
  o.durable_dir = durable_.string();
  auto s = CheckpointStore::Open(o);
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  EXPECT_TRUE((*s)->has_durable());
  EXPECT_TRUE(fs::is_directory(local_));
  EXPECT_TRUE(fs::is_directory(durable_));
  EXPECT_EQ((*s)->dir(), local_.string());
}

TEST_F(StoreTest, EmptyStore) {
  auto s = Open();
  EXPECT_TRUE(s->Empty());
  EXPECT_TRUE(s->List().empty());
  auto l = s->LoadNewestValid();
  EXPECT_EQ(l.status().code(), StatusCode::kNotFound);
  EXPECT_NE(l.status().message().find(local_.string()), std::string::npos);
  EXPECT_FALSE(s->Load(1).ok());
  EXPECT_EQ(s->ReserveId(), 1);
  EXPECT_EQ(s->ReserveId(), 2);
}

TEST_F(StoreTest, SaveListLoad) {
  auto s = Open();
  std::vector<VersionInfo> saved = SaveFull(*s, {1, 2, 3});
  ASSERT_EQ(saved.size(), 3u);
  EXPECT_FALSE(s->Empty());
  for (size_t i = 0; i < saved.size(); ++i) {
    const VersionInfo& v = saved[i];
    EXPECT_EQ(v.id, static_cast<int64_t>(i + 1));
    EXPECT_EQ(v.step, static_cast<int64_t>(10 * (i + 1)));
    EXPECT_EQ(v.base, -1);
    EXPECT_EQ(v.chain_depth, 0);
    EXPECT_EQ(v.records, 5);
    std::string bytes = ReadAll(LocalData(v.id));
    EXPECT_EQ(v.file_bytes, bytes.size());
    EXPECT_EQ(v.checksum, Checksum(bytes));
    EXPECT_EQ(v.payload_bytes, State(i + 1).payload_bytes());
    EXPECT_TRUE(fs::exists(LocalManifest(v.id)));
    EXPECT_GT(v.created_unix_ms, 0);
  }
  std::vector<VersionInfo> list = s->List();
  ASSERT_EQ(list.size(), 3u);
  EXPECT_EQ(list[0].id, 3);  // newest first
  EXPECT_EQ(list[2].id, 1);
  EXPECT_EQ(list[0].step, 30);
  EXPECT_EQ(list[0].tiers, std::vector<Tier>{Tier::kLocal});
  EXPECT_EQ(list[0].meta_json, "{\"seed\":3}");
  EXPECT_EQ(list[0].checksum, saved[2].checksum);
  EXPECT_EQ(list[0].codecs, saved[2].codecs);
  EXPECT_EQ(list[0].file_bytes, saved[2].file_bytes);

  for (uint64_t seed : {1, 2, 3}) {
    auto l = s->Load(static_cast<int64_t>(seed));
    ASSERT_TRUE(l.ok()) << l.status().ToString();
    ExpectSame(l->container, State(seed), "version " + std::to_string(seed));
    EXPECT_EQ(l->info.step, static_cast<int64_t>(10 * seed));
    EXPECT_TRUE(l->skipped.empty());
    EXPECT_EQ(l->container.VerifyRecords(), "");
  }
  auto newest = s->LoadNewestValid();
  ASSERT_TRUE(newest.ok()) << newest.status().ToString();
  EXPECT_EQ(newest->info.id, 3);
  EXPECT_TRUE(newest->skipped.empty());
  ExpectSame(newest->container, State(3));
  for (Tier t : {Tier::kLocal}) EXPECT_TRUE(s->Verify(3, t).ok());
  EXPECT_EQ(s->Verify(3, Tier::kDurable).code(), StatusCode::kInvalidArgument);

  // A reopened store sees the same and continues the ids.
  s.reset();
  auto again = Open();
  EXPECT_EQ(again->List().size(), 3u);
  EXPECT_EQ(again->ReserveId(), 4);
}

TEST_F(StoreTest, MetadataMustBeJson) {
  auto s = Open();
  Container c = State(1);
  SaveRequest req;
  req.step = 10;
  req.meta_json = "{not json";
  EXPECT_EQ(s->Save(c, req).status().code(), StatusCode::kInvalidArgument);
  EXPECT_TRUE(s->Empty());
  req.meta_json = R"({"acc": 0.5, "epoch": 3})";
  auto v = s->Save(c, req);
  ASSERT_TRUE(v.ok());
  EXPECT_EQ(s->List()[0].meta_json, R"({"acc":0.5,"epoch":3})");
}

TEST_F(StoreTest, LoadNewestValidBeforeStep) {
  auto s = Open();
  SaveFull(*s, {1, 2, 3});  // steps 10, 20, 30
  auto l = s->LoadNewestValid(30);
  ASSERT_TRUE(l.ok());
  EXPECT_EQ(l->info.id, 2);
  EXPECT_TRUE(l->skipped.empty());
  l = s->LoadNewestValid(25);
  ASSERT_TRUE(l.ok());
  EXPECT_EQ(l->info.id, 2);
  l = s->LoadNewestValid(11);
  ASSERT_TRUE(l.ok());
  EXPECT_EQ(l->info.id, 1);
  EXPECT_EQ(s->LoadNewestValid(10).status().code(), StatusCode::kNotFound);
  l = s->LoadNewestValid(31);
  ASSERT_TRUE(l.ok());
  EXPECT_EQ(l->info.id, 3);
}

// ---------------------------------------------------------------------------
// Two tiers.

TEST_F(StoreTest, SaveReplicatesToTheDurableTier) {
  auto s = Open(Keep(100), /*with_durable=*/true);
  std::vector<VersionInfo> saved = SaveFull(*s, {1, 2});
  for (const VersionInfo& v : saved) {
    EXPECT_EQ(ReadAll(DurableData(v.id)), ReadAll(LocalData(v.id)));
    EXPECT_EQ(ReadAll(durable_ / CheckpointStore::ManifestFileName(v.id)),
              ReadAll(LocalManifest(v.id)));
    EXPECT_TRUE(s->Verify(v.id, Tier::kDurable).ok());
  }
  std::vector<VersionInfo> list = s->List();
  ASSERT_EQ(list.size(), 2u);
  EXPECT_EQ(list[0].tiers, (std::vector<Tier>{Tier::kLocal, Tier::kDurable}));
}

TEST_F(StoreTest, ReplicateCopiesDataAndManifest) {
  auto s = Open(Keep(100), true);
  std::vector<VersionInfo> chain = WriteChain(*s, 1, 1);
  ASSERT_EQ(chain.size(), 2u);
  EXPECT_TRUE(IdsIn(durable_).empty());  // Write alone stays local
  for (const VersionInfo& v : chain) ASSERT_TRUE(s->Replicate(v).ok());
  EXPECT_EQ(IdsIn(durable_), (std::vector<int64_t>{1, 2}));
  EXPECT_EQ(ReadAll(DurableData(2)), ReadAll(LocalData(2)));
  EXPECT_TRUE(s->Verify(2, Tier::kDurable).ok());

  // A local file that no longer matches its manifest is not replicated.
  std::vector<VersionInfo> more = WriteChain(*s, 10, 0);
  FlipByte(LocalData(more[0].id), 30);
  Status st = s->Replicate(more[0]);
  EXPECT_EQ(st.code(), StatusCode::kDataLoss);
  EXPECT_FALSE(fs::exists(DurableData(more[0].id)));
  EXPECT_FALSE(fs::exists(durable_ / CheckpointStore::ManifestFileName(more[0].id)));

  // Without a durable tier Replicate does nothing.
  auto single = CheckpointStore::Open({.dir = (tmp_->path() / "single").string()});
  ASSERT_TRUE(single.ok());
  EXPECT_TRUE((*single)->Replicate(chain[0]).ok());
}

TEST_F(StoreTest, DamagedLocalCopyFallsBackToTheDurableCopyOfTheSameVersion) {
  auto s = Open(Keep(100), true);
  SaveFull(*s, {1, 2, 3});
  FlipByte(LocalData(3), 50);
  auto l = s->LoadNewestValid();
  ASSERT_TRUE(l.ok()) << l.status().ToString();
  EXPECT_EQ(l->info.id, 3);
  EXPECT_EQ(l->info.tiers, std::vector<Tier>{Tier::kDurable});
  ExpectSame(l->container, State(3));
  ASSERT_EQ(l->skipped.size(), 1u) << Join(l->skipped);
  EXPECT_NE(l->skipped[0].find(LocalData(3).string()), std::string::npos) << l->skipped[0];

  // The same through Load(id), and with the local manifest gone.
  fs::remove(LocalManifest(3));
  auto by_id = s->Load(3);
  ASSERT_TRUE(by_id.ok()) << by_id.status().ToString();
  EXPECT_EQ(by_id->info.tiers, std::vector<Tier>{Tier::kDurable});
  ExpectSame(by_id->container, State(3));
}

TEST_F(StoreTest, VersionsOnlyInTheDurableTierAreFound) {
  {
    auto s = Open(Keep(100), true);
    SaveFull(*s, {1, 2, 3});
  }
  fs::remove_all(local_);  // a new machine: the local disk is empty
  auto s = Open(Keep(100), true);
  auto l = s->LoadNewestValid();
  ASSERT_TRUE(l.ok()) << l.status().ToString();
  EXPECT_EQ(l->info.id, 3);
  EXPECT_EQ(l->info.tiers, std::vector<Tier>{Tier::kDurable});
  ExpectSame(l->container, State(3));
  EXPECT_TRUE(l->skipped.empty()) << Join(l->skipped);
  EXPECT_EQ(s->List().size(), 3u);
  EXPECT_FALSE(s->Empty());
  // New ids continue above the durable ones.
  EXPECT_EQ(s->ReserveId(), 4);
}

TEST_F(StoreTest, ReserveIdIsAboveIdsInBothTiers) {
  {
    auto s = Open(Keep(100), true);
    SaveFull(*s, {1, 2, 3});  // ids 1..3 in both tiers
  }
  {
    // A store with the same durable tier and a fresh local one.
    StoreOptions o;
    o.dir = (tmp_->path() / "other_local").string();
    o.durable_dir = durable_.string();
    auto s = CheckpointStore::Open(o);
    ASSERT_TRUE(s.ok());
    EXPECT_EQ((*s)->ReserveId(), 4);
    EXPECT_EQ((*s)->ReserveId(), 5);
  }
  {
    // The same local tier and a fresh durable one.
    StoreOptions o;
    o.dir = local_.string();
    o.durable_dir = (tmp_->path() / "other_durable").string();
    auto s = CheckpointStore::Open(o);
    ASSERT_TRUE(s.ok());
    EXPECT_EQ((*s)->ReserveId(), 4);
  }
  {
    // A leftover data file without a manifest counts too: its id is not reused.
    WriteAll(durable_ / CheckpointStore::DataFileName(9), "partial");
    auto s = Open(Keep(100), true);
    EXPECT_EQ(s->ReserveId(), 10);
    auto v = SaveFull(*s, {4});
    ASSERT_EQ(v.size(), 1u);
    EXPECT_EQ(v[0].id, 11);
  }
}

// ---------------------------------------------------------------------------
// One check: what Verify and Inspect call damaged is exactly what a restore
// skips, and nothing is dropped from the listing.

TEST_F(StoreTest, DeltaChainRestoresBitwise) {
  auto s = Open();
  std::vector<VersionInfo> chain = WriteChain(*s, 1, 4);  // full + 4 deltas
  ASSERT_EQ(chain.size(), 5u);
  for (size_t i = 0; i < chain.size(); ++i) {
    EXPECT_EQ(chain[i].base, i == 0 ? -1 : chain[i - 1].id);
    EXPECT_EQ(chain[i].chain_depth, static_cast<int>(i));
    if (i > 0) {
      EXPECT_NE(chain[i].codecs.find("sub-delta"), std::string::npos);
    }
  }
  for (size_t i = 0; i < chain.size(); ++i) {
    auto l = s->Load(chain[i].id);
    ASSERT_TRUE(l.ok()) << l.status().ToString();
    ExpectSame(l->container, State(1 + i), "version " + std::to_string(chain[i].id));
    EXPECT_EQ(l->info.base, chain[i].base);
    EXPECT_EQ(l->info.chain_depth, static_cast<int>(i));
    EXPECT_TRUE(s->Verify(chain[i].id, Tier::kLocal).ok());
  }
  auto newest = s->LoadNewestValid();
  ASSERT_TRUE(newest.ok());
  EXPECT_EQ(newest->info.id, chain.back().id);
  ExpectSame(newest->container, State(5));
  // The manifest records the chain.
  std::vector<VersionInfo> list = s->List();
  EXPECT_EQ(list[0].base, chain[3].id);
  EXPECT_EQ(list[0].chain_depth, 4);
}

TEST_F(StoreTest, Q8DeltaChainLoadsWhatWasWritten) {
  // Lossy deltas: each version loads to what its writer's reference held,
  // close to the saved state; optimizer state stays exact.
  auto s = Open();
  std::vector<VersionInfo> chain = WriteChain(*s, 1, 3, Codec::kQ8Delta);
  ASSERT_EQ(chain.size(), 4u);
  for (size_t i = 0; i < chain.size(); ++i) {
    auto l = s->Load(chain[i].id);
    ASSERT_TRUE(l.ok()) << l.status().ToString();
    Container want = State(1 + i);
    EXPECT_TRUE(l->container.Find("optim/w.momentum")->data == want.Find("optim/w.momentum")->data);
    const Record* w = l->container.Find("model/w");
    for (size_t k = 0; k < w->data.size() / 4; ++k) {
      float got, exp;
      std::memcpy(&got, w->data.data() + 4 * k, 4);
      std::memcpy(&exp, want.Find("model/w")->data.data() + 4 * k, 4);
      ASSERT_NEAR(got, exp, 2.0 / 127) << "element " << k;
    }
  }
}

TEST_F(StoreTest, WriteWithAnUnmatchedReferenceIsAFullVersion) {
  // A reference whose records all changed layout: nothing is delta-encoded,
  // the version must stand alone.
  auto s = Open();
  ChunkCodec codec;
  Container reference;
  Container c1;
  c1.AddUninitialized("model/w", DType::kF32, {4});
  auto v1 = s->Write(s->ReserveId(), c1, &reference, -1, 0, SaveRequest{}, codec);
  ASSERT_TRUE(v1.ok());
  Container c2;
  std::span<char> d = c2.AddUninitialized("model/w", DType::kF32, {8});
  std::memset(d.data(), 3, d.size());
  auto v2 = s->Write(s->ReserveId(), c2, &reference, v1->id, 1, SaveRequest{}, codec);
  ASSERT_TRUE(v2.ok()) << v2.status().ToString();
  EXPECT_EQ(v2->base, -1);
  EXPECT_EQ(v2->chain_depth, 0);
  auto l = s->Load(v2->id);
  ASSERT_TRUE(l.ok()) << l.status().ToString();
  EXPECT_TRUE(l->container.Find("model/w")->data == std::string(32, '\3'));
  EXPECT_TRUE(s->Verify(v2->id, Tier::kLocal).ok());
}

TEST_F(StoreTest, BrokenBaseMakesItsDeltasUnusable) {
  auto s = Open();
  std::vector<VersionInfo> a = WriteChain(*s, 1, 2);  // ids 1 (full), 2, 3
  std::vector<VersionInfo> b = WriteChain(*s, 4, 2);  // ids 4 (full), 5, 6
  ASSERT_EQ(b.size(), 3u);
  FlipByte(LocalData(4), 30);
  auto l = s->LoadNewestValid();
  ASSERT_TRUE(l.ok()) << l.status().ToString();
  EXPECT_EQ(l->info.id, 3);
  ExpectSame(l->container, State(3));
  // 6 and 5 for their base, 4 itself.
  EXPECT_TRUE(Contains(l->skipped, "ckpt-000006.bin")) << Join(l->skipped);
  EXPECT_TRUE(Contains(l->skipped, "ckpt-000005.bin")) << Join(l->skipped);
  EXPECT_TRUE(Contains(l->skipped, "base version 4 is unusable")) << Join(l->skipped);
  EXPECT_EQ(s->Load(6).status().code(), StatusCode::kDataLoss);
  EXPECT_EQ(s->Verify(6, Tier::kLocal).code(), StatusCode::kDataLoss);

  // A deleted base, likewise.
  fs::remove(LocalData(2));
  fs::remove(LocalManifest(2));
  l = s->LoadNewestValid();
  ASSERT_TRUE(l.ok()) << l.status().ToString();
  EXPECT_EQ(l->info.id, 1);
}

TEST_F(StoreTest, DeltaBasesResolveAcrossTiers) {
  auto s = Open(Keep(100), true);
  std::vector<VersionInfo> chain = WriteChain(*s, 1, 2);  // 1, 2, 3
  for (const VersionInfo& v : chain) ASSERT_TRUE(s->Replicate(v).ok());
  // The local base is damaged, the durable one is fine; the delta is local.
  FlipByte(LocalData(1), 30);
  fs::remove(DurableData(3));
  fs::remove(durable_ / CheckpointStore::ManifestFileName(3));
  auto l = s->LoadNewestValid();
  ASSERT_TRUE(l.ok()) << l.status().ToString();
  EXPECT_EQ(l->info.id, 3);
  EXPECT_EQ(l->info.tiers, std::vector<Tier>{Tier::kLocal});
  ExpectSame(l->container, State(3));
}

// ---------------------------------------------------------------------------
// Retention.

}  // namespace
}  // namespace spot::ckpt
