// fleet-up's rules on crafted observations, each expectation worked out by
// hand in the comment above it, and its gang case against `up`.
#include "policy/fleet_up.h"

#include <gtest/gtest.h>

#include <random>

#include "policy/registry.h"
#include "policy/test_traces.h"
#include "policy/uniform_progress.h"

namespace spot::policy {
namespace {

using fleet::Instance;
using fleet::InstanceState;
using fleet::PoolRef;
using testing::MakeTrace;

// C = 10, D = 20 (ep(t) = t / 2), d = 0.5, k = 3, N = 8 elastic (min 2),
// g = 1 h; every zone's capacity and price are constant.
class FleetUpRules : public ::testing::Test {
 protected:
  void SetZones(const std::vector<int32_t>& capacity, const std::vector<double>& price) {
    traces_.clear();
    zones_.clear();
    for (size_t z = 0; z < capacity.size(); ++z) {
      traces_.push_back(MakeTrace(3600, std::vector<int32_t>(30, capacity[z]),
                                  std::vector<double>(30, price[z])));
    }
    for (const market::Trace& t : traces_) zones_.push_back(&t);
  }
  // `n` live instances in `pool` (ids after those of `held`).
  static void Hold(std::vector<Instance>* held, PoolRef pool, int n,
                   InstanceState state = InstanceState::kRunning) {
    for (int k = 0; k < n; ++k) {
      held->push_back({.id = static_cast<int64_t>(held->size()) + 1, .pool = pool, .state = state});
    }
  }
  std::string At(double t, double p, const std::vector<Instance>& held = {}) {
    return FleetName(Decide(t, p, held).fleet, job_.nodes);
  }
  Decision Decide(double t, double p, const std::vector<Instance>& held = {}) {
    if (!policy_) {
      policy_ = MakeFleetUpPolicy(options_);
      policy_->Start({job_, MarketView(zones_, 0, job_.nodes), 0});
    }
    Observation o{.tick = static_cast<int64_t>(t),
                  .time_hours = t,
                  .job = job_,
                  .progress_hours = p,
                  .current = GangOf(held, job_.nodes),
                  .market = MarketView(zones_, static_cast<int64_t>(t), job_.nodes),
                  .fleet = held,
                  .types = types_};
    return policy_->Decide(o);
  }

  JobSpec job_{.compute_hours = 10,
               .deadline_hours = 20,
               .changeover_hours = 0.5,
               .nodes = 8,
               .ondemand_price = 3,
               .min_nodes = 2};
  FleetUpOptions options_;
  std::vector<fleet::TypeFacts> types_;
  std::vector<market::Trace> traces_;
  std::vector<const market::Trace*> zones_;
  std::unique_ptr<Policy> policy_;
};

// Five pools of 10 at 0.5 0.4 0.6 0.3 0.9 $/h, ahead (p = 5 > ep(2) = 1):
// spread 4 puts at most ceil(8 / 4) = 2 in a pool, the four cheapest
// (zones 3, 1, 0, 2); spread 1 puts all 8 in the cheapest.
TEST_F(FleetUpRules, SpreadsOverTheCheapestPools) {
  SetZones({10, 10, 10, 10, 10}, {0.5, 0.4, 0.6, 0.3, 0.9});
  EXPECT_EQ(At(2, 5), "spot:0=2+spot:1=2+spot:2=2+spot:3=2");
  policy_.reset();
  options_.spread = 1;
  EXPECT_EQ(At(2, 5), "spot:3=8");
}

// Per unit of throughput (spread 2: 4 a pool), with the on-demand reference
// at 3 $/unit:
//   zone 0: throughput 2 at 0.8 $/h = 0.4 $/unit, capacity 1;
//   zone 1: throughput 1 at 0.5 $/h = 0.5 $/unit;
//   zone 2: throughput 0.5 at 0.2 $/h = 0.4 $/unit;
//   zone 3: throughput 1 at 3.5 $/h: dearer than on demand, never used;
//   zone 4: throughput 0.25 at 0.15 $/h = 0.6 $/unit, the cheapest instance.
// Zone 0 (the tie with 2 goes to the lower zone) gives 1 instance = 2 units,
// zone 2 four = 2 units, zone 1 four = 4 units: the 8 are placed, zone 4 is
// not needed.
TEST_F(FleetUpRules, PrefersTheCheapestPerUnitOfThroughput) {
  SetZones({1, 10, 10, 10, 10}, {0.8, 0.5, 0.2, 3.5, 0.15});
  types_ = {{.throughput = 2}, {.throughput = 1},    {.throughput = 0.5},
            {.throughput = 1}, {.throughput = 0.25}, {.throughput = 1, .ondemand_price = 3}};
  options_.spread = 2;
  EXPECT_EQ(At(2, 5), "spot:0=1+spot:1=4+spot:2=4");
  // Without zone 1 the rest comes from zone 4 (16 instances of 0.25 for the
  // missing 4 units, capped at 4: 1 unit); zone 3 still stays unused.
  SetZones({1, 0, 10, 10, 10}, {0.8, 0.5, 0.2, 3.5, 0.15});
  EXPECT_EQ(At(3, 5), "spot:0=1+spot:2=4+spot:4=4");
}

// Pools of 10 at 0.9, 0.5 and 0.4 $/h, spread 2 (4 a pool). Holding 4 in the
// dearest pool, it keeps them and adds the cheapest 4: no move. After a
// partial reclaim leaves 2 of them (capacity 2), it keeps those 2 and fills
// from the cheapest pools.
TEST_F(FleetUpRules, KeepsItsInstancesWhereTheyAre) {
  SetZones({10, 10, 10}, {0.9, 0.5, 0.4});
  options_.spread = 2;
  EXPECT_EQ(At(2, 5), "spot:1=4+spot:2=4");
  std::vector<Instance> held;
  Hold(&held, PoolRef::Spot(0), 4);
  EXPECT_EQ(At(3, 5, held), "spot:0=4+spot:2=4");
  SetZones({2, 10, 10}, {0.9, 0.5, 0.4});
  held[2].state = held[3].state = InstanceState::kPreempted;
  EXPECT_EQ(At(4, 5, held), "spot:0=2+spot:1=2+spot:2=4");
}

// Spot for 5 of the 8 (capacities 3 and 2). Behind (1.5 < ep(4) = 2): the
// missing 3 on demand. Ahead: none. Holding on-demand at p = 2.2 (ahead of
// ep(4) = 2, behind ep(4 + 2d) = 2.5): UP's hysteresis keeps it; at 2.6 it
// is dropped.
TEST_F(FleetUpRules, TopsUpOnDemandWhenBehindAndDropsItWhenAhead) {
  SetZones({3, 2}, {0.5, 0.5});
  options_.spread = 2;
  EXPECT_EQ(At(4, 1.5), "spot:0=3+spot:1=2+od:-1=3");
  EXPECT_EQ(At(4, 2.5), "spot:0=3+spot:1=2");
  std::vector<Instance> held;
  Hold(&held, PoolRef::Spot(0), 3);
  Hold(&held, PoolRef::Spot(1), 2);
  Hold(&held, PoolRef::OnDemand(), 3);
  EXPECT_EQ(At(4, 2.2, held), "spot:0=3+spot:1=2+od:-1=3");
  EXPECT_EQ(At(4, 2.6, held), "spot:0=3+spot:1=2");
}

// In the hysteresis the on-demand instances held come before new spot: with
// room for 8 on spot and 3 on demand held at p = 2.2, it keeps the 3 and
// takes 5 on spot (4 in zone 0, 1 in zone 1).
TEST_F(FleetUpRules, HysteresisKeepsOnDemandAheadOfNewSpot) {
  SetZones({10, 10}, {0.5, 0.6});
  options_.spread = 2;
  std::vector<Instance> held;
  Hold(&held, PoolRef::OnDemand(), 3);
  EXPECT_EQ(At(4, 2.2, held), "spot:0=4+spot:1=1+od:-1=3");
}

// R = 20 - 10 = 10 < W + 2d = 9.8 + 1: the whole job on N on-demand
// reference instances (the gang decision), latched.
TEST_F(FleetUpRules, SafetyNetLatchesTheWholeJobOnDemand) {
  SetZones({10, 10}, {0.5, 0.6});
  EXPECT_EQ(Decide(10, 0.2), GangDecision(Placement::OnDemand(), 8));
  EXPECT_EQ(Decide(11, 9.9), GangDecision(Placement::OnDemand(), 8));
}

// min 4, spot for 3 only: ahead, 3 instances would be billed without
// progress, so it holds none; behind, the missing 5 on demand make it 8.
TEST_F(FleetUpRules, NoFleetBelowMinNodes) {
  job_.min_nodes = 4;
  SetZones({1, 2}, {0.5, 0.5});
  EXPECT_TRUE(Decide(4, 2.5).fleet.empty());
  EXPECT_EQ(At(4, 1.5), "spot:0=1+spot:1=2+od:-1=5");
}

// max_price_factor 0.25: a bid of 0.75 $/h; the pool at 0.9 is not used.
TEST_F(FleetUpRules, BidsAFactorOfTheOnDemandPrice) {
  SetZones({10, 10}, {0.9, 0.5});
  options_.max_price_factor = 0.25;
  options_.spread = 1;
  Decision d = Decide(2, 5);
  ASSERT_EQ(d.fleet.size(), 1u);
  EXPECT_EQ(d.fleet[0].pool, PoolRef::Spot(1));
  EXPECT_EQ(d.fleet[0].count, 8);
  EXPECT_EQ(d.fleet[0].min_count, 0);
  EXPECT_DOUBLE_EQ(d.fleet[0].max_price, 0.75);
}

// The options are the policy's parameters by name: spread 1 through the
// registry is the single-pool fleet of SpreadsOverTheCheapestPools.
TEST_F(FleetUpRules, ParametersByName) {
  PolicyRegistry r;
  RegisterBuiltinPolicies(r);
  SetZones({10, 10, 10, 10, 10}, {0.5, 0.4, 0.6, 0.3, 0.9});
  auto p = r.Create(ComponentConfig{.name = "fleet-up", .params = {{"spread", "1"}}});
  ASSERT_TRUE(p.ok()) << p.status().ToString();
  policy_ = std::move(p).value();
  policy_->Start({job_, MarketView(zones_, 0, job_.nodes), 0});
  EXPECT_EQ(At(2, 5), "spot:3=8");
  auto bad = r.Create(ComponentConfig{.name = "fleet-up", .params = {{"spread", "0"}}});
  EXPECT_EQ(bad.status().code(), StatusCode::kInvalidArgument);
}

// A gang job (min_nodes 0 or N) gets up's decisions, tick for tick, on random
// markets: the gang follows its decisions, loses spot when its zone has no
// capacity for it, and progresses 1 h an hour wherever it runs.
TEST(FleetUp, GangJobIsUpDecisionForDecision) {
  std::mt19937_64 rng(7);
  int compared = 0;
  for (int trial = 0; trial < 20; ++trial) {
    std::vector<market::Trace> traces;
    for (int z = 0; z < 3; ++z) {
      traces.push_back(testing::RandomTrace(rng, 600, 300, 12, 6, true));
      for (int32_t& a : traces.back().available) a *= 2 + static_cast<int>(rng() % 2);
    }
    std::vector<const market::Trace*> zones;
    for (const market::Trace& t : traces) zones.push_back(&t);
    JobSpec job{.compute_hours = 20,
                .deadline_hours = 30,
                .changeover_hours = 0.2,
                .nodes = 2,
                .min_nodes = trial % 2 == 0 ? 0 : 2};
    auto up = MakeUniformProgressPolicy();
    auto fleet_up = MakeFleetUpPolicy();
    up->Start({job, MarketView(zones, 0, job.nodes), 0});
    fleet_up->Start({job, MarketView(zones, 0, job.nodes), 0});
    Placement current = Placement::Idle();
    double progress = 0;
    for (int64_t t = 0; t < 300 && progress < job.compute_hours; ++t) {
      MarketView m(zones, t, job.nodes);
      if (current.kind == InstanceKind::kSpot && !m.AvailableNow(current.zone)) {
        current = Placement::Idle();
      }
      Observation o{.tick = t,
                    .time_hours = t / 6.0,
                    .job = job,
                    .progress_hours = progress,
                    .current = current,
                    .market = m};
      const Decision want = up->Decide(o);
      ASSERT_EQ(fleet_up->Decide(o), want) << "trial " << trial << " tick " << t;
      ++compared;
      current = testing::TargetOf(want, job.nodes);
      if (current.kind != InstanceKind::kIdle) progress += 1 / 6.0;
    }
  }
  EXPECT_GT(compared, 20 * 100);
}

}  // namespace
}  // namespace spot::policy
