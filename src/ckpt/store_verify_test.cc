#include <gtest/gtest.h>

#include <cstring>

#include "ckpt/store.h"
#include "ckpt/store_testing.h"

namespace spot::ckpt {
namespace {

using namespace store_testing;  // NOLINT: the fixture and its helpers

TEST_F(StoreTest, LoadNewestValidSkipsDamagedVersionsAndSaysWhy) {
  auto s = Open();
  SaveFull(*s, {1, 2, 3, 4, 5, 6});
  Truncate(LocalData(6), ReadAll(LocalData(6)).size() - 10);         // truncated
  FlipByte(LocalData(5), 40);                                        // a flipped byte
  fs::remove(LocalManifest(4));                                      // never committed
  WriteAll(LocalManifest(3), "{\"format\": \"spot-checkpoint\", ");  // malformed manifest
  auto l = s->LoadNewestValid();
  ASSERT_TRUE(l.ok()) << l.status().ToString();
  EXPECT_EQ(l->info.id, 2);
  ExpectSame(l->container, State(2));
  ASSERT_EQ(l->skipped.size(), 4u) << Join(l->skipped);
  EXPECT_NE(l->skipped[0].find("ckpt-000006.bin"), std::string::npos) << l->skipped[0];
  EXPECT_NE(l->skipped[0].find("truncated"), std::string::npos) << l->skipped[0];
  EXPECT_NE(l->skipped[1].find("ckpt-000005.bin"), std::string::npos) << l->skipped[1];
  EXPECT_NE(l->skipped[1].find("checksum"), std::string::npos) << l->skipped[1];
  EXPECT_NE(l->skipped[2].find("no manifest"), std::string::npos) << l->skipped[2];
  EXPECT_NE(l->skipped[3].find("malformed manifest"), std::string::npos) << l->skipped[3];
  // Inspect shows them all, each copy with its state; List only the usable
  // ones its quick check finds (the flipped byte of 5 is in a chunk it does
  // not read).
  std::vector<int64_t> listed;
  for (const VersionInfo& v : s->List()) listed.push_back(v.id);
  EXPECT_EQ(listed, (std::vector<int64_t>{5, 2, 1}));
  std::vector<std::pair<int64_t, CopyState>> seen;
  for (const VersionCheck& v : s->Inspect(CheckDepth::kFull)) seen.emplace_back(v.id, v.state());
  EXPECT_EQ(seen, (std::vector<std::pair<int64_t, CopyState>>{{6, CopyState::kDamaged},
                                                              {5, CopyState::kDamaged},
                                                              {4, CopyState::kUncommitted},
                                                              {3, CopyState::kDamaged},
                                                              {2, CopyState::kOk},
                                                              {1, CopyState::kOk}}));
  EXPECT_EQ(s->Verify(5, Tier::kLocal).code(), StatusCode::kDataLoss);
  EXPECT_EQ(s->Verify(6, Tier::kLocal).code(), StatusCode::kDataLoss);
  EXPECT_TRUE(s->Verify(2, Tier::kLocal).ok());
}

TEST_F(StoreTest, ManifestThatDisagreesWithItsFileIsSkipped) {
  auto s = Open();
  SaveFull(*s, {1, 2});
  // Version 2's manifest over version 1's (valid) data file: ids differ.
  fs::copy_file(LocalData(1), LocalData(2), fs::copy_options::overwrite_existing);
  auto l = s->LoadNewestValid();
  ASSERT_TRUE(l.ok());
  EXPECT_EQ(l->info.id, 1);
  ASSERT_EQ(l->skipped.size(), 1u);
}

TEST_F(StoreTest, NoValidVersionIsNotFoundWithReasons) {
  auto s = Open();
  SaveFull(*s, {1, 2});
  FlipByte(LocalData(1), 20);
  FlipByte(LocalData(2), 20);
  auto l = s->LoadNewestValid();
  EXPECT_EQ(l.status().code(), StatusCode::kNotFound);
  EXPECT_NE(l.status().message().find("ckpt-000001.bin"), std::string::npos);
  EXPECT_NE(l.status().message().find("ckpt-000002.bin"), std::string::npos);
}

TEST_F(StoreTest, EveryDamagedVersionIsReportedAndSkippedAlike) {
  for (const DamageCase& c : DamageCases()) {
    SCOPED_TRACE(c.name);
    fs::remove_all(local_);
    auto s = Open();
    SaveFull(*s, {1, 2, 3});
    c.damage(local_);
    const std::set<int64_t> damaged(c.damaged.begin(), c.damaged.end());

    // Verify: every damaged version, and only those, is DataLoss, saying why.
    for (int64_t id : {1, 2, 3}) {
      Status st = s->Verify(id, Tier::kLocal);
      if (damaged.count(id)) {
        EXPECT_EQ(st.code(), StatusCode::kDataLoss) << id;
        EXPECT_NE(st.message().find(c.reason), std::string::npos) << st.message();
        EXPECT_EQ(s->Load(id).status().code(), StatusCode::kDataLoss) << id;
      } else {
        EXPECT_TRUE(st.ok()) << id << ": " << st.ToString();
      }
    }
    // Inspect lists every version, the damaged ones marked with the reason.
    for (CheckDepth depth : {CheckDepth::kFull, CheckDepth::kQuick}) {
      std::vector<VersionCheck> all = s->Inspect(depth);
      ASSERT_EQ(all.size(), 3u);
      for (const VersionCheck& v : all) {
        bool bad = damaged.count(v.id) && (depth == CheckDepth::kFull || c.quick_sees_it);
        EXPECT_EQ(v.state(), bad ? CopyState::kDamaged : CopyState::kOk) << v.id;
        ASSERT_EQ(v.copies.size(), 1u);
        if (bad) {
          EXPECT_NE(v.copies[0].problem.find(c.reason), std::string::npos) << v.copies[0].problem;
          EXPECT_TRUE(v.info.tiers.empty());
        }
      }
    }
    // The restore skips exactly those, newest first, and says why.
    auto l = s->LoadNewestValid();
    ASSERT_TRUE(l.ok()) << l.status().ToString();
    int64_t want = 3;
    while (damaged.count(want)) --want;
    EXPECT_EQ(l->info.id, want);
    EXPECT_EQ(l->info.step, 10 * want);
    ExpectSame(l->container, State(static_cast<uint64_t>(want)));
    ASSERT_EQ(l->skipped.size(), damaged.size()) << Join(l->skipped);
    for (const std::string& why : l->skipped)
      EXPECT_NE(why.find(c.reason), std::string::npos) << why;
  }
}

TEST_F(StoreTest, QuickCheckReadsTheStepOfADeltaWithoutDecodingTheChain) {
  auto s = Open();
  std::vector<VersionInfo> chain = WriteChain(*s, 1, 3);  // 1 full, 2..4 deltas
  ASSERT_EQ(chain.size(), 4u);
  for (const VersionCheck& v : s->Inspect(CheckDepth::kQuick)) {
    EXPECT_TRUE(v.intact()) << v.id << ": " << Join(v.Problems());
  }
  // The step record of a delta is itself a delta (the same length): the
  // quick check decodes it alone along the chain.
  EditManifest(LocalManifest(4), [](auto& j) { j["step"] = 31; });
  VersionCheck v = s->Inspect(4, CheckDepth::kQuick);
  EXPECT_EQ(v.state(), CopyState::kDamaged);
  ASSERT_TRUE(v.has_info);
  EXPECT_EQ(v.info.step, 31);
  EXPECT_TRUE(Contains(v.Problems(), "local copy: ")) << Join(v.Problems());
  EXPECT_TRUE(Contains(v.Problems(), "holds step 40")) << Join(v.Problems());
  EXPECT_EQ(s->Verify(4, Tier::kLocal).code(), StatusCode::kDataLoss);
  auto l = s->LoadNewestValid();
  ASSERT_TRUE(l.ok());
  EXPECT_EQ(l->info.id, 3);
  EXPECT_TRUE(Contains(l->skipped, "holds step 40")) << Join(l->skipped);
  // A broken base shows in its deltas' quick check too.
  Truncate(LocalData(2), 100);
  for (int64_t id : {2, 3, 4}) {
    EXPECT_EQ(s->Inspect(id, CheckDepth::kQuick).state(), CopyState::kDamaged) << id;
  }
  EXPECT_TRUE(Contains(s->Inspect(3, CheckDepth::kQuick).Problems(), "base version 2 is unusable"));
  EXPECT_TRUE(s->Inspect(1, CheckDepth::kQuick).intact());
}

TEST_F(StoreTest, UncommittedVersionIsShownNotDamaged) {
  auto s = Open();
  SaveFull(*s, {1});
  WriteAll(LocalData(2), "a save in progress");
  VersionCheck v = s->Inspect(2, CheckDepth::kFull);
  EXPECT_EQ(v.state(), CopyState::kUncommitted);
  EXPECT_FALSE(v.has_info);
  EXPECT_TRUE(Contains(v.Problems(), "no manifest")) << Join(v.Problems());
  EXPECT_EQ(s->Inspect(CheckDepth::kQuick).size(), 2u);
  EXPECT_EQ(s->List().size(), 1u);
  auto l = s->LoadNewestValid();
  ASSERT_TRUE(l.ok());
  EXPECT_EQ(l->info.id, 1);
  EXPECT_TRUE(Contains(l->skipped, "no manifest")) << Join(l->skipped);
  // A version no tier has.
  VersionCheck none = s->Inspect(7, CheckDepth::kFull);
  EXPECT_EQ(none.state(), CopyState::kMissing);
  EXPECT_EQ(s->Load(7).status().code(), StatusCode::kNotFound);
  EXPECT_EQ(s->Verify(7, Tier::kLocal).code(), StatusCode::kNotFound);
}

TEST_F(StoreTest, AVersionIsIntactWhenOneTierHoldsAnIntactCopy) {
  auto s = Open(Keep(100), true);
  SaveFull(*s, {1, 2});
  EditManifest(LocalManifest(2), [](auto& j) { j["step"] = 7; });
  VersionCheck v = s->Inspect(2, CheckDepth::kFull);
  EXPECT_EQ(v.state(), CopyState::kOk);
  ASSERT_EQ(v.copies.size(), 2u);
  EXPECT_EQ(v.copies[0].state, CopyState::kDamaged);
  EXPECT_EQ(v.copies[1].state, CopyState::kOk);
  EXPECT_EQ(v.info.tiers, std::vector<Tier>{Tier::kDurable});
  EXPECT_EQ(v.info.step, 20);  // from the copy that passed
  auto l = s->LoadNewestValid();
  ASSERT_TRUE(l.ok());
  EXPECT_EQ(l->info.id, 2);
  EXPECT_EQ(l->info.tiers, std::vector<Tier>{Tier::kDurable});
  ASSERT_EQ(l->skipped.size(), 1u);
  EXPECT_NE(l->skipped[0].find("the manifest says step 7"), std::string::npos) << l->skipped[0];
  std::vector<VersionInfo> list = s->List();
  ASSERT_EQ(list.size(), 2u);
  EXPECT_EQ(list[0].tiers, std::vector<Tier>{Tier::kDurable});
  EXPECT_EQ(list[1].tiers, (std::vector<Tier>{Tier::kLocal, Tier::kDurable}));
}

TEST_F(StoreTest, ReadOnlyStoreReadsTheDurableTierAloneAndChangesNothing) {
  {
    auto s = Open(Keep(100), true);
    SaveFull(*s, {1, 2});
  }
  fs::remove_all(local_);  // the machine is gone; the durable tier is complete
  WriteAll(durable_ / ".tmp.ckpt-000003.bin.1", "another writer's file in progress");
  auto ro = CheckpointStore::Open(
      {.dir = local_.string(), .durable_dir = durable_.string(), .read_only = true});
  ASSERT_TRUE(ro.ok()) << ro.status().ToString();
  CheckpointStore& s = **ro;
  std::vector<VersionCheck> all = s.Inspect(CheckDepth::kFull);
  ASSERT_EQ(all.size(), 2u);
  for (const VersionCheck& v : all) {
    EXPECT_TRUE(v.intact()) << Join(v.Problems());
    EXPECT_EQ(v.copies[0].state, CopyState::kMissing);
    EXPECT_EQ(v.copies[1].state, CopyState::kOk);
  }
  auto l = s.LoadNewestValid();
  ASSERT_TRUE(l.ok()) << l.status().ToString();
  EXPECT_EQ(l->info.id, 2);
  EXPECT_FALSE(fs::exists(local_));                              // not created
  EXPECT_TRUE(fs::exists(durable_ / ".tmp.ckpt-000003.bin.1"));  // not cleaned
  Container c = State(3);
  EXPECT_EQ(s.Save(c, {.step = 30}).status().code(), StatusCode::kFailedPrecondition);
  EXPECT_EQ(s.Replicate(l->info).code(), StatusCode::kFailedPrecondition);
  EXPECT_EQ(s.ApplyRetention(Tier::kDurable).status().code(), StatusCode::kFailedPrecondition);
  auto dry = s.ApplyRetention(Tier::kDurable, /*dry_run=*/true);
  ASSERT_TRUE(dry.ok()) << dry.status().ToString();
  EXPECT_FALSE(fs::exists(local_));
  EXPECT_EQ(IdsIn(durable_), (std::vector<int64_t>{1, 2}));
}

// ---------------------------------------------------------------------------
// Delta chains.

// Makes version `id` in `dir` what a writer before index checksums made: a
// format 2 data file (its records all raw, which both formats store alike)
// and a manifest of format 2 without `index_checksum`, whose whole-file
// checksum is that file's.
void MakeOld(const fs::path& dir, int64_t id) {
  const fs::path data = dir / CheckpointStore::DataFileName(id);
  std::string bytes = ReadAll(data);
  const uint32_t two = 2;
  std::memcpy(bytes.data() + 8, &two, 4);
  // Format 2's index checksum covers the index alone.
  const size_t footer = bytes.size() - kFooterBytes;
  uint64_t index_offset, index_bytes;
  std::memcpy(&index_offset, bytes.data() + footer, 8);
  std::memcpy(&index_bytes, bytes.data() + footer + 8, 8);
  const uint64_t sum = Checksum(std::string_view(bytes).substr(index_offset, index_bytes));
  std::memcpy(bytes.data() + footer + 16, &sum, 8);
  WriteAll(data, bytes);
  EditManifest(dir / CheckpointStore::ManifestFileName(id), [&](nlohmann::json& j) {
    ASSERT_TRUE(j.contains("index_checksum"));
    j.erase("index_checksum");
    j["format_version"] = 2;
    j["checksum"] = fmt::format("xxh3-64:{:016x}", Checksum(bytes));
  });
}

TEST_F(StoreTest, VersionsWrittenBeforeIndexChecksumsLoadThroughTheWholeFileChecksum) {
  auto s = Open();
  for (uint64_t seed : {1, 2}) {
    Container c = State(seed);
    SaveRequest req{.step = static_cast<int64_t>(10 * seed)};
    req.plan.full = Codec::kRaw;
    ASSERT_TRUE(s->Save(c, req).ok());
  }
  const std::string manifest2 = ReadAll(LocalManifest(2));
  EXPECT_NE(manifest2.find("\"index_checksum\": \"xxh3-64:"), std::string::npos) << manifest2;
  MakeOld(local_, 1);
  MakeOld(local_, 2);
  for (int64_t id : {1, 2}) EXPECT_TRUE(s->Verify(id, Tier::kLocal).ok()) << id;
  EXPECT_EQ(s->List().size(), 2u);
  auto l = s->LoadNewestValid();
  ASSERT_TRUE(l.ok()) << l.status().ToString();
  EXPECT_EQ(l->info.id, 2);
  EXPECT_FALSE(l->info.index_checksum.has_value());
  ExpectSame(l->container, State(2));

  // The whole-file checksum is checked: a manifest that disagrees with its
  // (intact) file is damaged, for the restore and for Verify alike.
  const std::string old2 = ReadAll(LocalManifest(2));
  EditManifest(LocalManifest(2), [](auto& j) { j["checksum"] = "xxh3-64:00000000000000ff"; });
  Status st = s->Verify(2, Tier::kLocal);
  EXPECT_EQ(st.code(), StatusCode::kDataLoss);
  EXPECT_NE(st.message().find("whole-file checksum"), std::string::npos) << st.ToString();
  l = s->LoadNewestValid();
  ASSERT_TRUE(l.ok()) << l.status().ToString();
  EXPECT_EQ(l->info.id, 1);
  ASSERT_EQ(l->skipped.size(), 1u);
  EXPECT_NE(l->skipped[0].find("whole-file checksum"), std::string::npos) << l->skipped[0];
  WriteAll(LocalManifest(2), old2);
  // And every byte of its data is checked.
  FlipByte(LocalData(2), ReadAll(LocalData(2)).size() / 2);
  EXPECT_EQ(s->Verify(2, Tier::kLocal).code(), StatusCode::kDataLoss);
  EXPECT_EQ(s->LoadNewestValid()->info.id, 1);
}

TEST_F(StoreTest, AnOldBaseUnderNewDeltasIsCheckedByItsWholeFileChecksum) {
  auto s = Open();
  std::vector<VersionInfo> chain = WriteChain(*s, 1, 2);
  ASSERT_EQ(chain.size(), 3u);
  // Version 1's manifest as an older writer made it (its data is format 3:
  // the manifest's format does not bind the data file's).
  EditManifest(LocalManifest(1), [](nlohmann::json& j) { j.erase("index_checksum"); });
  auto l = s->LoadNewestValid();
  ASSERT_TRUE(l.ok()) << l.status().ToString();
  EXPECT_EQ(l->info.id, 3);
  ExpectSame(l->container, State(3));
  EditManifest(LocalManifest(1), [](auto& j) { j["checksum"] = "xxh3-64:00000000000000ff"; });
  for (int64_t id : {1, 2, 3}) {
    EXPECT_EQ(s->Verify(id, Tier::kLocal).code(), StatusCode::kDataLoss) << id;
  }
  l = s->LoadNewestValid();
  EXPECT_EQ(l.status().code(), StatusCode::kNotFound);
  EXPECT_NE(l.status().message().find("whole-file checksum"), std::string::npos)
      << l.status().ToString();
}

TEST_F(StoreTest, TheManifestBindsTheIndexOfItsOwnSave) {
  // Two saves of the same id and step in two stores: each file intact, but
  // under the other's manifest it is another save's data.
  auto a = Open();
  SaveFull(*a, {1});
  const std::string data_a = ReadAll(LocalData(1));
  fs::remove_all(local_);
  auto b = Open();
  Container c = State(1);
  // The same step and id, other bytes (the trainer/state record differs).
  c.AddBytes("extra", "another save");
  ASSERT_TRUE(b->Save(c, SaveRequest{.step = 10}).ok());
  WriteAll(LocalData(1), data_a);
  // Same id, base and step: only the index checksum tells them apart (the
  // file's size differs too; make it the manifest's to leave only that).
  EditManifest(LocalManifest(1), [&](auto& j) { j["file_bytes"] = data_a.size(); });
  Status st = b->Verify(1, Tier::kLocal);
  EXPECT_EQ(st.code(), StatusCode::kDataLoss);
  EXPECT_NE(st.message().find("index checksum"), std::string::npos) << st.ToString();
  EXPECT_EQ(b->LoadNewestValid().status().code(), StatusCode::kNotFound);
  EXPECT_TRUE(b->List().empty());
}

}  // namespace
}  // namespace spot::ckpt
