#include "dist/rendezvous.h"

#include <fmt/format.h>
#include <gtest/gtest.h>

#include <atomic>
#include <future>
#include <set>
#include <thread>

namespace spot::dist {
namespace {

using std::chrono::milliseconds;

RendezvousOptions Options(int min, int max) {
  return {.job = "t",
          .min_workers = min,
          .max_workers = max,
          .join_window = milliseconds(100),
          .last_call = milliseconds(3000),
          .timeout = milliseconds(10000),
          .poll = milliseconds(2)};
}

std::vector<std::string> Ids(const Generation& g) {
  std::vector<std::string> ids;
  for (const MemberInfo& m : g.members) ids.push_back(m.id);
  return ids;
}

// W workers join at once; returns their generations by worker index.
std::vector<Generation> JoinAll(std::vector<std::unique_ptr<Rendezvous>>& rs,
                                const std::vector<int>& which) {
  std::vector<std::future<Result<Generation>>> fs;
  for (int i : which) {
    fs.push_back(std::async(std::launch::async,
                            [&rs, i] { return rs[i]->Join({.id = rs[i]->id(), .step = i}); }));
  }
  std::vector<Generation> out;
  for (auto& f : fs) {
    Result<Generation> g = f.get();
    EXPECT_TRUE(g.ok()) << g.status().message();
    out.push_back(g.ok() ? *g : Generation{});
  }
  return out;
}

template <typename Pred>
bool WaitForCondition(Pred pred) {
  const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (!pred()) {
    if (std::chrono::steady_clock::now() > until) return false;
    std::this_thread::sleep_for(milliseconds(2));
  }
  return true;
}

std::vector<std::unique_ptr<Rendezvous>> Make(KvStore* kv, int n, RendezvousOptions o) {
  std::vector<std::unique_ptr<Rendezvous>> rs;
  for (int i = 0; i < n; ++i)
    rs.push_back(std::make_unique<Rendezvous>(kv, o, fmt::format("w{}", i)));
  return rs;
}

TEST(RendezvousTest, WorldSizesOneToEightFormOneGenerationWithDistinctRanks) {
  for (int w = 1; w <= 8; ++w) {
    SCOPED_TRACE(fmt::format("world {}", w));
    auto kv = NewMemoryKvStore(milliseconds(500));
    auto rs = Make(kv.get(), w, Options(w, w));
    std::vector<int> all(w);
    for (int i = 0; i < w; ++i) all[i] = i;
    std::vector<Generation> gs = JoinAll(rs, all);
    std::set<int> ranks;
    for (int i = 0; i < w; ++i) {
      EXPECT_EQ(gs[i].number, 1);
      EXPECT_EQ(gs[i].world_size(), w);
      EXPECT_EQ(Ids(gs[i]), Ids(gs[0]));
      EXPECT_EQ(gs[i].members[gs[i].rank].id, rs[i]->id());
      EXPECT_EQ(gs[i].members[gs[i].rank].step, i);  // what each told the others
      ranks.insert(gs[i].rank);
    }
    EXPECT_EQ(ranks.size(), static_cast<size_t>(w));
  }
}

TEST(RendezvousTest, FirstGenerationWaitsTheJoinWindowForMoreThanMin) {
  auto kv = NewMemoryKvStore(milliseconds(500));
  RendezvousOptions o = Options(1, 8);
  o.join_window = milliseconds(300);
  auto rs = Make(kv.get(), 3, o);
  auto first = std::async(std::launch::async, [&] { return rs[0]->Join({}); });
  std::this_thread::sleep_for(milliseconds(50));
  std::vector<Generation> rest = JoinAll(rs, {1, 2});
  Result<Generation> g0 = first.get();
  ASSERT_TRUE(g0.ok());
  EXPECT_EQ(g0->world_size(), 3);
  EXPECT_EQ(g0->rank, 0);  // the smallest id (and the first to join)
  EXPECT_EQ(rest[0].number, 1);
}

TEST(RendezvousTest, SurvivorsReformWithoutTheDeadKeepingRankOrder) {
  auto kv = NewMemoryKvStore(milliseconds(200));
  auto rs = Make(kv.get(), 3, Options(1, 3));
  std::vector<Generation> g1 = JoinAll(rs, {0, 1, 2});
  ASSERT_EQ(g1[0].world_size(), 3);
  const std::string lost = g1[0].members[1].id;  // rank 1 dies: no Leave, heartbeats stop
  int lost_index = lost == "w0" ? 0 : lost == "w1" ? 1 : 2;
  rs[lost_index].reset();
  std::vector<int> survivors;
  for (int i = 0; i < 3; ++i) {
    if (i != lost_index) survivors.push_back(i);
  }
  auto t0 = std::chrono::steady_clock::now();
  std::vector<Generation> g2 = JoinAll(rs, survivors);
  double waited = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  ASSERT_EQ(g2[0].world_size(), 2);
  EXPECT_EQ(g2[0].number, 2);
  EXPECT_EQ(g2[0].members[0].id, g1[0].members[0].id);  // rank 0 stays rank 0
  EXPECT_EQ(g2[0].members[1].id, g1[0].members[2].id);
  EXPECT_LT(waited, 2.0) << "closed on the dead worker's liveness, not last_call";
}

TEST(RendezvousTest, LeaveLetsTheOthersReformAtOnce) {
  auto kv = NewMemoryKvStore(milliseconds(60000));  // liveness would take a minute
  auto rs = Make(kv.get(), 3, Options(1, 3));
  JoinAll(rs, {0, 1, 2});
  ASSERT_TRUE(rs[2]->Leave().ok());
  auto t0 = std::chrono::steady_clock::now();
  std::vector<Generation> g2 = JoinAll(rs, {0, 1});
  EXPECT_EQ(g2[0].world_size(), 2);
  EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(), 1.0);
}

// A worker told to stop gives up without opening, entering or closing a
// generation (the peer that left is not replaced by a generation of one), but
// takes one already closed with it: its members wait for it.
TEST(RendezvousTest, AStopGivesUpBeforeAnyChangeButTakesAGenerationClosedWithIt) {
  auto kv = NewMemoryKvStore(milliseconds(60000));
  std::atomic<bool> stop{false};
  RendezvousOptions o = Options(1, 2);
  o.cancelled = [&stop] { return stop.load(); };
  Rendezvous w0(kv.get(), o, "w0");
  Rendezvous w1(kv.get(), Options(1, 2), "w1");
  auto g1 = std::async(std::launch::async, [&] { return w1.Join({}); });
  ASSERT_TRUE(w0.Join({}).ok());
  ASSERT_TRUE(g1.get().ok());
  ASSERT_TRUE(w1.Leave().ok());
  stop = true;
  Result<Generation> g = w0.Join({});
  ASSERT_FALSE(g.ok());
  EXPECT_EQ(g.status().code(), StatusCode::kAborted);
  EXPECT_FALSE(*w0.ShouldReform(1)) << "a generation was opened after the stop";
  // An open generation is not entered.
  const std::string open =
      R"({"gen":2,"open":true,"members":[{"id":"w2","samples_per_s":1,"step":0,"state_hash":"0"}],"prev":[],"opened_ms":0,"waiting":[]})";
  ASSERT_TRUE(kv->Put("t/rdzv/state", open).ok());
  g = w0.Join({});
  ASSERT_FALSE(g.ok());
  EXPECT_EQ(g.status().code(), StatusCode::kAborted);
  EXPECT_EQ(kv->Get("t/rdzv/state")->value_or(""), open);
  // A generation closed with it is taken.
  ASSERT_TRUE(
      kv->Put(
            "t/rdzv/state",
            R"({"gen":3,"open":false,"members":[{"id":"w2","samples_per_s":1,"step":0,"state_hash":"0"},{"id":"w0","samples_per_s":1,"step":0,"state_hash":"0"}],"prev":[],"opened_ms":0,"waiting":[]})")
          .ok());
  g = w0.Join({});
  ASSERT_TRUE(g.ok()) << g.status().message();
  EXPECT_EQ(g->number, 3);
  EXPECT_EQ(g->rank, 1);
}

TEST(RendezvousTest, NewcomerIsSeenByTheRunningGroupAndJoinsLast) {
  auto kv = NewMemoryKvStore(milliseconds(500));
  auto rs = Make(kv.get(), 3, Options(1, 4));
  std::vector<Generation> g1 = JoinAll(rs, {0, 1});
  ASSERT_EQ(g1[0].world_size(), 2);
  EXPECT_FALSE(*rs[0]->ShouldReform(1));
  auto joiner = std::async(std::launch::async, [&] { return rs[2]->Join({.step = -1}); });
  while (!*rs[0]->ShouldReform(1)) std::this_thread::sleep_for(milliseconds(2));
  std::vector<Generation> g2 = JoinAll(rs, {0, 1});
  Result<Generation> j = joiner.get();
  ASSERT_TRUE(j.ok());
  EXPECT_EQ(j->number, 2);
  EXPECT_EQ(j->world_size(), 3);
  EXPECT_EQ(j->rank, 2);
  EXPECT_EQ(Ids(*j), Ids(g2[0]));
}

TEST(RendezvousTest, FullGroupKeepsANewcomerWaitingUntilThereIsRoom) {
  auto kv = NewMemoryKvStore(milliseconds(500));
  auto rs = Make(kv.get(), 3, Options(1, 2));
  JoinAll(rs, {0, 1});
  auto joiner = std::async(std::launch::async, [&] { return rs[2]->Join({}); });
  std::this_thread::sleep_for(milliseconds(200));
  EXPECT_FALSE(*rs[0]->ShouldReform(1)) << "a full group must not be disturbed";
  ASSERT_TRUE(rs[1]->Leave().ok());
  std::vector<Generation> g2 = JoinAll(rs, {0});
  Result<Generation> j = joiner.get();
  ASSERT_TRUE(j.ok());
  EXPECT_EQ(g2[0].world_size(), 2);
  EXPECT_EQ(Ids(g2[0]), (std::vector<std::string>{"w0", "w2"}));
}

// What the launcher reads to know a newcomer is with the group (a handover
// lets the old instances go only then): nobody before the first generation;
// the formed generation's members while the next one gathers; a newcomer
// once it waits for room in a full group, or once a generation formed with it.
TEST(RendezvousTest, MembershipNamesTheFormedGenerationAndTheNewcomersWaitingForRoom) {
  auto kv = NewMemoryKvStore(milliseconds(500));
  Result<Membership> none = ReadMembership(kv.get(), "t");
  ASSERT_TRUE(none.ok()) << none.status().message();
  EXPECT_EQ(none->generation, 0);
  EXPECT_TRUE(none->formed.empty() && none->waiting.empty());
  auto rs = Make(kv.get(), 4, Options(1, 3));
  JoinAll(rs, {0, 1});
  Result<Membership> m = ReadMembership(kv.get(), "t");
  ASSERT_TRUE(m.ok());
  EXPECT_EQ(m->generation, 1);
  EXPECT_EQ(m->formed, (std::vector<std::string>{"w0", "w1"}));
  EXPECT_TRUE(m->waiting.empty());
  // w2 opens generation 2 and waits for the running group to re-join: not
  // with the group yet (it has no state), generation 1 still the formed one.
  auto joiner = std::async(std::launch::async, [&] { return rs[2]->Join({}); });
  while (!*rs[0]->ShouldReform(1)) std::this_thread::sleep_for(milliseconds(2));
  m = ReadMembership(kv.get(), "t");
  ASSERT_TRUE(m.ok());
  EXPECT_EQ(m->generation, 1);
  EXPECT_EQ(m->formed, (std::vector<std::string>{"w0", "w1"}));
  EXPECT_TRUE(m->waiting.empty());
  JoinAll(rs, {0, 1});
  ASSERT_TRUE(joiner.get().ok());
  m = ReadMembership(kv.get(), "t");
  ASSERT_TRUE(m.ok());
  EXPECT_EQ(m->generation, 2);
  EXPECT_EQ(m->formed, (std::vector<std::string>{"w0", "w1", "w2"}));
  // The group is full: w3 waits for room, booted and ready to take over.
  auto waiting = std::async(std::launch::async, [&] { return rs[3]->Join({}); });
  ASSERT_TRUE(WaitForCondition([&] {
    Result<Membership> w = ReadMembership(kv.get(), "t");
    return w.ok() && !w->waiting.empty();
  }));
  m = ReadMembership(kv.get(), "t");
  EXPECT_EQ(m->waiting, std::vector<std::string>{"w3"});
  EXPECT_EQ(m->formed.size(), 3u);
  ASSERT_TRUE(rs[0]->Leave().ok());
  JoinAll(rs, {1, 2});
  ASSERT_TRUE(waiting.get().ok());
  ASSERT_TRUE(kv->Put("t/rdzv/state", "{\"gen\": 1}").ok());
  Result<Membership> bad = ReadMembership(kv.get(), "t");
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().code(), StatusCode::kDataLoss);
  EXPECT_NE(bad.status().message().find("t/rdzv/state"), std::string::npos);
}

// A whole full group lost at once (a spot gang reclaimed): the replacements
// must not wait for room in a group of the dead.
TEST(RendezvousTest, ReplacementsOfAWholeLostGroupFormTheNextGeneration) {
  auto kv = NewMemoryKvStore(milliseconds(60000));
  auto rs = Make(kv.get(), 4, Options(1, 2));
  JoinAll(rs, {0, 1});
  rs[0].reset();  // both die (no Leave)...
  rs[1].reset();
  ASSERT_TRUE(kv->MarkDead("w0").ok());  // ...and the launcher says so
  ASSERT_TRUE(kv->MarkDead("w1").ok());
  std::vector<Generation> g2 = JoinAll(rs, {2, 3});
  ASSERT_EQ(g2[0].world_size(), 2);
  EXPECT_EQ(g2[0].number, 2);
  EXPECT_EQ(g2[1].number, 2);
}

TEST(RendezvousTest, TooFewWorkersTimesOutWithAClearMessage) {
  auto kv = NewMemoryKvStore(milliseconds(500));
  RendezvousOptions o = Options(2, 4);
  o.timeout = milliseconds(300);
  Rendezvous r(kv.get(), o, "alone");
  Result<Generation> g = r.Join({});
  ASSERT_FALSE(g.ok());
  EXPECT_EQ(g.status().code(), StatusCode::kDeadlineExceeded);
  EXPECT_NE(g.status().message().find("min_workers 2"), std::string::npos) << g.status().message();
}

TEST(RendezvousTest, MalformedStateIsDataLossNamingTheKey) {
  auto kv = NewMemoryKvStore(milliseconds(500));
  ASSERT_TRUE(kv->Put("t/rdzv/state", "{not json").ok());
  Rendezvous r(kv.get(), Options(1, 1), "w");
  Result<Generation> g = r.Join({});
  ASSERT_FALSE(g.ok());
  EXPECT_EQ(g.status().code(), StatusCode::kDataLoss);
  EXPECT_NE(g.status().message().find("t/rdzv/state"), std::string::npos);
}

// fuzz/regressions/rendezvous_state/: floats where integers belong (a
// generation of 1e19, an opened_ms past int64) were cast to int64_t,
// undefined behaviour; a state hash past 2^64 or with a sign was taken.
TEST(RendezvousTest, NumbersOutOfTheirTypeAreDataLossNotUndefinedCasts) {
  for (
      const char* state :
      {R"({"gen":1e19})",
       R"({"gen":4.0,"open":true,"members":[],"prev":[],"opened_ms":0,"waiting":[]})",
       R"({"gen":4,"open":true,"members":[],"prev":[],"opened_ms":1784467440737095500000000000,"waiting":[]})",
       R"({"gen":4,"open":true,"members":[{"id":"a","samples_per_s":1,"step":0,"state_hash":"184467440737095510615"}],"prev":[],"opened_ms":0,"waiting":[]})",
       R"({"gen":4,"open":true,"members":[{"id":"a","samples_per_s":1,"step":0,"state_hash":"-1"}],"prev":[],"opened_ms":0,"waiting":[]})"}) {
    auto kv = NewMemoryKvStore(milliseconds(500));
    ASSERT_TRUE(kv->Put("t/rdzv/state", state).ok());
    Rendezvous r(kv.get(), Options(1, 1), "w");
    Result<Generation> g = r.Join({});
    ASSERT_FALSE(g.ok()) << state;
    EXPECT_EQ(g.status().code(), StatusCode::kDataLoss) << state;
    EXPECT_NE(g.status().message().find("t/rdzv/state"), std::string::npos);
  }
}

// Real workers re-join whenever ShouldReform says a newer generation exists;
// this loop does the same until nothing changes for a while, and returns the
// generation each worker ended in.
std::vector<Generation> Converge(std::vector<std::unique_ptr<Rendezvous>>& rs) {
  std::vector<std::future<Generation>> fs;
  for (auto& r : rs) {
    fs.push_back(std::async(std::launch::async, [&r] {
      Generation g = *r->Join({});
      for (int quiet = 0; quiet < 10;) {
        std::this_thread::sleep_for(milliseconds(10));
        if (*r->ShouldReform(g.number)) {
          g = *r->Join({});
          quiet = 0;
        } else {
          ++quiet;
        }
      }
      return g;
    }));
  }
  std::vector<Generation> out;
  for (auto& f : fs) out.push_back(f.get());
  return out;
}

TEST(RendezvousTest, ManyRoundsOfChurnConvergeToOneGroup) {
  // A worker leaves and a new one arrives, six times over; the workers that
  // re-join on ShouldReform always end up agreeing on one member list.
  auto kv = NewMemoryKvStore(milliseconds(300));
  RendezvousOptions o = Options(1, 4);
  std::vector<std::unique_ptr<Rendezvous>> rs = Make(kv.get(), 4, o);
  Converge(rs);
  int next_id = 4;
  for (int round = 0; round < 6; ++round) {
    int leaving = round % 4;
    ASSERT_TRUE(rs[leaving]->Leave().ok());
    rs[leaving] = std::make_unique<Rendezvous>(kv.get(), o, fmt::format("w{}", next_id++));
    std::vector<Generation> gs = Converge(rs);
    for (const Generation& g : gs) {
      EXPECT_EQ(g.number, gs[0].number) << "round " << round;
      EXPECT_EQ(Ids(g), Ids(gs[0])) << "round " << round;
    }
    EXPECT_EQ(gs[0].world_size(), 4);
  }
}

}  // namespace
}  // namespace spot::dist
