#include "core/clock.h"

#include <gtest/gtest.h>

#include <thread>
#include <vector>

namespace spot {
namespace {

TEST(ManualClock, MovesOnlyWhenTold) {
  ManualClock c(1000);
  EXPECT_EQ(c.NowUnixS(), 1000);
  EXPECT_EQ(c.MonotonicS(), 0);
  c.SleepFor(2.5);
  c.Advance(-7);  // ignored: time never goes back
  EXPECT_EQ(c.NowUnixS(), 1002.5);
  EXPECT_EQ(c.MonotonicS(), 2.5);
}

TEST(ManualClock, AdvancesFromManyThreads) {
  ManualClock c(0);
  std::vector<std::thread> ts;
  for (int i = 0; i < 4; ++i) {
    ts.emplace_back([&c] {
      for (int k = 0; k < 1000; ++k) c.Advance(0.5);
    });
  }
  for (auto& t : ts) t.join();
  EXPECT_EQ(c.NowUnixS(), 2000);
}

TEST(RealClock, IsMonotonicAndNearTheSystemTime) {
  Clock* c = RealClock();
  const double a = c->MonotonicS();
  c->SleepFor(0.001);
  EXPECT_GE(c->MonotonicS(), a);
  EXPECT_GT(c->NowUnixS(), 1.6e9);  // after 2020
}

}  // namespace
}  // namespace spot
