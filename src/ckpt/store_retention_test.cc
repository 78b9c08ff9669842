#include "ckpt/store.h"

#include <gtest/gtest.h>

#include "ckpt/store_testing.h"

namespace spot::ckpt {
namespace {

using namespace store_testing;  // NOLINT: the fixture and its helpers

TEST_F(StoreTest, RetentionKeepsTheLastN) {
  auto s = Open(Keep(2));
  SaveFull(*s, {1, 2, 3, 4, 5});
  EXPECT_EQ(IdsIn(local_), (std::vector<int64_t>{4, 5}));
  auto l = s->LoadNewestValid();
  ASSERT_TRUE(l.ok());
  EXPECT_EQ(l->info.id, 5);
}

TEST_F(StoreTest, RetentionKeepsEveryMth) {
  RetentionPolicy p = Keep(1);
  p.keep_every = 3;
  auto s = Open(p);
  SaveFull(*s, {1, 2, 3, 4, 5, 6, 7, 8});
  EXPECT_EQ(IdsIn(local_), (std::vector<int64_t>{3, 6, 8}));
}

TEST_F(StoreTest, RetentionKeepsTheBestByAMetric) {
  // meta {"acc": seed % 7}: seed 6 (acc 6) is the best, seeds 7 and 14 (acc 0) the worst.
  for (bool higher : {true, false}) {
    SCOPED_TRACE(higher ? "higher is better" : "lower is better");
    fs::remove_all(local_);
    RetentionPolicy p = Keep(1);
    p.best_metric = "acc";
    p.best_higher = higher;
    p.keep_best = 1;
    auto s = Open(p);
    SaveFull(*s, {6, 7, 8, 9, 10}, "acc");  // ids 1..5, acc 6, 0, 1, 2, 3
    std::vector<int64_t> ids = IdsIn(local_);
    EXPECT_EQ(ids, higher ? (std::vector<int64_t>{1, 5}) : (std::vector<int64_t>{2, 5}));
  }
  // keep_best 2, with versions lacking the metric ignored.
  fs::remove_all(local_);
  RetentionPolicy p = Keep(1);
  p.best_metric = "acc";
  p.keep_best = 2;
  auto s = Open(p);
  SaveFull(*s, {6, 7}, "acc");                             // acc 6, 0
  SaveFull(*s, {12, 13, 1});                               // meta {"seed": ...}: no acc
  SaveFull(*s, {8}, "acc");                                // acc 1
  EXPECT_EQ(IdsIn(local_), (std::vector<int64_t>{1, 6}));  // best two: 6 (id 1), 1 (id 6)
}

TEST_F(StoreTest, RetentionDryRunDeletesNothing) {
  auto s = Open(Keep(100));
  SaveFull(*s, {1, 2, 3, 4});
  auto strict = Open(Keep(1));
  auto dropped = strict->ApplyRetention(Tier::kLocal, /*dry_run=*/true);
  ASSERT_TRUE(dropped.ok()) << dropped.status().ToString();
  EXPECT_EQ(*dropped, (std::vector<int64_t>{1, 2, 3}));
  EXPECT_EQ(IdsIn(local_), (std::vector<int64_t>{1, 2, 3, 4}));
  dropped = strict->ApplyRetention(Tier::kLocal);
  ASSERT_TRUE(dropped.ok());
  EXPECT_EQ(*dropped, (std::vector<int64_t>{1, 2, 3}));
  EXPECT_EQ(IdsIn(local_), (std::vector<int64_t>{4}));
}

TEST_F(StoreTest, RetentionNeverDeletesTheBaseChainOfAKeptDelta) {
  auto s = Open(Keep(1));
  WriteChain(*s, 1, 1);                               // 1 full, 2 delta
  std::vector<VersionInfo> b = WriteChain(*s, 3, 3);  // 3 full, 4, 5, 6 deltas
  auto dropped = s->ApplyRetention(Tier::kLocal);
  ASSERT_TRUE(dropped.ok()) << dropped.status().ToString();
  EXPECT_EQ(*dropped, (std::vector<int64_t>{1, 2}));
  EXPECT_EQ(IdsIn(local_), (std::vector<int64_t>{3, 4, 5, 6}));
  auto l = s->LoadNewestValid();
  ASSERT_TRUE(l.ok()) << l.status().ToString();
  EXPECT_EQ(l->info.id, 6);
  ExpectSame(l->container, State(6));

  // The best-by-metric version's chain is kept as well.
  RetentionPolicy p = Keep(1);
  p.best_metric = "acc";
  p.keep_best = 1;
  fs::remove_all(local_);
  auto m = Open(p);
  ChunkCodec codec;
  Container reference;
  int64_t base = -1;
  int depth = 0;
  const double acc[] = {0.1, 0.2, 0.9, 0.3, 0.4};  // id 3 (a delta on 2, on 1) is the best
  for (int i = 0; i < 5; ++i) {
    Container c = State(static_cast<uint64_t>(i + 1));
    SaveRequest req;
    req.step = 10 * (i + 1);
    req.meta_json = "{\"acc\":" + std::to_string(acc[i]) + "}";
    bool full = i == 3;  // id 4 starts a new chain
    auto v = m->Write(m->ReserveId(), c, &reference, full ? -1 : base,
                      full || base < 0 ? 0 : depth + 1, req, codec);
    ASSERT_TRUE(v.ok());
    base = v->id;
    depth = v->chain_depth;
  }
  dropped = m->ApplyRetention(Tier::kLocal);
  ASSERT_TRUE(dropped.ok());
  EXPECT_EQ(*dropped, std::vector<int64_t>{});
  EXPECT_EQ(IdsIn(local_), (std::vector<int64_t>{1, 2, 3, 4, 5}));
  // Replace the newest by a full version: 4 and 5 are no longer needed.
  Container c = State(9);
  SaveRequest req;
  req.step = 90;
  req.meta_json = "{\"acc\":0.5}";
  ASSERT_TRUE(m->Write(m->ReserveId(), c, &reference, -1, 0, req, codec).ok());
  dropped = m->ApplyRetention(Tier::kLocal);
  ASSERT_TRUE(dropped.ok());
  EXPECT_EQ(*dropped, (std::vector<int64_t>{4, 5}));
  EXPECT_EQ(IdsIn(local_), (std::vector<int64_t>{1, 2, 3, 6}));
  auto best = m->Load(3);
  ASSERT_TRUE(best.ok()) << best.status().ToString();
  ExpectSame(best->container, State(3));
}

TEST_F(StoreTest, LocalRetentionKeepsUnreplicatedVersions) {
  auto s = Open(Keep(1), true);
  std::vector<VersionInfo> v = WriteChain(*s, 1, 0);
  std::vector<VersionInfo> w = WriteChain(*s, 2, 0);
  std::vector<VersionInfo> x = WriteChain(*s, 3, 0);  // ids 1, 2, 3: full, none replicated
  auto dropped = s->ApplyRetention(Tier::kLocal);
  ASSERT_TRUE(dropped.ok());
  EXPECT_TRUE(dropped->empty());
  EXPECT_EQ(IdsIn(local_), (std::vector<int64_t>{1, 2, 3}));
  ASSERT_TRUE(s->Replicate(v[0]).ok());
  ASSERT_TRUE(s->Replicate(w[0]).ok());
  dropped = s->ApplyRetention(Tier::kLocal);
  ASSERT_TRUE(dropped.ok());
  EXPECT_EQ(*dropped, (std::vector<int64_t>{1, 2}));
  EXPECT_EQ(IdsIn(local_), (std::vector<int64_t>{3}));  // kept: newest, and unreplicated
  // The durable tier applies its own policy.
  dropped = s->ApplyRetention(Tier::kDurable);
  ASSERT_TRUE(dropped.ok());
  EXPECT_EQ(*dropped, std::vector<int64_t>{1});
  EXPECT_EQ(IdsIn(durable_), std::vector<int64_t>{2});
}

TEST_F(StoreTest, ReplicatingADeltaFirstCopiesABaseWhoseCopyFailed) {
  // Version 2's copy fails; version 3, a delta on it, is copied fine. The
  // durable tier must not end up with a delta whose base it lacks: losing
  // the local disk would then lose every version.
  auto s = Open(Keep(1), true);
  std::vector<VersionInfo> chain = WriteChain(*s, 1, 2);  // 1 full, 2 and 3 deltas
  ASSERT_EQ(chain.size(), 3u);
  ASSERT_TRUE(s->Replicate(chain[0]).ok());
  VersionInfo wrong = chain[1];
  wrong.checksum ^= 1;  // as if the file changed under the copy
  EXPECT_EQ(s->Replicate(wrong).code(), StatusCode::kDataLoss);
  EXPECT_FALSE(fs::exists(DurableData(2)));
  ASSERT_TRUE(s->Replicate(chain[2]).ok());
  EXPECT_EQ(IdsIn(durable_), (std::vector<int64_t>{1, 2, 3}));
  ASSERT_TRUE(s->ApplyRetention(Tier::kDurable).ok());
  ASSERT_TRUE(s->ApplyRetention(Tier::kLocal).ok());
  EXPECT_EQ(IdsIn(durable_), (std::vector<int64_t>{1, 2, 3}));
  s.reset();
  fs::remove_all(local_);
  auto again = Open(Keep(1), true);
  auto l = again->LoadNewestValid();
  ASSERT_TRUE(l.ok()) << l.status().ToString();
  EXPECT_EQ(l->info.id, 3);
  ExpectSame(l->container, State(3));
}

TEST_F(StoreTest, RetentionLeavesASaveInProgressAndDropsOldOrphans) {
  auto s = Open(Keep(1));
  SaveFull(*s, {1, 2, 3});
  // An orphan data file older than the newest version (an interrupted save
  // long ago), and one newer (a save in progress).
  WriteAll(LocalData(2), "orphan");
  WriteAll(LocalData(9), "in progress");
  auto dropped = s->ApplyRetention(Tier::kLocal);
  ASSERT_TRUE(dropped.ok());
  EXPECT_EQ(*dropped, std::vector<int64_t>{2});
  EXPECT_EQ(IdsIn(local_), (std::vector<int64_t>{3, 9}));
}

}  // namespace
}  // namespace spot::ckpt
