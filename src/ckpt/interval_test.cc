#include "ckpt/interval.h"

#include <gtest/gtest.h>

#include <cmath>

namespace spot::ckpt {
namespace {

IntervalOptions Options(double mtbf_s, double max_overhead) {
  IntervalOptions o;
  o.mtbf_s = mtbf_s;
  o.max_overhead = max_overhead;
  o.min_interval_s = 1;
  o.max_interval_s = 1e9;
  o.first_save_s = 30;
  return o;
}

TEST(IntervalTest, SaveDueByStepsOrByThePolicysTime) {
  EXPECT_TRUE(SaveDue(nullptr, 50, 100, 0));
  EXPECT_FALSE(SaveDue(nullptr, 50, 101, 1e9));  // steps only: time does not matter
  IntervalPolicy p({.first_save_s = 30});
  EXPECT_FALSE(SaveDue(&p, 50, 100, 29.9));  // the policy's time only
  EXPECT_TRUE(SaveDue(&p, 50, 101, 30));
}

TEST(IntervalTest, YoungDalyValues) {
  // Daly: sqrt(2 C M) - C while C < M / 2.
  EXPECT_DOUBLE_EQ(IntervalPolicy::YoungDaly(2, 3600), 120.0 - 2.0);
  EXPECT_DOUBLE_EQ(IntervalPolicy::YoungDaly(8, 3600), 240.0 - 8.0);
  EXPECT_DOUBLE_EQ(IntervalPolicy::YoungDaly(0.5, 100), 10.0 - 0.5);
  // Young alone once C >= M / 2.
  EXPECT_DOUBLE_EQ(IntervalPolicy::YoungDaly(50, 100), 100.0);
  EXPECT_DOUBLE_EQ(IntervalPolicy::YoungDaly(100, 100), std::sqrt(20000.0));
  EXPECT_DOUBLE_EQ(IntervalPolicy::YoungDaly(0, 3600), 0.0);
  // Grows with both the cost and the time between failures.
  EXPECT_LT(IntervalPolicy::YoungDaly(1, 1000), IntervalPolicy::YoungDaly(1, 4000));
  EXPECT_LT(IntervalPolicy::YoungDaly(1, 1000), IntervalPolicy::YoungDaly(4, 1000));
}

TEST(IntervalTest, FirstSaveBeforeAnyMeasurement) {
  IntervalPolicy p(Options(3600, 0.01));
  EXPECT_DOUBLE_EQ(p.IntervalSeconds(), 30);
  EXPECT_DOUBLE_EQ(p.CostSeconds(), 0);
  // Steps alone are no save measurement.
  p.RecordStep(0.1, false);
  p.RecordStep(0.2, true);
  EXPECT_DOUBLE_EQ(p.IntervalSeconds(), 30);

  // first_save_s is clamped to [min, max].
  IntervalOptions o = Options(3600, 0.01);
  o.first_save_s = 0.01;
  o.min_interval_s = 2;
  EXPECT_DOUBLE_EQ(IntervalPolicy(o).IntervalSeconds(), 2);
  o.first_save_s = 1e6;
  o.mtbf_s = 1e9;
  o.max_interval_s = 600;
  EXPECT_DOUBLE_EQ(IntervalPolicy(o).IntervalSeconds(), 600);
}

// A market whose instances live about 72 s (the demo's): a worker that has
// measured nothing must not wait 30 s, nearly half a lifetime, for its first
// save (the durable tier lagged hundreds of steps behind training).
TEST(IntervalTest, FirstSaveComesWithinATenthOfTheMtbf) {
  EXPECT_DOUBLE_EQ(IntervalPolicy(Options(72, 0.01)).IntervalSeconds(), 7.2);
  EXPECT_DOUBLE_EQ(IntervalPolicy(Options(3600, 0.01)).IntervalSeconds(), 30);
  IntervalOptions o = Options(5, 0.01);
  o.min_interval_s = 1;
  EXPECT_DOUBLE_EQ(IntervalPolicy(o).IntervalSeconds(), 1);  // never below the minimum
}

// A replacement worker starts from the cost an earlier writer recorded:
// the Young/Daly schedule from its first step, then its own measurements.
TEST(IntervalTest, ASeededCostIsUsedUntilASaveIsMeasured) {
  IntervalPolicy p(Options(72, 0.01));
  p.Seed(0.02);
  // Young/Daly: sqrt(2 * 0.02 * 72) - 0.02 = 1.677; the 1% cap asks for 2 s.
  EXPECT_DOUBLE_EQ(p.IntervalSeconds(), 2);
  p.Seed(std::nan(""));  // ignored
  p.Seed(-1);            // ignored
  EXPECT_DOUBLE_EQ(p.IntervalSeconds(), 2);
  p.RecordSave(0.05);  // its own measurement wins
  EXPECT_DOUBLE_EQ(p.IntervalSeconds(), 5);
}

TEST(IntervalTest, YoungDalyWhenTheOverheadCapIsLoose) {
  IntervalPolicy p(Options(3600, 0.1));
  p.RecordSave(2);
  EXPECT_DOUBLE_EQ(p.CostSeconds(), 2);
  // Young/Daly 118 s; the cap asks only for 2 / 0.1 = 20 s.
  EXPECT_DOUBLE_EQ(p.IntervalSeconds(), 118);
}

TEST(IntervalTest, OverheadCapDominatesWhenFailuresAreFrequent) {
  // MTBF 100 s, cost 2 s: Young/Daly gives sqrt(400) - 2 = 18 s, but 1% overhead
  // needs 2 / 0.01 = 200 s between saves.
  IntervalPolicy p(Options(100, 0.01));
  p.RecordSave(2);
  EXPECT_DOUBLE_EQ(IntervalPolicy::YoungDaly(2, 100), 18);
  EXPECT_DOUBLE_EQ(p.IntervalSeconds(), 200);
  // With MTBF 3600 the cap (200 s) still wins over Young/Daly (118 s).
  p.SetMtbf(3600);
  EXPECT_DOUBLE_EQ(p.IntervalSeconds(), 200);
  // With a huge MTBF Young/Daly is far above the cap, up to max_interval_s.
  p.SetMtbf(1e8);
  EXPECT_DOUBLE_EQ(p.IntervalSeconds(), std::sqrt(2 * 2 * 1e8) - 2);
  IntervalOptions o = Options(1e12, 0.01);
  o.max_interval_s = 3600;
  IntervalPolicy capped(o);
  capped.RecordSave(2);
  EXPECT_DOUBLE_EQ(capped.IntervalSeconds(), 3600);
}

TEST(IntervalTest, MinIntervalBoundsCheapSaves) {
  IntervalOptions o = Options(10, 0.5);
  o.min_interval_s = 5;
  IntervalPolicy p(o);
  p.RecordSave(0.001);  // Young/Daly ~0.14 s, cap 0.002 s
  EXPECT_DOUBLE_EQ(p.IntervalSeconds(), 5);
}

TEST(IntervalTest, CostIsTheMeanBlockingTime) {
  IntervalPolicy p(Options(3600, 0.01));
  p.RecordSave(1);
  p.RecordSave(3);
  EXPECT_DOUBLE_EQ(p.CostSeconds(), 2);
  p.RecordSave(5);
  EXPECT_DOUBLE_EQ(p.CostSeconds(), 3);
  // After 100 samples the mean adapts: a long run of 10 s saves moves it to 10.
  for (int i = 0; i < 2000; ++i) p.RecordSave(10);
  EXPECT_NEAR(p.CostSeconds(), 10, 1e-6);
}

TEST(IntervalTest, InterferenceOfBusyStepsRaisesTheCost) {
  IntervalPolicy p(Options(3600, 0.01));
  p.RecordSave(0.5);
  for (int i = 0; i < 10; ++i) p.RecordStep(0.1, false);
  EXPECT_DOUBLE_EQ(p.CostSeconds(), 0.5);  // no busy step yet
  for (int i = 0; i < 10; ++i) p.RecordStep(0.3, true);
  // 0.2 s extra on each of 10 busy steps, for one save.
  EXPECT_NEAR(p.CostSeconds(), 0.5 + 2.0, 1e-12);
  EXPECT_GT(p.IntervalSeconds(), 0.5 / 0.01);
  EXPECT_NEAR(p.IntervalSeconds(), 2.5 / 0.01, 1e-9);
  // A second save with the same busy steps: the interference per save halves.
  p.RecordSave(0.5);
  EXPECT_NEAR(p.CostSeconds(), 0.5 + 1.0, 1e-12);
}

TEST(IntervalTest, BusyStepsFasterThanIdleOnesCostNothing) {
  IntervalPolicy p(Options(3600, 0.01));
  p.RecordSave(1);
  for (int i = 0; i < 5; ++i) p.RecordStep(0.3, false);
  for (int i = 0; i < 5; ++i) p.RecordStep(0.2, true);
  EXPECT_DOUBLE_EQ(p.CostSeconds(), 1);
}

TEST(IntervalTest, MeasuredOverhead) {
  IntervalPolicy p(Options(3600, 0.01));
  EXPECT_DOUBLE_EQ(p.MeasuredOverhead(), 0);
  for (int i = 0; i < 10; ++i) p.RecordStep(0.1, false);
  EXPECT_DOUBLE_EQ(p.MeasuredOverhead(), 0);
  for (int i = 0; i < 10; ++i) p.RecordStep(0.3, true);
  p.RecordSave(0.5);
  // (0.5 blocking + 10 * 0.2 interference) / (4 s of steps + 0.5 s blocked).
  EXPECT_NEAR(p.MeasuredOverhead(), 2.5 / 4.5, 1e-12);
  // Only blocking, no busy steps.
  IntervalPolicy q(Options(3600, 0.01));
  for (int i = 0; i < 9; ++i) q.RecordStep(1, false);
  q.RecordSave(1);
  EXPECT_NEAR(q.MeasuredOverhead(), 0.1, 1e-12);
}

}  // namespace
}  // namespace spot::ckpt
