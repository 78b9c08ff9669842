// Durable copies written in full (StoreOptions::durable_max_chain): a
// restart from the durable tier alone decodes a shallow chain, and every
// reader still agrees on both tiers.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <nlohmann/json.hpp>

#include "ckpt/async_saver.h"
#include "ckpt/store.h"
#include "ckpt/store_testing.h"

namespace spot::ckpt {
namespace {

using namespace store_testing;  // NOLINT: the store tests' shared helpers
using nlohmann::json;

class DurableChainTest : public StoreTest {
 protected:
  std::unique_ptr<CheckpointStore> OpenChain(int max_chain, int keep_last = 100) {
    StoreOptions o;
    o.dir = local_.string();
    o.durable_dir = durable_.string();
    o.retention = Keep(keep_last);
    o.durable_max_chain = max_chain;
    auto s = CheckpointStore::Open(o);
    EXPECT_TRUE(s.ok()) << s.status().ToString();
    return s.ok() ? std::move(s).value() : nullptr;
  }

  // Saves State(seed) for each seed through an AsyncSaver (a full version,
  // then deltas), step 10 * seed; returns the reports in id order.
  static std::vector<SaveReport> SaveThroughSaver(CheckpointStore& s, std::vector<uint64_t> seeds) {
    AsyncSaverOptions o;
    o.min_delta_saving = 0;  // State(seed)s differ in every byte: deltas save nothing
    o.full_every = 100;
    AsyncSaver saver(&s, o);
    for (uint64_t seed : seeds) {
      auto c = saver.Acquire();
      EXPECT_TRUE(c.ok()) << c.status().ToString();
      if (!c.ok()) return {};
      **c = State(seed);
      SaveRequest req;
      req.step = static_cast<int64_t>(10 * seed);
      req.meta_json = fmt::format("{{\"seed\":{}}}", seed);
      saver.Submit(*c, req);
    }
    Status st = saver.Flush();
    EXPECT_TRUE(st.ok()) << st.ToString();
    std::vector<SaveReport> done = saver.TakeCompleted();
    std::sort(done.begin(), done.end(),
              [](const SaveReport& a, const SaveReport& b) { return a.info.id < b.info.id; });
    return done;
  }

  json DurableManifest(int64_t id) const {
    return json::parse(ReadAll(durable_ / CheckpointStore::ManifestFileName(id)));
  }
  json LocalManifestJson(int64_t id) const { return json::parse(ReadAll(LocalManifest(id))); }
};

// Each record's bytes and decoded checksum, against State(seed)'s.
void ExpectState(const Container& got, uint64_t seed, const std::string& what) {
  Container want = State(seed);
  ExpectSame(got, want, what);
  ASSERT_EQ(got.records().size(), want.records().size());
  for (size_t i = 0; i < want.records().size(); ++i) {
    EXPECT_EQ(got.records()[i].checksum, Checksum(want.records()[i].data))
        << what << ": " << want.records()[i].name;
  }
}

// durable_max_chain 0 and 1 over a full version and three deltas: the depth
// each version's durable copy has, and which were written in full.
struct ChainCase {
  int max_chain;
  std::vector<int> durable_depth;  // versions 1..4
  std::vector<bool> full;          // materialized
};

void PrintTo(const ChainCase& c, std::ostream* os) { *os << "durable_max_chain " << c.max_chain; }

class DurableChainCaseTest : public DurableChainTest,
                             public ::testing::WithParamInterface<ChainCase> {};

INSTANTIATE_TEST_SUITE_P(MaxChain, DurableChainCaseTest,
                         ::testing::Values(ChainCase{0, {0, 0, 0, 0}, {false, true, true, true}},
                                           ChainCase{1, {0, 1, 0, 1}, {false, false, true, false}}),
                         [](const auto& info) {
                           return "max" + std::to_string(info.param.max_chain);
                         });

TEST_P(DurableChainCaseTest, DeeperVersionsAreFullInTheDurableTierAndDeltasLocally) {
  const ChainCase& p = GetParam();
  auto s = OpenChain(p.max_chain);
  std::vector<SaveReport> done = SaveThroughSaver(*s, {1, 2, 3, 4});
  ASSERT_EQ(done.size(), 4u);
  for (int i = 0; i < 4; ++i) {
    const int64_t id = i + 1;
    const std::string what = "version " + std::to_string(id);
    const SaveReport& r = done[static_cast<size_t>(i)];
    EXPECT_EQ(r.info.id, id);
    EXPECT_EQ(r.info.tiers, (std::vector<Tier>{Tier::kLocal, Tier::kDurable})) << what;
    EXPECT_EQ(r.durable_full, p.full[static_cast<size_t>(i)]) << what;
    EXPECT_EQ(r.durable_chain_depth, p.durable_depth[static_cast<size_t>(i)]) << what;
    // Locally: a full version and three deltas, each on the one before.
    json local = LocalManifestJson(id);
    EXPECT_EQ(local["base"], id - 1 == 0 ? -1 : id - 1) << what;
    EXPECT_EQ(local["chain_depth"], i) << what;
    json durable = DurableManifest(id);
    EXPECT_EQ(durable["chain_depth"], p.durable_depth[static_cast<size_t>(i)]) << what;
    EXPECT_EQ(durable["base"], p.durable_depth[static_cast<size_t>(i)] == 0 ? -1 : id - 1) << what;
    for (const char* shared :
         {"id", "step", "parent", "created_unix_ms", "meta", "payload_bytes"}) {
      EXPECT_EQ(durable[shared], local[shared]) << what << ": " << shared;
    }
    if (p.full[static_cast<size_t>(i)]) {
      EXPECT_EQ(durable["materialized_from"], (json{{"base", id - 1}, {"chain_depth", i}})) << what;
      EXPECT_NE(durable["checksum"], local["checksum"]) << what;
      EXPECT_EQ(durable["file_bytes"], fs::file_size(DurableData(id))) << what;
    } else {
      // Copied as it is; the manifest differs at most in the chain depth.
      EXPECT_EQ(ReadAll(DurableData(id)), ReadAll(LocalData(id))) << what;
      EXPECT_FALSE(durable.contains("materialized_from")) << what;
      durable["chain_depth"] = local["chain_depth"];
      EXPECT_EQ(durable, local) << what;
    }
  }
}

TEST_P(DurableChainCaseTest, ARestartFromTheDurableTierAloneDecodesTheShallowChain) {
  const ChainCase& p = GetParam();
  {
    auto s = OpenChain(p.max_chain);
    ASSERT_EQ(SaveThroughSaver(*s, {1, 2, 3, 4}).size(), 4u);
  }
  fs::remove_all(local_);  // preempted with no survivor: the local disk is gone
  auto s = OpenChain(p.max_chain);
  auto l = s->LoadNewestValid();
  ASSERT_TRUE(l.ok()) << l.status().ToString();
  EXPECT_TRUE(l->skipped.empty()) << Join(l->skipped);
  EXPECT_EQ(l->info.id, 4);
  EXPECT_EQ(l->info.step, 40);
  EXPECT_EQ(l->info.tiers, std::vector<Tier>{Tier::kDurable});
  EXPECT_EQ(l->info.chain_depth, p.durable_depth[3]);
  EXPECT_EQ(l->info.base, p.durable_depth[3] == 0 ? -1 : 3);
  ExpectState(l->container, 4, "restored version 4");
  // What the restore needs is in the durable tier's chain of version 4
  // alone: the versions below it are not read.
  const int64_t oldest_needed = 4 - p.durable_depth[3];
  for (int64_t id = 1; id < oldest_needed; ++id) {
    fs::remove(durable_ / CheckpointStore::DataFileName(id));
    fs::remove(durable_ / CheckpointStore::ManifestFileName(id));
  }
  l = s->LoadNewestValid();
  ASSERT_TRUE(l.ok()) << l.status().ToString();
  EXPECT_EQ(l->info.id, 4);
  ExpectState(l->container, 4, "version 4 without older durable versions");
}

TEST_P(DurableChainCaseTest, ListInspectAndVerifyAgreeOnBothTiers) {
  const ChainCase& p = GetParam();
  auto s = OpenChain(p.max_chain);
  ASSERT_EQ(SaveThroughSaver(*s, {1, 2, 3, 4}).size(), 4u);
  for (CheckDepth depth : {CheckDepth::kQuick, CheckDepth::kFull}) {
    std::vector<VersionCheck> all = s->Inspect(depth);
    ASSERT_EQ(all.size(), 4u);
    for (const VersionCheck& v : all) {
      EXPECT_TRUE(v.intact()) << "version " << v.id << ": " << Join(v.Problems());
      EXPECT_TRUE(v.Problems().empty()) << "version " << v.id << ": " << Join(v.Problems());
      ASSERT_EQ(v.copies.size(), 2u);
      for (const CopyCheck& c : v.copies) EXPECT_EQ(c.state, CopyState::kOk) << v.id;
      EXPECT_EQ(v.info.tiers, (std::vector<Tier>{Tier::kLocal, Tier::kDurable}));
      EXPECT_EQ(v.info.chain_depth, v.id - 1);  // the local copy's fields come first
    }
  }
  for (int64_t id = 1; id <= 4; ++id) {
    EXPECT_TRUE(s->Verify(id, Tier::kLocal).ok()) << s->Verify(id, Tier::kLocal).ToString();
    EXPECT_TRUE(s->Verify(id, Tier::kDurable).ok()) << s->Verify(id, Tier::kDurable).ToString();
  }
  std::vector<VersionInfo> list = s->List();
  ASSERT_EQ(list.size(), 4u);
  for (const VersionInfo& v : list) {
    EXPECT_EQ(v.tiers, (std::vector<Tier>{Tier::kLocal, Tier::kDurable})) << v.id;
  }

  // The local delta 4 whose local bases are gone: its base 3 resolves from
  // the durable tier, where it is a full version (materialized in both
  // cases), and decodes to the same bytes, so 4 still decodes.
  for (int64_t id = 1; id <= 3; ++id) {
    fs::remove(LocalData(id));
    fs::remove(LocalManifest(id));
  }
  EXPECT_EQ(DurableManifest(3)["base"], -1);
  EXPECT_TRUE(s->Verify(4, Tier::kLocal).ok()) << s->Verify(4, Tier::kLocal).ToString();
  VersionCheck four = s->Inspect(4, CheckDepth::kFull);
  EXPECT_TRUE(four.Problems().empty()) << Join(four.Problems());
  EXPECT_EQ(four.info.tiers, (std::vector<Tier>{Tier::kLocal, Tier::kDurable}));
  auto l = s->Load(4);
  ASSERT_TRUE(l.ok()) << l.status().ToString();
  EXPECT_EQ(l->info.tiers, std::vector<Tier>{Tier::kLocal});
  EXPECT_EQ(l->info.chain_depth, 3);
  ExpectState(l->container, 4, "local delta 4 on the durable full 3");
  // The durable versions 1..3 are listed from the durable tier alone.
  list = s->List();
  ASSERT_EQ(list.size(), 4u);
  for (const VersionInfo& v : list) {
    if (v.id < 4) {
      EXPECT_EQ(v.tiers, std::vector<Tier>{Tier::kDurable}) << v.id;
      EXPECT_EQ(v.chain_depth, p.durable_depth[static_cast<size_t>(v.id - 1)]) << v.id;
    }
  }
}

TEST_F(DurableChainTest, ADamagedDurableFullCopyIsSkippedAndTheLocalChainLoads) {
  auto s = OpenChain(0);
  ASSERT_EQ(SaveThroughSaver(*s, {1, 2, 3, 4}).size(), 4u);
  for (int64_t id : {3, 4}) {
    ASSERT_EQ(DurableManifest(id)["base"], -1);
    FlipByte(DurableData(id), 100);  // inside the first chunk
  }
  Status bad = s->Verify(4, Tier::kDurable);
  EXPECT_EQ(bad.code(), StatusCode::kDataLoss) << bad.ToString();
  EXPECT_NE(bad.message().find((durable_ / CheckpointStore::DataFileName(4)).string()),
            std::string::npos)
      << bad.message();
  VersionCheck four = s->Inspect(4, CheckDepth::kFull);
  EXPECT_TRUE(four.intact());
  ASSERT_EQ(four.copies.size(), 2u);
  EXPECT_EQ(four.copies[0].state, CopyState::kOk);
  EXPECT_EQ(four.copies[1].state, CopyState::kDamaged);
  // The local delta chain is read first, and loads.
  auto l = s->LoadNewestValid();
  ASSERT_TRUE(l.ok()) << l.status().ToString();
  EXPECT_EQ(l->info.id, 4);
  EXPECT_EQ(l->info.chain_depth, 3);
  ExpectState(l->container, 4, "local version 4");

  // Version 4 only in the durable tier, where it is damaged: skipped, saying
  // why; version 3 loads from its local chain (its durable copy is damaged
  // too, and is not needed).
  fs::remove(LocalData(4));
  fs::remove(LocalManifest(4));
  l = s->LoadNewestValid();
  ASSERT_TRUE(l.ok()) << l.status().ToString();
  EXPECT_EQ(l->info.id, 3);
  EXPECT_EQ(l->info.tiers, std::vector<Tier>{Tier::kLocal});
  EXPECT_EQ(l->info.chain_depth, 2);
  ExpectState(l->container, 3, "local version 3");
  ASSERT_EQ(l->skipped.size(), 1u) << Join(l->skipped);
  EXPECT_TRUE(Contains(l->skipped, (durable_ / CheckpointStore::DataFileName(4)).string()))
      << Join(l->skipped);
}

// Durable retention follows the durable manifests: keep_last N and the base
// chain of each kept copy, which ends at a materialized one. The local tier
// keeps its own chains.
TEST_F(DurableChainTest, DurableRetentionKeepsOnlyWhatItsChainsNeed) {
  struct Case {
    int max_chain;
    std::vector<int64_t> durable;
  };
  for (const Case& c : {Case{0, {5, 6}}, Case{1, {5, 6}}, Case{2, {4, 5, 6}},
                        Case{kNoDurableChainLimit, {1, 2, 3, 4, 5, 6}}}) {
    const std::string what = "durable_max_chain " + std::to_string(c.max_chain);
    fs::remove_all(local_);
    fs::remove_all(durable_);
    {
      auto s = OpenChain(c.max_chain, /*keep_last=*/2);
      ASSERT_EQ(SaveThroughSaver(*s, {1, 2, 3, 4, 5, 6}).size(), 6u) << what;
      EXPECT_EQ(IdsIn(durable_), c.durable) << what;
      // Version 6 is a delta on 5 on ... on 1 locally: all are kept there.
      EXPECT_EQ(IdsIn(local_), (std::vector<int64_t>{1, 2, 3, 4, 5, 6})) << what;
      // Nothing more to drop, and what is left restores.
      auto again = s->ApplyRetention(Tier::kDurable, /*dry_run=*/true);
      ASSERT_TRUE(again.ok());
      EXPECT_TRUE(again->empty()) << what;
    }
    fs::remove_all(local_);
    auto s = OpenChain(c.max_chain, 2);
    auto l = s->LoadNewestValid();
    ASSERT_TRUE(l.ok()) << what << ": " << l.status().ToString();
    EXPECT_EQ(l->info.id, 6) << what;
    ExpectState(l->container, 6, what);
  }
}

TEST_F(DurableChainTest, WithoutALimitDurableCopiesAreByteIdentical) {
  for (int max_chain : {kNoDurableChainLimit, 1000}) {
    fs::remove_all(local_);
    fs::remove_all(durable_);
    auto s = OpenChain(max_chain);
    std::vector<SaveReport> done = SaveThroughSaver(*s, {1, 2, 3, 4});
    ASSERT_EQ(done.size(), 4u);
    for (const SaveReport& r : done) {
      EXPECT_FALSE(r.durable_full);
      EXPECT_EQ(r.durable_chain_depth, r.info.chain_depth);
      EXPECT_EQ(ReadAll(DurableData(r.info.id)), ReadAll(LocalData(r.info.id))) << r.info.id;
      EXPECT_EQ(ReadAll(durable_ / CheckpointStore::ManifestFileName(r.info.id)),
                ReadAll(LocalManifest(r.info.id)))
          << r.info.id;
    }
    EXPECT_EQ(done[3].info.chain_depth, 3);
  }
  StoreOptions o{.dir = local_.string(), .durable_dir = durable_.string(), .durable_max_chain = -1};
  auto bad = CheckpointStore::Open(o);
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(bad.status().message().find("durable_max_chain must be >= 0 (got -1)"),
            std::string::npos);
}

// Replicate directly: a plain copy when asked (the deadline path), the
// depth after a materialized base, and a plain copy when writing in full
// fails.
TEST_F(DurableChainTest, APlainCopyWhenAskedOrWhenWritingInFullFails) {
  auto s = OpenChain(0);
  std::vector<VersionInfo> chain = WriteChain(*s, 1, 3);  // 1 full, 2..4 deltas
  ASSERT_EQ(chain.size(), 4u);
  std::atomic<bool> hurry{true};
  ReplicateOptions plain{.plain_copy = &hurry};
  auto r = s->Replicate(chain[0], plain);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  r = s->Replicate(chain[1], plain);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_FALSE(r->materialized);
  EXPECT_EQ(r->durable_chain_depth, 1);
  EXPECT_EQ(ReadAll(DurableData(2)), ReadAll(LocalData(2)));
  EXPECT_EQ(ReadAll(durable_ / CheckpointStore::ManifestFileName(2)), ReadAll(LocalManifest(2)));

  // Writing in full fails (a plan no writer accepts): copied as it is.
  ReplicateOptions broken;
  broken.plan.full = Codec::kSubDelta;
  r = s->Replicate(chain[2], broken);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_FALSE(r->materialized);
  EXPECT_EQ(r->durable_chain_depth, 2);
  EXPECT_EQ(ReadAll(DurableData(3)), ReadAll(LocalData(3)));
  EXPECT_TRUE(s->Verify(3, Tier::kDurable).ok());

  hurry = false;
  r = s->Replicate(chain[3], plain);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_TRUE(r->materialized);
  EXPECT_EQ(r->durable_chain_depth, 0);
  EXPECT_EQ(r->durable_bytes, fs::file_size(DurableData(4)));
  EXPECT_EQ(DurableManifest(4)["base"], -1);

  s.reset();
  fs::remove_all(local_);
  s = OpenChain(0);
  for (int64_t id = 1; id <= 4; ++id) {
    auto l = s->Load(id);
    ASSERT_TRUE(l.ok()) << l.status().ToString();
    ExpectState(l->container, static_cast<uint64_t>(id), "durable version " + std::to_string(id));
  }
}

// A local copy that no longer matches its manifest is neither written in
// full nor copied.
// A materialization decodes on the threads it is given (the saver's: one,
// beside training): the copy is the same file on one thread as on four.
TEST_F(DurableChainTest, AMaterializationWritesTheSameCopyOnOneThreadAsOnMany) {
  auto s = OpenChain(0);
  std::vector<VersionInfo> chain = WriteChain(*s, 1, 1);  // 1 full, 2 a delta
  ASSERT_EQ(chain.size(), 2u);
  ASSERT_TRUE(s->Replicate(chain[0], {}).ok());
  std::string copy[2];
  const int threads[2] = {1, 4};
  for (int k = 0; k < 2; ++k) {
    fs::remove(DurableData(2));
    fs::remove(durable_ / CheckpointStore::ManifestFileName(2));
    auto r = s->Replicate(chain[1], {.decode_threads = threads[k]});
    ASSERT_TRUE(r.ok()) << r.status().ToString();
    EXPECT_TRUE(r->materialized) << threads[k];
    copy[k] = ReadAll(DurableData(2));
    EXPECT_TRUE(s->Verify(2, Tier::kDurable).ok()) << threads[k];
  }
  EXPECT_FALSE(copy[0].empty());
  EXPECT_EQ(copy[0], copy[1]);
}

TEST_F(DurableChainTest, ADamagedLocalCopyIsNotReplicated) {
  auto s = OpenChain(0);
  std::vector<VersionInfo> chain = WriteChain(*s, 1, 1);
  ASSERT_EQ(chain.size(), 2u);
  ASSERT_TRUE(s->Replicate(chain[0]).ok());
  FlipByte(LocalData(2), 100);
  Status st = s->Replicate(chain[1]);
  EXPECT_EQ(st.code(), StatusCode::kDataLoss) << st.ToString();
  EXPECT_FALSE(fs::exists(DurableData(2)));
  EXPECT_FALSE(fs::exists(durable_ / CheckpointStore::ManifestFileName(2)));
}

// A Flush with a deadline makes the rest of the queue plain copies; every
// copy is then either one of the local file or a full one, all restorable,
// and saves after it are written in full again.
TEST_F(DurableChainTest, FlushWithADeadlineCopiesPlainlyAndLeavesARestorableTier) {
  auto s = OpenChain(0);
  AsyncSaverOptions o;
  o.min_delta_saving = 0;
  o.full_every = 100;
  std::vector<SaveReport> done;
  {
    AsyncSaver saver(s.get(), o);
    auto save = [&](uint64_t seed) {
      auto c = saver.Acquire();
      ASSERT_TRUE(c.ok()) << c.status().ToString();
      **c = State(seed);
      saver.Submit(*c, SaveRequest{.step = static_cast<int64_t>(10 * seed)});
    };
    for (uint64_t seed = 1; seed <= 4; ++seed) save(seed);
    Status st = saver.Flush(std::chrono::steady_clock::now() + std::chrono::hours(1));
    ASSERT_TRUE(st.ok()) << st.ToString();
    save(5);
    ASSERT_TRUE(saver.Flush().ok());
    done = saver.TakeCompleted();
  }
  ASSERT_EQ(done.size(), 5u);
  for (const SaveReport& r : done) {
    const int64_t id = r.info.id;
    json durable = DurableManifest(id);
    EXPECT_EQ(r.durable_full, durable.contains("materialized_from")) << id;
    if (!r.durable_full) {
      EXPECT_EQ(ReadAll(DurableData(id)), ReadAll(LocalData(id))) << id;
    }
    if (id == 5) {
      EXPECT_TRUE(r.durable_full);  // after the deadline's Flush returned
    }
  }
  s.reset();
  fs::remove_all(local_);
  s = OpenChain(0);
  for (int64_t id = 1; id <= 5; ++id) {
    auto l = s->Load(id);
    ASSERT_TRUE(l.ok()) << l.status().ToString();
    ExpectState(l->container, static_cast<uint64_t>(id), "durable version " + std::to_string(id));
  }
}

}  // namespace
}  // namespace spot::ckpt
