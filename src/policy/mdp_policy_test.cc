// mdp's parts on hand-made data: the availability chain's fit, the decision
// process on chains whose answer is known, and the policy's decisions on
// crafted markets (its tunables too).
#include "policy/mdp_policy.h"

#include <gtest/gtest.h>

#include <cmath>
#include <latch>
#include <memory>
#include <thread>
#include <vector>

#include "core/number_text.h"
#include "policy/availability_chain.h"
#include "policy/mdp_solver.h"
#include "policy/registry.h"
#include "policy/test_traces.h"
#include "policy/uniform_progress.h"

namespace spot::policy {
namespace {

using testing::MakeTrace;
using testing::TargetOf;

// `reps` times: `up` ticks up, then `down` ticks down.
std::vector<uint8_t> Cycles(int up, int down, int reps) {
  std::vector<uint8_t> a;
  for (int r = 0; r < reps; ++r) {
    a.insert(a.end(), up, 1);
    a.insert(a.end(), down, 0);
  }
  return a;
}

TEST(AvailabilityChain, HazardByRunAge) {
  // 50 up runs of 4 ticks, each ended; 50 down runs of 2, the last one open.
  std::vector<uint8_t> up = Cycles(4, 2, 50);
  std::vector<double> price(up.size(), 0.5);
  AvailabilityChain c = FitAvailabilityChain(up, price, {.step_ticks = 1, .prior_steps = 0});
  EXPECT_EQ(c.up_runs, 50);
  EXPECT_EQ(c.down_runs, 50);
  EXPECT_NEAR(c.availability, 4.0 / 6, 1e-12);
  EXPECT_NEAR(c.spot_price, 0.5, 1e-12);
  // Up runs never end in their first two steps; in [2, 4) 50 end over 100
  // steps of exposure; none reach 4.
  EXPECT_NEAR(c.survive[0], 1, 1e-12);
  EXPECT_NEAR(c.survive[1], 1, 1e-12);
  EXPECT_NEAR(c.survive[2], std::exp(-0.5), 1e-12);
  // Down runs: 49 of 50 end in their second step (the last is censored).
  EXPECT_NEAR(c.survive[kAgeBuckets + 0], 1, 1e-12);
  EXPECT_NEAR(c.survive[kAgeBuckets + 1], std::exp(-49.0 / 50), 1e-12);
  // Two ticks a step: runs of 2 and 1 steps.
  AvailabilityChain c2 = FitAvailabilityChain(up, {}, {.step_ticks = 2, .prior_steps = 0});
  EXPECT_NEAR(c2.survive[1], std::exp(-1.0), 1e-12);
  EXPECT_NEAR(c2.survive[kAgeBuckets], std::exp(-49.0 / 50), 1e-12);
  EXPECT_NEAR(c2.spot_price, 1.0, 1e-12);  // no prices: 1.0/h
}

TEST(AvailabilityChain, ShrinksTowardThePooledHazardAndNeverSaysNever) {
  std::vector<uint8_t> up = Cycles(4, 2, 50);
  AvailabilityChain c = FitAvailabilityChain(up, {}, {.step_ticks = 1, .prior_steps = 4});
  EXPECT_LT(c.survive[0], 1);  // a bucket with no events borrows the pooled hazard
  EXPECT_GT(c.survive[2], std::exp(-0.5));
  // Always up: the up side still ends, rarely.
  std::vector<uint8_t> always(500, 1);
  AvailabilityChain a = FitAvailabilityChain(always, {}, {.step_ticks = 1, .prior_steps = 4});
  EXPECT_LT(a.survive[kAgeBuckets - 1], 1);
  EXPECT_GT(a.survive[kAgeBuckets - 1], 0.99);
  EXPECT_NEAR(a.availability, 1, 1e-12);
  // Only the window counts.
  std::vector<uint8_t> tail = Cycles(4, 2, 50);
  tail.insert(tail.end(), 60, 1);
  AvailabilityChain w =
      FitAvailabilityChain(tail, {}, {.step_ticks = 1, .prior_steps = 0, .window_ticks = 60});
  EXPECT_EQ(w.up_runs, 1);
  EXPECT_EQ(w.down_runs, 0);
}

TEST(AvailabilityChain, AHalfLifeWeighsRunsByHowLongAgoTheyEnded) {
  // Up 2 (ended at tick 1), down 1 (tick 2), up 1 (tick 3), down 1 (open at
  // tick 4, the last). A half-life of one tick: weights 1/8, 1/4, 1/2, 1.
  const std::vector<uint8_t> up = {1, 1, 0, 1, 0};
  AvailabilityChain plain = FitAvailabilityChain(up, {}, {.step_ticks = 1, .prior_steps = 0});
  EXPECT_NEAR(plain.survive[0], std::exp(-1.0 / 2), 1e-12);  // 1 end over 2 steps
  EXPECT_NEAR(plain.survive[1], std::exp(-1.0), 1e-12);
  EXPECT_NEAR(plain.survive[kAgeBuckets], std::exp(-1.0 / 2), 1e-12);
  AvailabilityChain recent =
      FitAvailabilityChain(up, {}, {.step_ticks = 1, .prior_steps = 0, .half_life_ticks = 1});
  // Up, first step: the run of 1 ended there (1/2), the run of 2 passed it (1/8).
  EXPECT_NEAR(recent.survive[0], std::exp(-0.5 / (0.125 + 0.5)), 1e-12);
  EXPECT_NEAR(recent.survive[1], std::exp(-1.0), 1e-12);  // only the run of 2 got there
  // Down: the ended run (1/4) against the open one's exposure (1).
  EXPECT_NEAR(recent.survive[kAgeBuckets], std::exp(-0.25 / 1.25), 1e-12);
  EXPECT_EQ(recent.up_runs, 2);  // counts stay counts
  EXPECT_EQ(recent.down_runs, 2);
  // Hours to ticks, at least one; 0 is off.
  MdpOptions o;
  EXPECT_EQ(HalfLifeTicks(o, 1.0 / 6), 0);
  o.history_half_life_hours = 48;
  EXPECT_EQ(HalfLifeTicks(o, 1.0 / 6), 288);
  o.history_half_life_hours = 0.01;
  EXPECT_EQ(HalfLifeTicks(o, 1), 1);
}

TEST(AvailabilityChain, StatesByRunAge) {
  EXPECT_EQ(ChainState(true, 1, 1), 0);
  EXPECT_EQ(ChainState(true, 3, 1), 2);  // age 2 steps: bucket [2, 4)
  EXPECT_EQ(ChainState(true, 1000, 1), kAgeBuckets - 1);
  EXPECT_EQ(ChainState(false, 1, 1), kAgeBuckets);
  EXPECT_EQ(ChainState(true, 5, 4), 1);  // 4 ticks old, 4 ticks a step
  EXPECT_TRUE(IsUp(ChainState(true, 7, 2)));
  EXPECT_FALSE(IsUp(ChainState(false, 7, 2)));
  EXPECT_DOUBLE_EQ(AdvanceChance(2), 0.5);
  EXPECT_DOUBLE_EQ(AdvanceChance(kAgeBuckets - 1), 0);
}

// A chain with the same survival for every up state and every down state.
AvailabilityChain Chain(double up_survive, double down_survive, double price = 1) {
  AvailabilityChain c;
  for (int s = 0; s < kAgeBuckets; ++s) {
    c.survive[s] = up_survive;
    c.survive[kAgeBuckets + s] = down_survive;
  }
  c.spot_price = price;
  return c;
}

const JobSpec kJob{
    .compute_hours = 10, .deadline_hours = 14, .changeover_hours = 0.2, .ondemand_price = 3};
const MdpGrid kGrid{.step_hours = 0.2, .cells_per_step = 2};
const int kUp = 0, kDown = kAgeBuckets;

TEST(MdpSolver, SpotThatNeverEndsIsTakenAndCostsItsPrice) {
  MdpSolution s(Chain(1, 0.5), kJob, kGrid);
  EXPECT_EQ(s.Act(0, 0, InstanceKind::kIdle, kUp), MdpAction::kSpot);
  EXPECT_EQ(s.Act(0, 0, InstanceKind::kOnDemand, kUp), MdpAction::kSpot);
  EXPECT_NEAR(s.ExpectedCost(kUp), 1.0 * (10 + 0.2), 1e-9);
}

TEST(MdpSolver, WaitsOutShortOutagesButNotLongOnes) {
  // Outages end within a step 90% of the time: wait, with slack to spare.
  MdpSolution brief(Chain(0.999, 0.1), kJob, kGrid);
  EXPECT_EQ(brief.Act(1, 0.5, InstanceKind::kIdle, kDown), MdpAction::kIdle);
  // Spot never comes back: waiting only burns slack; the rest is on-demand
  // either way, so the cost equals on-demand's from here.
  MdpSolution never(Chain(0.999, 1), kJob, kGrid);
  EXPECT_NEAR(never.ExpectedCost(kDown), 3 * (10 + 0.2), 1e-9);
  // Outages that last ~10 steps with 1 h of slack left before the net: go
  // on-demand now rather than risk the end.
  MdpSolution slow(Chain(0.98, 0.9), kJob, kGrid);
  EXPECT_EQ(slow.Act(6, 2.6, InstanceKind::kIdle, kDown), MdpAction::kOnDemand);
  // Past the safety net (deficit > D - C - 2d = 3.6 h): on-demand.
  EXPECT_EQ(brief.Act(6, 3.7, InstanceKind::kIdle, kDown), MdpAction::kOnDemand);
  EXPECT_EQ(brief.Act(6, 3.7, InstanceKind::kSpot, kUp), MdpAction::kOnDemand);
}

TEST(MdpSolver, SpotRunsTooShortToPayTheirChangeoverAreLeftAlone) {
  // Runs end within a step 95% of the time and spot costs 2.9 of k = 3: the
  // changeover (0.2 h at 2.9, 0.2 h of work lost) never pays.
  MdpSolution s(Chain(0.05, 0.05, 2.9), kJob, kGrid);
  EXPECT_NE(s.Act(2, 3.0, InstanceKind::kOnDemand, kUp), MdpAction::kSpot);
  // Cheap, long-lived spot is worth leaving on-demand for.
  MdpSolution t(Chain(0.999, 0.5, 0.3), kJob, kGrid);
  EXPECT_EQ(t.Act(2, 1.0, InstanceKind::kOnDemand, kUp), MdpAction::kSpot);
}

// The last sliver of work (less than half a deficit cell) once rounded the
// job into a cell where it is done, whose actions all cost nothing: it sat
// idle until the safety net put it on on-demand (a 600 s tick market, 2
// minutes of work left: 11.5 h idle, then on-demand's changeover).
TEST(MdpSolver, TheLastSliverOfWorkIsFinished) {
  MdpSolution s(Chain(1, 0.5), kJob, kGrid);
  // 10 h in, 0.03 h behind: 0.03 h of the 10 h still to do.
  EXPECT_EQ(s.Act(10.0, 0.03, InstanceKind::kSpot, kUp), MdpAction::kSpot);
  EXPECT_EQ(s.Act(10.0, 0.03, InstanceKind::kIdle, kUp), MdpAction::kSpot);
  EXPECT_EQ(s.Act(10.0, 0.03, InstanceKind::kOnDemand, kDown), MdpAction::kOnDemand);
  EXPECT_EQ(s.Act(11.9, 1.93, InstanceKind::kIdle, kUp), MdpAction::kSpot);
}

TEST(MdpSolver, SolutionsAreSharedForEqualInputs) {
  auto a = SolveMdp(Chain(0.9, 0.5), kJob, kGrid);
  auto b = SolveMdp(Chain(0.9, 0.5), kJob, kGrid);
  auto c = SolveMdp(Chain(0.9, 0.6), kJob, kGrid);
  EXPECT_EQ(a.get(), b.get());
  EXPECT_NE(a.get(), c.get());
}

// Threads that need one solution at once get the one solve: the others wait
// for it instead of solving it again (starts simulated on many threads).
TEST(MdpSolver, ThreadsAskingAtOnceShareOneSolve) {
  constexpr int kThreads = 6;
  std::vector<std::shared_ptr<const MdpSolution>> got(kThreads);
  std::latch go(kThreads);
  {
    std::vector<std::jthread> pool;
    for (int k = 0; k < kThreads; ++k) {
      pool.emplace_back([&, k] {
        go.arrive_and_wait();
        got[k] = SolveMdp(Chain(0.93, 0.45), kJob, kGrid);
      });
    }
  }
  for (int k = 1; k < kThreads; ++k) EXPECT_EQ(got[k].get(), got[0].get()) << k;
}

// The policy on hand-made markets of 10-minute ticks.
class MdpRules : public ::testing::Test {
 protected:
  void Use(std::vector<int32_t> available, std::vector<double> price = {}) {
    trace_ = MakeTrace(600, std::move(available), std::move(price));
    zones_[0] = &trace_;
  }
  // Starts a job at tick `now` and asks for the decision there.
  Placement DecideAt(Policy& p, int64_t now, Placement current, double progress, double time) {
    MarketView m(zones_, now, 1);
    p.Start({.job = job_, .market = m, .start_tick = now});
    Observation o{.tick = static_cast<int64_t>(time * 6),
                  .time_hours = time,
                  .job = job_,
                  .progress_hours = progress,
                  .current = current,
                  .market = m};
    return TargetOf(p.Decide(o));
  }
  JobSpec job_{.compute_hours = 10, .deadline_hours = 14, .changeover_hours = 0.2};
  market::Trace trace_;
  const market::Trace* zones_[1] = {nullptr};
};

// Two days of 6 h up, 20 min down, then `tail`.
std::vector<int32_t> Reliable(std::vector<int32_t> tail) {
  std::vector<int32_t> a;
  for (int r = 0; r < 8; ++r) {
    a.insert(a.end(), 36, 1);
    a.insert(a.end(), 2, 0);
  }
  a.insert(a.end(), tail.begin(), tail.end());
  return a;
}

TEST_F(MdpRules, WaitsOutAShortOutageWhereUpBuysOnDemand) {
  Use(Reliable({1, 1, 0}));  // down now, outages have lasted 20 minutes
  auto mdp = MakeMdpPolicy();
  auto up = MakeUniformProgressPolicy();
  int64_t now = static_cast<int64_t>(trace_.available.size()) - 1;
  // Behind the uniform-progress line (ep(4) = 2.86 h) with 1.5 h of slack.
  EXPECT_EQ(DecideAt(*up, now, Placement::Idle(), 2.5, 4), Placement::OnDemand());
  EXPECT_EQ(DecideAt(*mdp, now, Placement::Idle(), 2.5, 4), Placement::Idle());
  // Spot up now: take it. (Each trace's own last tick: MarketView reads
  // available[now], so `now` past a shorter trace's end read beyond it.)
  Use(Reliable({0, 1}));
  now = static_cast<int64_t>(trace_.available.size()) - 1;
  ASSERT_EQ(trace_.available[static_cast<size_t>(now)], 1);
  EXPECT_EQ(DecideAt(*mdp, now, Placement::Idle(), 2.5, 4), Placement::Spot(0));
  // On the safety net: on-demand.
  Use(Reliable({1, 1, 1}));
  now = static_cast<int64_t>(trace_.available.size()) - 1;
  EXPECT_EQ(DecideAt(*mdp, now, Placement::Spot(0), 0.2, 4), Placement::OnDemand());
}

// From on-demand it enters spot make before break: on-demand is kept while
// the spot gang starts and let go at the start of the tick in which that
// gang becomes ready; a gang taken back while starting leaves the job on
// on-demand, with no changeover to pay again.
TEST_F(MdpRules, LeavesOnDemandForSpotMakeBeforeBreak) {
  Use(Reliable({0, 1, 1}));  // spot back now, in a market of 6 h runs
  const int64_t now = static_cast<int64_t>(trace_.available.size()) - 1;
  auto mdp = MakeMdpPolicy();
  MarketView m(zones_, now, 1);
  const auto od = [](double left) {
    return fleet::Instance{.id = 1,
                           .pool = fleet::PoolRef::OnDemand(),
                           .state = fleet::InstanceState::kRunning,
                           .startup_left_hours = left};
  };
  const auto spot = [](double left, fleet::InstanceState state) {
    return fleet::Instance{
        .id = 2, .pool = fleet::PoolRef::Spot(0), .state = state, .startup_left_hours = left};
  };
  // At 4 h into the job, `progress` done (2.5 h: 1.5 h of slack).
  const auto decide = [&](std::vector<fleet::Instance> fleet, double progress = 2.5) {
    mdp->Start({.job = job_, .market = m, .start_tick = now});
    return mdp->Decide(ObserveFleet(24, job_, progress, false, m, fleet, {}));
  };
  const auto name = [](const Decision& d) { return FleetName(d.fleet, 1); };
  const std::string both = name(OnDemandWhileSpotStarts(0, 1));
  EXPECT_EQ(both, "spot:0=1/1+od:-1=1/1");  // gangs of one in both pools
  EXPECT_EQ(SpotStartingZone(OnDemandWhileSpotStarts(0, 1), 1), 0);
  EXPECT_EQ(SpotStartingZone(GangDecision(Placement::Spot(0), 1), 1), std::nullopt);
  EXPECT_EQ(SpotStartingZone(GangDecision(Placement::OnDemand(), 1), 1), std::nullopt);
  // On on-demand: spot starts beside it.
  EXPECT_EQ(name(decide({od(0)})), both);
  // Not while on-demand's own changeover runs: then spot is taken as a
  // switch (never two groups that make no progress).
  EXPECT_EQ(TargetOf(decide({od(0.1)})), Placement::Spot(0));
  // The spot gang still starting past this tick (10-minute ticks): both kept.
  EXPECT_EQ(name(decide({od(0), spot(0.2, fleet::InstanceState::kStarting)})), both);
  // Ready within this tick, or ready: on-demand let go (never both ready).
  EXPECT_EQ(TargetOf(decide({od(0), spot(0.1, fleet::InstanceState::kStarting)})),
            Placement::Spot(0));
  EXPECT_EQ(TargetOf(decide({od(0), spot(0, fleet::InstanceState::kRunning)})), Placement::Spot(0));
  // From idle there is nothing to keep: spot alone.
  EXPECT_EQ(TargetOf(decide({})), Placement::Spot(0));
  // A changeover within one tick: spot as a switch (both would be ready
  // within the tick they start).
  const JobSpec kept = job_;
  job_.changeover_hours = 1.0 / 6;
  EXPECT_EQ(TargetOf(decide({od(0)})), Placement::Spot(0));
  job_ = kept;
  // Taken back while starting, the market down: the job stays on on-demand.
  Use(Reliable({1, 1, 0}));
  m = MarketView(zones_, now, 1);
  EXPECT_EQ(TargetOf(decide({od(0), spot(0.1, fleet::InstanceState::kPreempted)})),
            Placement::OnDemand());
  // On the safety net: on-demand alone, the starting spot gang let go.
  Use(Reliable({0, 1, 1}));
  m = MarketView(zones_, now, 1);
  EXPECT_EQ(TargetOf(decide({od(0), spot(0.2, fleet::InstanceState::kStarting)}, 0.2)),
            Placement::OnDemand());
}

TEST_F(MdpRules, NeverSpotPricedAtOrAboveOnDemand) {
  std::vector<int32_t> a = Reliable({1, 1, 1});
  std::vector<double> price(a.size(), 0.5);
  price.back() = 3.0;  // = k now
  Use(a, price);
  auto mdp = MakeMdpPolicy();
  int64_t now = static_cast<int64_t>(a.size()) - 1;
  EXPECT_NE(DecideAt(*mdp, now, Placement::Spot(0), 2.5, 4), Placement::Spot(0));
  price.back() = 2.9;
  Use(a, price);
  EXPECT_EQ(DecideAt(*mdp, now, Placement::Spot(0), 2.5, 4), Placement::Spot(0));
  // Without enough history it acts as up, still without spot at k.
  std::vector<int32_t> young(10, 1);
  std::vector<double> dear(10, 3.5);
  Use(young, dear);
  EXPECT_NE(DecideAt(*mdp, 9, Placement::Idle(), 0, 0), Placement::Spot(0));
}

TEST_F(MdpRules, ActsAsUpWithoutHistory) {
  auto mdp = MakeMdpPolicy();
  auto up = MakeUniformProgressPolicy();
  Use(std::vector<int32_t>(20, 1));
  for (int64_t now : {0, 5, 19}) {
    for (Placement cur : {Placement::Idle(), Placement::Spot(0), Placement::OnDemand()}) {
      for (double prog : {0.0, 1.0, 3.0}) {
        EXPECT_EQ(DecideAt(*mdp, now, cur, prog, 2), DecideAt(*up, now, cur, prog, 2));
      }
    }
  }
  trace_.available.back() = 0;
  EXPECT_EQ(DecideAt(*mdp, 19, Placement::Idle(), 0.5, 2), Placement::OnDemand());  // behind
  EXPECT_EQ(DecideAt(*mdp, 19, Placement::Idle(), 1.9, 2), Placement::Idle());      // ahead
}

// Where UP parts from its own rule without history: on-demand is left for
// spot only, never to wait (UP, ahead of its line by 2d with no spot, stops
// on-demand and starts it again once behind: a changeover each time), and
// for spot make before break.
TEST_F(MdpRules, WithoutHistoryLeavesOnDemandForSpotOnlyAndMakeBeforeBreak) {
  auto mdp = MakeMdpPolicy();
  auto up = MakeUniformProgressPolicy();
  Use(std::vector<int32_t>(20, 0));
  EXPECT_EQ(DecideAt(*up, 19, Placement::OnDemand(), 1.9, 2), Placement::Idle());
  EXPECT_EQ(DecideAt(*mdp, 19, Placement::OnDemand(), 1.9, 2), Placement::OnDemand());
  EXPECT_EQ(DecideAt(*mdp, 19, Placement::Idle(), 1.9, 2), Placement::Idle());  // as UP
  trace_.available.back() = 1;
  MarketView m(zones_, 19, 1);
  const std::vector<fleet::Instance> od = {
      {.id = 1, .pool = fleet::PoolRef::OnDemand(), .state = fleet::InstanceState::kRunning}};
  mdp->Start({.job = job_, .market = m, .start_tick = 19});
  const std::string both = FleetName(OnDemandWhileSpotStarts(0, 1).fleet, 1);
  EXPECT_EQ(FleetName(mdp->Decide(ObserveFleet(12, job_, 1.9, false, m, od, {})).fleet, 1), both);
  // A start under way is kept while spot stays usable, though a progress
  // stall puts the job behind UP's line by 2d (1.7 h done at 2 h, the line
  // at 2.4 h is 1.71 h), where UP asked from on-demand stays on it.
  std::vector<fleet::Instance> starting = od;
  starting.push_back({.id = 2,
                      .pool = fleet::PoolRef::Spot(0),
                      .state = fleet::InstanceState::kStarting,
                      .startup_left_hours = 0.2});
  EXPECT_EQ(DecideAt(*up, 19, Placement::OnDemand(), 1.7, 2), Placement::OnDemand());
  mdp->Start({.job = job_, .market = m, .start_tick = 19});
  EXPECT_EQ(FleetName(mdp->Decide(ObserveFleet(12, job_, 1.7, false, m, starting, {})).fleet, 1),
            both);
  // Spot gone meanwhile: the job stays on on-demand.
  trace_.available.back() = 0;
  mdp->Start({.job = job_, .market = m, .start_tick = 19});
  EXPECT_EQ(TargetOf(mdp->Decide(ObserveFleet(12, job_, 1.7, false, m, starting, {}))),
            Placement::OnDemand());
}

TEST(MdpRegistry, TunablesStartAtTheDefaultsAndCreate) {
  PolicyRegistry r;
  RegisterBuiltinPolicies(r);
  ASSERT_FALSE(r.Tunables("mdp").empty());
  for (const TunableParam& p : r.Tunables("mdp")) {
    for (const FieldInfo& f : r.Fields("mdp")) {
      if (f.name != p.name) continue;
      Result<double> dflt = ParseNumber(f.default_value), first = ParseNumber(p.values[0]);
      ASSERT_TRUE(dflt.ok() && first.ok()) << f.name;
      EXPECT_EQ(*dflt, *first) << f.name;
    }
  }
  for (const ParamSet& point : r.Grid("mdp")) {
    auto p = r.Create(PolicyConfig("mdp", point));
    ASSERT_TRUE(p.ok()) << FormatParams(point);
    EXPECT_EQ((*p)->name(), "mdp");
  }
  auto bad = r.Create(PolicyConfig("mdp", {{"cells_per_step", "1"}}));
  EXPECT_EQ(bad.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(bad.status().message().find("cells_per_step"), std::string::npos);
}

}  // namespace
}  // namespace spot::policy
