#include "market/hazard.h"

#include <gtest/gtest.h>

#include <cmath>

namespace spot::market {
namespace {

Trace Hourly(std::vector<int32_t> a) {
  Trace t;
  t.gap_seconds = 3600;
  t.available = std::move(a);
  return t;
}

TEST(HazardTest, LifetimesAreUpRunsWithEndCensoring) {
  // up 2, down 1, up 1, down 2, up 3 (censored)
  Trace t = Hourly({1, 1, 0, 1, 0, 0, 1, 1, 1});
  std::vector<Lifetime> l = SpotLifetimes(t);
  ASSERT_EQ(l.size(), 3u);
  EXPECT_EQ(l[0].hours, 2);
  EXPECT_FALSE(l[0].censored);
  EXPECT_EQ(l[1].hours, 1);
  EXPECT_EQ(l[2].hours, 3);
  EXPECT_TRUE(l[2].censored);
  EXPECT_EQ(SpotLifetimes(t, {.drop_left_truncated = true}).size(), 2u);
  EXPECT_EQ(SpotLifetimes(t, {.min_count = 2}).size(), 0u);
}

// Worked by hand. Lifetimes (h): 1, 2, 2, 3+, 4, 5+, 5+ (+ = censored), n = 7.
//   t=1: n=7, d=1 -> S = 6/7
//   t=2: n=6, d=2 -> S = 6/7 * 4/6 = 4/7
//   t=3: censored only, no step; n drops to 3
//   t=4: n=3, d=1 -> S = 4/7 * 2/3 = 8/21
//   t=5: censored only. Median: first S <= 0.5 is at t=4.
TEST(HazardTest, KaplanMeierByHand) {
  SurvivalCurve c = KaplanMeier(
      {{5, true}, {1, false}, {2, false}, {3, true}, {2, false}, {4, false}, {5, true}});
  EXPECT_EQ(c.lifetimes, 7);
  EXPECT_EQ(c.censored, 3);
  ASSERT_EQ(c.time_h, (std::vector<double>{1, 2, 4}));
  EXPECT_EQ(c.at_risk, (std::vector<int64_t>{7, 6, 3}));
  EXPECT_EQ(c.events, (std::vector<int64_t>{1, 2, 1}));
  EXPECT_DOUBLE_EQ(c.survival[0], 6.0 / 7);
  EXPECT_DOUBLE_EQ(c.survival[1], 4.0 / 7);
  EXPECT_DOUBLE_EQ(c.survival[2], 8.0 / 21);
  EXPECT_EQ(c.At(0.5), 1);
  EXPECT_DOUBLE_EQ(c.At(3.5), 4.0 / 7);
  EXPECT_DOUBLE_EQ(c.At(100), 8.0 / 21);
  EXPECT_EQ(c.MedianHours(), 4);
}

// A censoring tied with an event: the censored lifetime is still at risk then.
// Lifetimes 2, 2+, 3: t=2: n=3, d=1 -> 2/3; t=3: n=1, d=1 -> 0.
TEST(HazardTest, KaplanMeierTiesCountCensoredAsAtRisk) {
  SurvivalCurve c = KaplanMeier({{2, true}, {3, false}, {2, false}});
  EXPECT_EQ(c.at_risk, (std::vector<int64_t>{3, 1}));
  EXPECT_DOUBLE_EQ(c.survival[0], 2.0 / 3);
  EXPECT_DOUBLE_EQ(c.survival[1], 0);
  EXPECT_EQ(c.MedianHours(), 3);
}

TEST(HazardTest, MedianIsInfiniteWhenSurvivalStaysHigh) {
  SurvivalCurve c = LifetimeSurvival(Hourly({1, 1, 1, 0, 1, 1, 1, 1}));  // 3, then 4+
  ASSERT_EQ(c.survival.size(), 1u);
  EXPECT_DOUBLE_EQ(c.survival[0], 0.5);
  EXPECT_EQ(c.MedianHours(), 3);
  EXPECT_TRUE(std::isinf(LifetimeSurvival(Hourly({1, 1, 1})).MedianHours()));
  EXPECT_TRUE(KaplanMeier({}).time_h.empty());
}

TEST(HazardTest, PreemptionRateByUtcHour) {
  // 30-minute ticks starting 2023-01-01 22:00 UTC: ticks 0,1 in hour 22, 2,3 in 23, 4,5 in 0.
  Trace t;
  t.gap_seconds = 1800;
  t.start_unix_s = 1672610400;
  t.available = {1, 1, 0, 1, 1, 0};
  HourlyHazard h = PreemptionRateByHour(t);
  EXPECT_DOUBLE_EQ(h.exposure_hours[22], 1.0);
  EXPECT_DOUBLE_EQ(h.exposure_hours[23], 0.5);
  EXPECT_DOUBLE_EQ(h.exposure_hours[0], 0.5);
  EXPECT_EQ(h.preemptions[23], 1);
  EXPECT_EQ(h.preemptions[0], 1);
  EXPECT_DOUBLE_EQ(h.rate_per_hour[23], 2.0);
  EXPECT_DOUBLE_EQ(h.rate_per_hour[0], 2.0);
  EXPECT_DOUBLE_EQ(h.rate_per_hour[22], 0.0);
  EXPECT_DOUBLE_EQ(h.overall_rate_per_hour, 1.0);
  EXPECT_EQ(h.rate_per_hour[5], 0);  // no exposure
}

}  // namespace
}  // namespace spot::market
