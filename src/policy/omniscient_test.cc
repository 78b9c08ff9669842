// The omniscient DP on hand-made markets (answers worked out by hand) and its
// lower-bound property under a coarse grid.
#include "policy/omniscient.h"

#include <gtest/gtest.h>

#include <random>

#include "policy/test_traces.h"

namespace spot::policy {
namespace {

using testing::MakeTrace;
using testing::RandomTrace;

Result<OmniscientPlan> Solve(const market::Trace& t, const JobSpec& job, int64_t start = 0,
                             OmniscientOptions o = {}) {
  const market::Trace* zones[] = {&t};
  return SolveOmniscient({zones, start}, job, o);
}

// g = 1 h, d = 0.5 h, C = 2 h, D = 5 h, k = 3, a = 1 1 0 0 1 1 1.
// Spot before the outage gives 1.5 h of work (0.5 changeover), then a second
// changeover at tick 4: 0.5 h more work by 5.0 h: cost 2 + 1 = 3. Waiting for
// tick 4 alone: 0.5 + 2 = 2.5 h of run time, done at 6.5 > 5: too late.
// On-demand in the gap (ticks 2-3) instead: 2 (spot) + 0.5 * 3 (od changeover
// + ...) is dearer. So the optimum is $3.0 with spot, spot.
TEST(OmniscientHand, UsesBothRuns) {
  auto t = MakeTrace(3600, {1, 1, 0, 0, 1, 1, 1});
  JobSpec job{.compute_hours = 2, .deadline_hours = 5, .changeover_hours = 0.5,
              .ondemand_price = 3};
  auto plan = Solve(t, job);
  ASSERT_TRUE(plan.ok() && plan->feasible);
  EXPECT_TRUE(plan->exact);
  EXPECT_NEAR(plan->cost, 3.0, 1e-9);
  ASSERT_EQ(plan->placements.size(), 5u);
  EXPECT_EQ(plan->placements[0], Placement::Spot(0));
  EXPECT_EQ(plan->placements[4], Placement::Spot(0));
}

// D < C + d: no schedule can finish.
TEST(OmniscientHand, Infeasible) {
  auto t = MakeTrace(3600, {1, 1, 1, 1});
  JobSpec job{.compute_hours = 2, .deadline_hours = 2.4, .changeover_hours = 0.5};
  auto plan = Solve(t, job);
  ASSERT_TRUE(plan.ok());
  EXPECT_FALSE(plan->feasible);
}

// A coarser grid (K = 1, inexact for g = 195 s, d = 0.2 h) never exceeds the
// exact optimum (K = 13): rounding is in the bound's favour.
TEST(OmniscientProperty, CoarseGridIsALowerBound) {
  std::mt19937_64 rng(5);
  JobSpec job{.compute_hours = 3, .deadline_hours = 4.2, .changeover_hours = 0.2,
              .ondemand_price = 3};
  for (int trial = 0; trial < 20; ++trial) {
    auto t = RandomTrace(rng, 195, 300, 15, 10, trial % 2);
    auto exact = Solve(t, job);
    auto coarse = Solve(t, job, 0, {.max_units_per_tick = 1});
    ASSERT_TRUE(exact.ok() && coarse.ok());
    EXPECT_TRUE(exact->exact);
    EXPECT_EQ(exact->units_per_tick, 13);
    EXPECT_FALSE(coarse->exact);
    if (!exact->feasible) continue;
    ASSERT_TRUE(coarse->feasible);
    EXPECT_LE(coarse->cost, exact->cost + 1e-9) << "trial " << trial;
  }
}

}  // namespace
}  // namespace spot::policy
