// fleet-up in SpotSim: a hand-worked run that shows what spreading buys, the
// gang case run for run as `up`, and deadlines on random elastic markets.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <random>

#include "policy/fleet_up.h"
#include "policy/registry.h"
#include "policy/test_traces.h"
#include "sim/spot_sim.h"

namespace spot::sim {
namespace {

using policy::testing::MakeTrace;

// Two-state Markov capacity: up runs (mean `mean_up` ticks) hold 1 to
// `max_count` instances, redrawn now and then (partial reclaims), down runs
// none; a spot price that moves now and then in [0.3, 1.2].
market::Trace CountTrace(std::mt19937_64& rng, double gap_s, int64_t ticks, int max_count,
                         double mean_up, double mean_down) {
  std::uniform_real_distribution<double> u(0, 1);
  market::Trace t = MakeTrace(gap_s, {}, {}, "counts");
  bool up = u(rng) < 0.7;
  int count = 1 + static_cast<int>(u(rng) * max_count);
  double price = 0.3 + 0.9 * u(rng);
  for (int64_t i = 0; i < ticks; ++i) {
    if (u(rng) < 1.0 / (up ? mean_up : mean_down)) up = !up;
    if (u(rng) < 0.2) count = 1 + static_cast<int>(u(rng) * max_count);
    if (u(rng) < 0.1) price = 0.3 + 0.9 * u(rng);
    t.available.push_back(up ? count : 0);
    t.price.push_back(price);
  }
  return t;
}

// g = 1 h, N = 4 elastic (min 1), d = 0.5, C = 3, D = 10, k = 3, spot 1 $/h
// in four zones of 4; zone 0 loses its capacity at tick 1.
//   spread 4 (one a pool): tick 0: 4 launched, ready at 0.5: +0.5, $4;
//     tick 1: zone 0's is reclaimed, the other 3 stay (no pool has room for
//     a fourth; ahead: ep(1) = 0.3 < 0.5, no on-demand): +0.75 -> 1.25, $3;
//     ticks 2, 3: -> 2.75, $6; tick 4: 0.25 at 0.75/h = 1/3 h, $1.
//     Done at 4 1/3 h, $14, one instance reclaimed.
//   spread 1 (all in the cheapest, zone 0 on the tie): tick 0: +0.5, $4;
//     tick 1: all 4 reclaimed, 4 launched in zone 1: +0.5 -> 1.0, $4;
//     ticks 2, 3: -> 3.0, $8. Done at 4 h, $16, four reclaimed.
TEST(FleetUpSim, OneReclaimTakesOnePoolsShare) {
  auto z0 = MakeTrace(3600, {4, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0});
  auto z = MakeTrace(3600, std::vector<int32_t>(11, 4));
  std::vector<const market::Trace*> zones = {&z0, &z, &z, &z};
  JobSpec job{.compute_hours = 3,
              .deadline_hours = 10,
              .changeover_hours = 0.5,
              .nodes = 4,
              .ondemand_price = 3,
              .min_nodes = 1};
  ASSERT_TRUE(ValidateMarket(zones, job).ok());
  auto spread = policy::MakeFleetUpPolicy();
  RunResult r = SimulateJob(*spread, zones, 0, job, {.record_timeline = true});
  EXPECT_NEAR(r.finish_hours, 3 + 4.0 / 3, 1e-9);
  EXPECT_NEAR(r.cost, 14, 1e-9);
  EXPECT_EQ(r.instances_reclaimed, 1);
  EXPECT_EQ(r.timeline[0].fleet, "spot:0=1+spot:1=1+spot:2=1+spot:3=1");
  EXPECT_EQ(r.timeline[1].fleet, "spot:1=1+spot:2=1+spot:3=1");
  auto one_pool = policy::MakeFleetUpPolicy({.spread = 1});
  RunResult s = SimulateJob(*one_pool, zones, 0, job, {.record_timeline = true});
  EXPECT_NEAR(s.finish_hours, 4, 1e-9);
  EXPECT_NEAR(s.cost, 16, 1e-9);
  EXPECT_EQ(s.instances_reclaimed, 4);
  EXPECT_EQ(s.timeline[1].fleet, "spot:1");  // the whole fleet in one pool reads as a gang
}

// A gang job (min_nodes 0 or N) runs exactly as under `up`.
TEST(FleetUpSim, GangJobRunsAsUp) {
  policy::PolicyRegistry registry;
  policy::RegisterBuiltinPolicies(registry);
  std::mt19937_64 rng(21);
  for (int trial = 0; trial < 30; ++trial) {
    std::vector<market::Trace> traces;
    for (int z = 0; z < 3; ++z) traces.push_back(CountTrace(rng, 600, 400, 4, 20, 8));
    std::vector<const market::Trace*> zones;
    for (const market::Trace& t : traces) zones.push_back(&t);
    JobSpec job{.compute_hours = 6,
                .deadline_hours = 9,
                .changeover_hours = 0.2,
                .nodes = 3,
                .ondemand_price = 3,
                .min_nodes = trial % 2 == 0 ? 0 : 3};
    auto up = registry.Create("up");
    auto fleet_up = registry.Create("fleet-up");
    ASSERT_TRUE(up.ok() && fleet_up.ok());
    RunResult a = SimulateJob(**up, zones, trial, job, {.record_timeline = true});
    RunResult b = SimulateJob(**fleet_up, zones, trial, job, {.record_timeline = true});
    ASSERT_EQ(a.timeline.size(), b.timeline.size()) << "trial " << trial;
    for (size_t t = 0; t < a.timeline.size(); ++t) {
      ASSERT_EQ(a.timeline[t].fleet, b.timeline[t].fleet) << "trial " << trial << " tick " << t;
    }
    EXPECT_DOUBLE_EQ(a.cost, b.cost);
    EXPECT_EQ(a.met_deadline, b.met_deadline);
  }
}

// On 300 random elastic markets (1-5 zones, N in [2, 8], min in [1, N - 1],
// partial reclaims) fleet-up meets every deadline `od` meets (the 2d net
// needs g <= d), and costs less on average.
TEST(FleetUpSim, MeetsEveryDeadlineOnDemandMeets) {
  policy::PolicyRegistry registry;
  policy::RegisterBuiltinPolicies(registry);
  std::mt19937_64 rng(4242);
  std::uniform_real_distribution<double> u(0, 1);
  const double gap_s = 600;
  int od_met = 0;
  int used_spot = 0;
  double od_cost = 0;
  double fleet_cost = 0;
  for (int trial = 0; trial < 300; ++trial) {
    const int nodes = 2 + static_cast<int>(u(rng) * 7);
    const int num_zones = 1 + static_cast<int>(u(rng) * 5);
    std::vector<market::Trace> traces;
    for (int z = 0; z < num_zones; ++z) {
      traces.push_back(CountTrace(rng, gap_s, 400, 1 + static_cast<int>(u(rng) * nodes),
                                  2 + 30 * u(rng), 2 + 20 * u(rng)));
    }
    std::vector<const market::Trace*> zones;
    for (const market::Trace& t : traces) zones.push_back(&t);
    JobSpec job{.compute_hours = 2 + 6 * u(rng),
                .changeover_hours = std::ceil(10 + 20 * u(rng)) / 60,
                .nodes = nodes,
                .ondemand_price = 3,
                .min_nodes = 1 + static_cast<int>(u(rng) * (nodes - 1))};
    job.deadline_hours = job.compute_hours * (1.02 + 0.58 * u(rng));
    ASSERT_TRUE(ValidateMarket(zones, job).ok());
    const int64_t start = static_cast<int64_t>(u(rng) * 100);
    auto od = registry.Create("od");
    auto fleet_up = registry.Create("fleet-up");
    ASSERT_TRUE(od.ok() && fleet_up.ok());
    const RunResult a = SimulateJob(**od, zones, start, job);
    const RunResult b = SimulateJob(**fleet_up, zones, start, job);
    if (!a.met_deadline) continue;
    ++od_met;
    EXPECT_TRUE(b.met_deadline) << "trial " << trial << ": finished at " << b.finish_hours
                                << " h, deadline " << job.deadline_hours << " h";
    used_spot += b.spot_hours > 0;
    od_cost += a.cost;
    fleet_cost += b.cost;
  }
  std::printf(
      "[ fleet-up ] %d of 300 met by od; fleet-up used spot in %d; mean $%.2f vs od $%.2f\n",
      od_met, used_spot, fleet_cost / od_met, od_cost / od_met);
  EXPECT_GE(od_met, 250);
  EXPECT_GE(used_spot, od_met / 2);
  EXPECT_LT(fleet_cost, od_cost);
}

}  // namespace
}  // namespace spot::sim
