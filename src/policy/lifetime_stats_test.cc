#include "policy/lifetime_stats.h"

#include <gtest/gtest.h>

namespace spot::policy {
namespace {

TEST(LifetimeStats, RunsAndResiduals) {
  // Runs: (censored 2) 0 [3] 0 [1] 0 0 [5] 0 (open 2, censored).
  std::vector<int32_t> h = {1, 1, 0, 1, 1, 1, 0, 1, 0, 0, 1, 1, 1, 1, 1, 0, 1, 1};
  LifetimeStats s(h, 1, 1000);
  EXPECT_EQ(s.runs(), 3);
  // Age 0: mean of {1, 3, 5} = 3. Age 2: runs > 2 are {3, 5}: mean 4 - 2 = 2.
  EXPECT_DOUBLE_EQ(s.ResidualTicks(0, -1, 1), 3.0);
  EXPECT_DOUBLE_EQ(s.ResidualTicks(2, -1, 1), 2.0);
  EXPECT_DOUBLE_EQ(s.ResidualTicks(2, -1, 3), -1.0);  // too few runs: fallback
  EXPECT_DOUBLE_EQ(s.availability(), 13.0 / 18);
  EXPECT_EQ(CurrentRunAge(h, 1), 2);
  EXPECT_EQ(CurrentRunAge(h, 2), 0);
}

TEST(LifetimeStats, WindowKeepsTheRecentPast) {
  std::vector<int32_t> h = {0, 1, 1, 1, 1, 1, 1, 0, 1, 0};
  EXPECT_EQ(LifetimeStats(h, 1, 100).runs(), 2);
  EXPECT_EQ(LifetimeStats(h, 1, 3).runs(), 1);  // only "1 0" after a 0... the run [8]
}

}  // namespace
}  // namespace spot::policy
