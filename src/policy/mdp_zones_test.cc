// mdp-zones' rules on crafted markets of several zones: which zone it enters
// (expected run length, price, migration), when it moves (only when the
// saving beats the move's cost), and that on one zone it is mdp.
#include "policy/mdp_zones.h"

#include <gtest/gtest.h>

#include <random>

#include "fleet/migration.h"
#include "policy/registry.h"
#include "policy/test_traces.h"

namespace spot::policy {
namespace {

using testing::MakeTrace;
using testing::RandomTrace;
using testing::TargetOf;

constexpr double kGap = 600;     // 10-minute ticks: mdp's 0.2 h step is one tick
constexpr int64_t kStart = 288;  // 48 h of history before the job
constexpr int64_t kTicks = 400;

// A zone named `name` whose availability repeats `up` ticks up, `down` down
// (from tick 0), at a constant `price` (0: none recorded).
market::Trace Zone(const char* name, int up, int down, double price = 0) {
  std::vector<int32_t> a;
  while (static_cast<int64_t>(a.size()) < kTicks) {
    a.insert(a.end(), up, 1);
    a.insert(a.end(), down, 0);
  }
  a.resize(kTicks);
  market::Trace t =
      MakeTrace(kGap, a, price > 0 ? std::vector<double>(kTicks, price) : std::vector<double>{});
  t.name = t.pool.zone = name;
  return t;
}

class MdpZonesTest : public ::testing::Test {
 protected:
  MdpZonesTest() {
    RegisterBuiltinPolicies(registry_);
    EXPECT_TRUE(egress_.Add("us-east-1", "us-west-2", 0.02).ok());
    EXPECT_TRUE(egress_.Add("us-west-2", "us-east-1", 0.02).ok());
  }
  void SetZones(std::vector<market::Trace> traces) {
    traces_ = std::move(traces);
    zones_.clear();
    for (const auto& t : traces_) zones_.push_back(&t);
  }
  std::unique_ptr<Policy> Started(const std::string& name, const JobSpec& job) {
    auto p = registry_.Create(name);
    EXPECT_TRUE(p.ok());
    (*p)->Start({job, MarketView(zones_, kStart, job.nodes), kStart});
    return std::move(p).value();
  }
  // The observation at job tick `tick` holding `held` (a running gang of one).
  Observation Obs(const JobSpec& job, int64_t tick, double progress, const Placement& held) {
    fleet_.clear();
    if (held.kind != InstanceKind::kIdle) {
      fleet_.push_back({.id = 1,
                        .pool = held.kind == InstanceKind::kSpot ? fleet::PoolRef::Spot(held.zone)
                                                                 : fleet::PoolRef::OnDemand(),
                        .state = fleet::InstanceState::kRunning});
    }
    return ObserveFleet(tick, job, progress, false, MarketView(zones_, kStart + tick, job.nodes),
                        fleet_, {});
  }
  JobSpec Job(double gb = 0) const {
    return {.compute_hours = 6,
            .deadline_hours = 12,
            .changeover_hours = 0.2,
            .ondemand_price = 3,
            .checkpoint_gb = gb,
            .egress = &egress_};
  }

  PolicyRegistry registry_;
  fleet::EgressPrices egress_;
  std::vector<market::Trace> traces_;
  std::vector<const market::Trace*> zones_;
  std::vector<fleet::Instance> fleet_;
};

TEST(ExpectedUpSteps, GeometricRunsAndNeverEndingOnes) {
  AvailabilityChain c;
  c.survive.fill(0.9);
  for (int s = 0; s < kAgeBuckets; ++s) EXPECT_NEAR(ExpectedUpSteps(c, s, 1e9), 9, 1e-9) << s;
  EXPECT_EQ(ExpectedUpSteps(c, kAgeBuckets, 1e9), 0);  // a down state
  c.survive.fill(1);
  EXPECT_EQ(ExpectedUpSteps(c, 0, 50), 50);
  // Runs that end at once while young but never once old: long from age 1 on.
  c.survive[0] = 0;
  EXPECT_EQ(ExpectedUpSteps(c, 0, 50), 0);
  EXPECT_EQ(ExpectedUpSteps(c, 1, 50), 50);
}

// Both zones up at the start, same price and region: mdp takes the first,
// whose runs last 3 ticks; mdp-zones the one whose runs last 100.
TEST_F(MdpZonesTest, EntersTheZoneWhoseRunsLastLonger) {
  SetZones({Zone("us-east-1a", 3, 3), Zone("us-east-1d", 100, 2)});
  ASSERT_EQ(traces_[0].available[kStart], 1);
  ASSERT_EQ(traces_[1].available[kStart], 1);
  JobSpec job = Job();
  job.deadline_hours = 7;  // little slack: mdp takes spot at once
  auto mdp = Started("mdp", job);
  ASSERT_EQ(TargetOf(mdp->Decide(Obs(job, 0, 0, Placement::Idle()))), Placement::Spot(0));
  auto ours = Started("mdp-zones", job);
  EXPECT_EQ(TargetOf(ours->Decide(Obs(job, 0, 0, Placement::Idle()))), Placement::Spot(1));
}

// Leaving on-demand (make before break, mdp_policy.h), it chooses the zone
// as for any entry, and keeps the zone of a spot gang already starting.
TEST_F(MdpZonesTest, LeavesOnDemandForTheZoneItWouldEnter) {
  SetZones({Zone("us-east-1a", 3, 3), Zone("us-east-1d", 100, 2)});
  JobSpec job = Job();
  job.deadline_hours = 8;  // 2 h of slack: spot now
  auto mdp = Started("mdp", job);
  EXPECT_EQ(FleetName(mdp->Decide(Obs(job, 0, 0, Placement::OnDemand())).fleet, 1),
            "spot:0=1/1+od:-1=1/1");
  auto ours = Started("mdp-zones", job);
  EXPECT_EQ(FleetName(ours->Decide(Obs(job, 0, 0, Placement::OnDemand())).fleet, 1),
            "spot:1=1/1+od:-1=1/1");
  Observation o = Obs(job, 1, 1.0 / 6, Placement::OnDemand());
  fleet_.push_back({.id = 2,
                    .pool = fleet::PoolRef::Spot(0),
                    .state = fleet::InstanceState::kStarting,
                    .startup_left_hours = 0.2});
  o.fleet = fleet_;
  EXPECT_EQ(FleetName(ours->Decide(o).fleet, 1), "spot:0=1/1+od:-1=1/1");
  // Ready: on-demand let go, the gang kept where it started (not moved at
  // once to the zone an entry would choose).
  fleet_.back().startup_left_hours = 0;
  fleet_.back().state = fleet::InstanceState::kRunning;
  o.fleet = fleet_;
  EXPECT_EQ(TargetOf(ours->Decide(o)), Placement::Spot(0));
}

// Running in a zone at 1.0/h while another one always up costs 0.5/h: moves
// when the move is cheap, stays when the saving is small, the move crosses
// regions with a costly checkpoint, or the slack is short.
TEST_F(MdpZonesTest, MovesOnlyWhenTheSavingBeatsTheCost) {
  auto run = [&](const char* there, double price_there, double gb, int64_t tick, double progress) {
    SetZones({Zone("us-east-1a", kTicks, 0, 1.0), Zone(there, kTicks, 0, price_there)});
    JobSpec job = Job(gb);
    auto mdp = Started("mdp", job);
    EXPECT_EQ(TargetOf(mdp->Decide(Obs(job, tick, progress, Placement::Spot(0)))),
              Placement::Spot(0));  // mdp keeps its zone
    auto p = Started("mdp-zones", job);
    return TargetOf(p->Decide(Obs(job, tick, progress, Placement::Spot(0))));
  };
  // 6 h of work left: saving 0.5 x 6 against 2 x 0.5 x 0.2: moves.
  EXPECT_EQ(run("us-east-1d", 0.5, 0, 1, 0), Placement::Spot(1));
  // Saving 0.02 x 6 = 0.12 against 2 x 0.98 x 0.2 = 0.39: stays.
  EXPECT_EQ(run("us-east-1d", 0.98, 0, 1, 0), Placement::Spot(0));
  // To us-west-2 with 50 GB: saving 3 against 2 x (0.1 + 1.0): moves; with
  // 200 GB (4.0 a move): stays; within us-east-1 the 200 GB move is free.
  EXPECT_EQ(run("us-west-2a", 0.5, 50, 1, 0), Placement::Spot(1));
  EXPECT_EQ(run("us-west-2a", 0.5, 200, 1, 0), Placement::Spot(0));
  EXPECT_EQ(run("us-east-1d", 0.5, 200, 1, 0), Placement::Spot(1));
  // At 10 h with 4.8 h done: slack 2 - 1.2 - 0.4 = 0.4 h beyond the net, less
  // than 4 changeovers: stays, though the saving 0.5 x 1.2 would pay for it.
  EXPECT_EQ(run("us-east-1d", 0.5, 0, 60, 4.8), Placement::Spot(0));
  // At 10 h with 5.5 h done the slack is 1.1 h: moves (saving 0.25 > 0.2).
  EXPECT_EQ(run("us-east-1d", 0.5, 0, 60, 5.5), Placement::Spot(1));
}

// Preempted in us-east-1a with a 200 GB state: it re-enters spot in
// us-east-1d (free move) though us-west-2a is cheaper; with no state to
// move, the cheaper zone.
TEST_F(MdpZonesTest, EntryPricesTheMigration) {
  auto entered = [&](double gb) {
    // Entering with 6 h left: us-west-2a (0.8 x 6.2 + 4) / 6 = 1.49 per hour
    // of progress against us-east-1d's 0.9 x 6.2 / 6 = 0.93; 0.83 with 0 GB.
    std::vector<int32_t> gone(kTicks, 1);
    for (int64_t t = kStart + 1; t < kTicks; ++t) gone[t] = 0;
    market::Trace a = MakeTrace(kGap, gone, std::vector<double>(kTicks, 0.9));
    a.name = a.pool.zone = "us-east-1a";
    SetZones({a, Zone("us-west-2a", kTicks, 0, 0.8), Zone("us-east-1d", kTicks, 0, 0.9)});
    JobSpec job = Job(gb);
    auto p = Started("mdp-zones", job);
    p->Decide(Obs(job, 0, 0, Placement::Spot(0)));  // the job's state is in us-east-1a
    return TargetOf(p->Decide(Obs(job, 1, 0, Placement::Idle())));
  };
  EXPECT_EQ(entered(200), Placement::Spot(2));
  EXPECT_EQ(entered(0), Placement::Spot(1));
}

// On one zone it is mdp, decision for decision.
TEST_F(MdpZonesTest, OnOneZoneItIsMdp) {
  std::mt19937_64 rng(7);
  for (int trial = 0; trial < 20; ++trial) {
    market::Trace t = RandomTrace(rng, kGap, kTicks, 12, 6, trial % 2 == 1);
    t.pool.zone = "us-east-1a";
    SetZones({t});
    JobSpec job = Job();
    job.ondemand_price = trial % 2 == 1 ? 1.0 : 3.0;
    auto mdp = Started("mdp", job);
    auto ours = Started("mdp-zones", job);
    Placement held = Placement::Idle();
    for (int64_t tick = 0; kStart + tick < kTicks && tick < 60; ++tick) {
      Observation o = Obs(job, tick, tick * 0.1, held);
      Decision a = mdp->Decide(o);
      ASSERT_EQ(ours->Decide(o), a) << "trial " << trial << " tick " << tick;
      held = TargetOf(a);
      if (held.kind == InstanceKind::kSpot && traces_[0].available[kStart + tick + 1] == 0) {
        held = Placement::Idle();
      }
    }
  }
}

}  // namespace
}  // namespace spot::policy
