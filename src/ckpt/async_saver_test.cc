#include "ckpt/async_saver.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "core/temp_dir.h"

namespace spot::ckpt {
namespace {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

// Fills `c` (recycled) with a state that depends on `seed` in every byte:
// float weights, optimizer state, a step counter. `wide` changes one
// record's shape.
void FillState(Container* c, uint64_t seed, bool wide = false, int64_t floats = 2048) {
  c->Recycle();
  uint64_t x = seed * 0x9E3779B97F4A7C15ULL + 7;
  auto next = [&] {
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    return x;
  };
  for (const char* name : {"model/w", "optim/w.exp_avg"}) {
    std::span<char> d = c->AddUninitialized(name, DType::kF32, {floats});
    for (size_t i = 0; i < d.size() / 4; ++i) {
      float f = static_cast<float>(next() % 100000) * 1e-5f;
      std::memcpy(d.data() + 4 * i, &f, 4);
    }
  }
  std::span<char> b = c->AddUninitialized("model/b", DType::kF64, {wide ? 20 : 10});
  for (size_t i = 0; i < b.size() / 8; ++i) {
    double v = static_cast<double>(seed) + 0.5 * static_cast<double>(i);
    std::memcpy(b.data() + 8 * i, &v, 8);
  }
  std::span<char> s = c->AddUninitialized("step", DType::kI64, {});
  int64_t step = static_cast<int64_t>(seed);
  std::memcpy(s.data(), &step, 8);
}

std::map<std::string, std::string> Bytes(const Container& c) {
  std::map<std::string, std::string> m;
  for (const Record& r : c.records()) m[r.name] = std::string(r.data);
  return m;
}

// Compares without printing megabytes of bytes on a mismatch.
void ExpectBytes(const Container& got, const std::map<std::string, std::string>& want,
                 const std::string& what) {
  std::map<std::string, std::string> g = Bytes(got);
  ASSERT_EQ(g.size(), want.size()) << what;
  for (const auto& [name, bytes] : want) {
    auto it = g.find(name);
    ASSERT_NE(it, g.end()) << what << ": no record " << name;
    EXPECT_TRUE(it->second == bytes) << what << ": record " << name << " differs";
  }
}

class AsyncSaverTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto t = TempDir::Create("spot_async_saver_test");
    ASSERT_TRUE(t.ok()) << t.status().ToString();
    tmp_.emplace(std::move(t).value());
    local_ = tmp_->path() / "local";
    durable_ = tmp_->path() / "durable";
  }

  std::unique_ptr<CheckpointStore> Open(int keep_last = 1000, bool with_durable = false) {
    StoreOptions o;
    o.dir = local_.string();
    if (with_durable) o.durable_dir = durable_.string();
    o.retention.keep_last = keep_last;
    auto s = CheckpointStore::Open(o);
    EXPECT_TRUE(s.ok()) << s.status().ToString();
    return s.ok() ? std::move(s).value() : nullptr;
  }

  // One save of state `seed` at step `seed`; remembers what was submitted.
  void Save(AsyncSaver& saver, uint64_t seed, bool wide = false) {
    auto c = saver.Acquire();
    ASSERT_TRUE(c.ok()) << c.status().ToString();
    FillState(*c, seed, wide);
    submitted_[static_cast<int64_t>(seed)] = Bytes(**c);
    SaveRequest req;
    req.step = static_cast<int64_t>(seed);
    ids_.push_back(saver.Submit(*c, req));
  }

  // Checks that every version in `store` loads to what was submitted for its step.
  void ExpectAllLoadBitwise(const CheckpointStore& store) {
    for (const VersionInfo& v : store.List()) {
      auto l = store.Load(v.id);
      ASSERT_TRUE(l.ok()) << l.status().ToString();
      auto it = submitted_.find(v.step);
      ASSERT_NE(it, submitted_.end()) << "step " << v.step;
      ExpectBytes(l->container, it->second, "version " + std::to_string(v.id));
    }
  }

  // Puts a regular file where `dir` was, keeping the directory aside.
  void Break(const fs::path& dir) {
    fs::rename(dir, fs::path(dir.string() + ".aside"));
    std::ofstream(dir) << "not a directory";
  }
  void Repair(const fs::path& dir) {
    fs::remove(dir);
    fs::rename(fs::path(dir.string() + ".aside"), dir);
  }

  std::optional<TempDir> tmp_;
  fs::path local_, durable_;
  std::map<int64_t, std::map<std::string, std::string>> submitted_;
  std::vector<int64_t> ids_;  // what Submit returned, in order
};

TEST_F(AsyncSaverTest, CyclesWriteShortDeltaChainsThatLoadBitwise) {
  auto store = Open();
  AsyncSaverOptions o;
  o.min_delta_saving = 0;  // FillState's states differ in every byte: deltas save nothing
  o.full_every = 3;
  o.max_in_flight = 2;
  {
    AsyncSaver saver(store.get(), o);
    for (uint64_t seed = 1; seed <= 14; ++seed) {
      Save(saver, seed, /*wide=*/seed >= 9);  // one record changes shape at 9
      EXPECT_LE(saver.pending(), 2);
    }
    ASSERT_TRUE(saver.Flush().ok());
    EXPECT_EQ(saver.pending(), 0);
    std::vector<SaveReport> done = saver.TakeCompleted();
    ASSERT_EQ(done.size(), 14u);
    for (size_t i = 0; i < done.size(); ++i) {
      EXPECT_EQ(done[i].info.step, static_cast<int64_t>(i + 1));
      EXPECT_EQ(done[i].info.id, ids_[i]) << "Submit returns the version's id";
      if (i > 0) {
        EXPECT_GT(done[i].info.id, done[i - 1].info.id);
      }
      EXPECT_GE(done[i].write_s, 0);
      EXPECT_EQ(done[i].replicate_s, 0);
      EXPECT_EQ(done[i].info.tiers, std::vector<Tier>{Tier::kLocal});
    }
    EXPECT_TRUE(saver.TakeCompleted().empty());
    EXPECT_EQ(saver.last_committed(), done.back().info.id);
  }
  std::vector<VersionInfo> list = store->List();
  ASSERT_EQ(list.size(), 14u);
  int deltas = 0;
  std::map<int64_t, VersionInfo> by_id;
  for (const VersionInfo& v : list) by_id[v.id] = v;
  for (const auto& [id, v] : by_id) {
    EXPECT_LE(v.chain_depth, o.full_every - 1) << id;
    if (v.base >= 0) {
      ++deltas;
      ASSERT_TRUE(by_id.count(v.base)) << id;
      EXPECT_EQ(v.chain_depth, by_id[v.base].chain_depth + 1) << id;
      EXPECT_EQ(v.base, id - 1) << id;
    }
  }
  // Full at 1, 4, 7, 10, 13; the rest deltas.
  EXPECT_EQ(deltas, 14 - 5);
  ExpectAllLoadBitwise(*store);
  auto newest = store->LoadNewestValid();
  ASSERT_TRUE(newest.ok());
  EXPECT_EQ(newest->info.step, 14);
}

TEST_F(AsyncSaverTest, WithoutDeltasEveryVersionIsFull) {
  auto store = Open();
  AsyncSaverOptions o;
  o.delta = false;
  {
    AsyncSaver saver(store.get(), o);
    for (uint64_t seed = 1; seed <= 4; ++seed) Save(saver, seed);
    ASSERT_TRUE(saver.Flush().ok());
  }
  for (const VersionInfo& v : store->List()) EXPECT_EQ(v.base, -1);
  ExpectAllLoadBitwise(*store);
}

// States whose deltas save nothing get a full version after each delta, so a
// restart never decodes a chain that saved no bytes; states that barely change
// keep their deltas up to full_every.
TEST_F(AsyncSaverTest, ADeltaThatSavesTooLittleMakesTheNextVersionFull) {
  auto store = Open();
  AsyncSaverOptions o;
  o.full_every = 4;
  o.max_in_flight = 1;
  ASSERT_GT(o.min_delta_saving, 0) << "on by default";
  {
    AsyncSaver saver(store.get(), o);
    for (uint64_t seed = 1; seed <= 5; ++seed) Save(saver, seed);  // every byte differs
    ASSERT_TRUE(saver.Flush().ok());
    std::vector<SaveReport> done = saver.TakeCompleted();
    ASSERT_EQ(done.size(), 5u);
    std::vector<int> depth;
    for (const SaveReport& r : done) depth.push_back(r.info.chain_depth);
    EXPECT_EQ(depth, (std::vector<int>{0, 1, 0, 1, 0}));
    for (const SaveReport& r : done) {
      if (r.info.base >= 0) {
        EXPECT_GT(r.info.file_bytes, done[0].info.file_bytes * 9 / 10);
      }
    }
  }
  {
    // Only the step counter changes: each delta is a fraction of the full version.
    AsyncSaver saver(store.get(), o);
    for (int64_t step = 10; step < 16; ++step) {
      auto c = saver.Acquire();
      ASSERT_TRUE(c.ok()) << c.status().ToString();
      FillState(*c, 99);
      std::memcpy((*c)->mutable_data(3).data(), &step, 8);
      submitted_[step] = Bytes(**c);
      saver.Submit(*c, {.step = step});
    }
    ASSERT_TRUE(saver.Flush().ok());
    std::vector<int> depth;
    for (const SaveReport& r : saver.TakeCompleted()) depth.push_back(r.info.chain_depth);
    EXPECT_EQ(depth, (std::vector<int>{0, 1, 2, 3, 0, 1}));
  }
  ExpectAllLoadBitwise(*store);
}

TEST_F(AsyncSaverTest, OneInFlightAcquireWaitsForTheWrite) {
  auto store = Open();
  AsyncSaverOptions o;
  o.max_in_flight = 1;
  AsyncSaver saver(store.get(), o);
  const char* storage = nullptr;
  for (uint64_t seed = 1; seed <= 6; ++seed) {
    auto c = saver.Acquire();
    ASSERT_TRUE(c.ok());
    // The only buffer is free again only once its write finished.
    EXPECT_EQ(saver.pending(), 0);
    FillState(*c, seed);
    // The same buffer, its storage reused.
    if (storage != nullptr) {
      EXPECT_EQ((*c)->Find("model/w")->data.data(), storage);
    }
    storage = (*c)->Find("model/w")->data.data();
    submitted_[static_cast<int64_t>(seed)] = Bytes(**c);
    SaveRequest req;
    req.step = static_cast<int64_t>(seed);
    saver.Submit(*c, req);
    EXPECT_LE(saver.pending(), 1);
  }
  ASSERT_TRUE(saver.Flush().ok());
  EXPECT_EQ(store->List().size(), 6u);
  ExpectAllLoadBitwise(*store);
}

TEST_F(AsyncSaverTest, FlushWithAPassedDeadlineReportsWhatIsLeft) {
  auto store = Open();
  AsyncSaverOptions o;
  o.max_in_flight = 1;
  AsyncSaver saver(store.get(), o);
  auto c = saver.Acquire();
  ASSERT_TRUE(c.ok());
  FillState(*c, 1, false, int64_t{2} << 20);  // 2 x 8 MiB of floats
  saver.Submit(*c, SaveRequest{});
  ASSERT_GT(saver.pending(), 0);
  Status s = saver.Flush(Clock::now() - std::chrono::seconds(1));
  EXPECT_EQ(s.code(), StatusCode::kDeadlineExceeded) << s.ToString();
  EXPECT_NE(s.message().find("still to write"), std::string::npos) << s.message();
  EXPECT_TRUE(saver.Flush().ok());
  EXPECT_EQ(saver.pending(), 0);
  EXPECT_EQ(store->List().size(), 1u);
  // Nothing pending: a passed deadline is no error.
  EXPECT_TRUE(saver.Flush(Clock::now() - std::chrono::seconds(1)).ok());
}

TEST_F(AsyncSaverTest, WriteErrorIsReportedAndTheNextVersionIsFull) {
  auto store = Open();
  AsyncSaverOptions o;
  o.min_delta_saving = 0;  // FillState's states differ in every byte: deltas save nothing
  o.max_in_flight = 1;
  o.full_every = 100;
  AsyncSaver saver(store.get(), o);
  Save(saver, 1);
  Save(saver, 2);
  ASSERT_TRUE(saver.Flush().ok());
  ASSERT_EQ(store->List()[0].base, 1);  // a delta

  // The local directory becomes a file: the write fails.
  Break(local_);
  Save(saver, 3);
  auto c = saver.Acquire();  // waits for the failed write, then reports it
  ASSERT_FALSE(c.ok());
  EXPECT_NE(c.status().code(), StatusCode::kOk);
  Repair(local_);
  // Reported once.
  Save(saver, 4);
  ASSERT_TRUE(saver.Flush().ok());
  std::vector<VersionInfo> list = store->List();
  ASSERT_EQ(list.size(), 3u);
  EXPECT_EQ(list[0].step, 4);
  EXPECT_EQ(list[0].base, -1) << "a write error resets the delta chain";
  EXPECT_EQ(list[0].chain_depth, 0);

  // The same, reported by Flush.
  Save(saver, 5);
  ASSERT_TRUE(saver.Flush().ok());
  EXPECT_EQ(store->List()[0].base, list[0].id);
  Break(local_);
  Save(saver, 6);
  Status s = saver.Flush();
  EXPECT_FALSE(s.ok());
  EXPECT_TRUE(saver.Flush().ok());  // reported once
  Repair(local_);
  Save(saver, 7);
  ASSERT_TRUE(saver.Flush().ok());
  list = store->List();
  EXPECT_EQ(list[0].step, 7);
  EXPECT_EQ(list[0].base, -1);
  for (const VersionInfo& v : list) EXPECT_NE(v.step, 3);
  for (const VersionInfo& v : list) EXPECT_NE(v.step, 6);
  ExpectAllLoadBitwise(*store);
}

TEST_F(AsyncSaverTest, ReplicatesToTheDurableTier) {
  auto store = Open(1000, /*with_durable=*/true);
  AsyncSaverOptions o;
  o.min_delta_saving = 0;  // FillState's states differ in every byte: deltas save nothing
  o.full_every = 2;
  {
    AsyncSaver saver(store.get(), o);
    for (uint64_t seed = 1; seed <= 4; ++seed) Save(saver, seed);
    ASSERT_TRUE(saver.Flush().ok());
    std::vector<SaveReport> done = saver.TakeCompleted();
    ASSERT_EQ(done.size(), 4u);
    for (const SaveReport& r : done) {
      EXPECT_EQ(r.info.tiers, (std::vector<Tier>{Tier::kLocal, Tier::kDurable}));
      EXPECT_GE(r.replicate_s, 0);
      EXPECT_TRUE(fs::exists(durable_ / CheckpointStore::DataFileName(r.info.id)));
      EXPECT_TRUE(fs::exists(durable_ / CheckpointStore::ManifestFileName(r.info.id)));
      EXPECT_TRUE(store->Verify(r.info.id, Tier::kDurable).ok());
    }
    EXPECT_TRUE(saver.TakeCompleted().empty());
  }
  // From the durable tier alone.
  store.reset();
  fs::remove_all(local_);
  auto again = Open(1000, true);
  ExpectAllLoadBitwise(*again);
  auto l = again->LoadNewestValid();
  ASSERT_TRUE(l.ok());
  EXPECT_EQ(l->info.step, 4);
}

TEST_F(AsyncSaverTest, BusyUntilTheDurableCopyIsDone) {
  // busy() covers replication too (it competes with training as the write
  // does): once it reads false, the save is written and replicated.
  auto store = Open(1000, /*with_durable=*/true);
  AsyncSaver saver(store.get(), AsyncSaverOptions{});
  EXPECT_FALSE(saver.busy());
  auto c = saver.Acquire();
  ASSERT_TRUE(c.ok());
  FillState(*c, 1, false, int64_t{1} << 20);
  saver.Submit(*c, SaveRequest{});
  while (saver.busy()) std::this_thread::yield();
  EXPECT_EQ(saver.pending(), 0);
  std::vector<SaveReport> done = saver.TakeCompleted();
  ASSERT_EQ(done.size(), 1u);
  EXPECT_EQ(done[0].info.tiers, (std::vector<Tier>{Tier::kLocal, Tier::kDurable}));
}

TEST_F(AsyncSaverTest, TightRetentionInBothTiersKeepsTheNewestLoadable) {
  auto store = Open(/*keep_last=*/1, /*with_durable=*/true);
  AsyncSaverOptions o;
  o.min_delta_saving = 0;  // FillState's states differ in every byte: deltas save nothing
  o.full_every = 4;
  o.max_in_flight = 2;
  {
    AsyncSaver saver(store.get(), o);
    for (uint64_t seed = 1; seed <= 10; ++seed) Save(saver, seed);
    ASSERT_TRUE(saver.Flush().ok());
  }
  auto l = store->LoadNewestValid();
  ASSERT_TRUE(l.ok()) << l.status().ToString();
  EXPECT_EQ(l->info.step, 10);
  ExpectBytes(l->container, submitted_[10], "step 10");
  // Version 10 is a delta (depth 1 on 9): the durable tier keeps 9 and 10.
  // (The local tier may hold a few more: its retention ran when the last
  // versions were not replicated yet, and runs again only after the next save.)
  std::vector<int64_t> durable;
  for (const VersionInfo& v : store->List()) {
    if (std::find(v.tiers.begin(), v.tiers.end(), Tier::kDurable) != v.tiers.end()) {
      durable.push_back(v.id);
    }
  }
  EXPECT_EQ(durable, (std::vector<int64_t>{ids_[9], ids_[8]}));
  store.reset();
  fs::remove_all(local_);
  auto again = Open(1, true);
  l = again->LoadNewestValid();
  ASSERT_TRUE(l.ok()) << l.status().ToString();
  ExpectBytes(l->container, submitted_[10], "step 10");
}

TEST_F(AsyncSaverTest, ReplicationErrorIsReportedAndRepairedByTheNextSave) {
  auto store = Open(1000, /*with_durable=*/true);
  AsyncSaverOptions o;
  o.min_delta_saving = 0;  // FillState's states differ in every byte: deltas save nothing
  o.max_in_flight = 1;
  o.full_every = 100;
  {
    AsyncSaver saver(store.get(), o);
    Save(saver, 1);
    ASSERT_TRUE(saver.Flush().ok());
    Break(durable_);
    Save(saver, 2);  // a delta on 1: written locally, not replicated
    Status s = saver.Flush();
    EXPECT_FALSE(s.ok());
    std::vector<SaveReport> done = saver.TakeCompleted();
    ASSERT_EQ(done.size(), 2u);
    EXPECT_EQ(done[1].info.tiers, std::vector<Tier>{Tier::kLocal});
    Repair(durable_);
    Save(saver, 3);  // a delta on 2
    ASSERT_TRUE(saver.Flush().ok());
  }
  // The durable tier alone restores the newest version, base chain included.
  store.reset();
  fs::remove_all(local_);
  auto again = Open(1000, true);
  auto l = again->LoadNewestValid();
  ASSERT_TRUE(l.ok()) << l.status().ToString();
  EXPECT_EQ(l->info.step, 3);
  ExpectBytes(l->container, submitted_[3], "step 3");
}

TEST_F(AsyncSaverTest, DestructorWaitsForSubmittedSaves) {
  auto store = Open();
  {
    AsyncSaverOptions o;
    o.max_in_flight = 3;
    AsyncSaver saver(store.get(), o);
    for (uint64_t seed = 1; seed <= 3; ++seed) Save(saver, seed);
  }
  EXPECT_EQ(store->List().size(), 3u);
  ExpectAllLoadBitwise(*store);
}

}  // namespace
}  // namespace spot::ckpt
