// The bootstrap interval on distributions whose answer is known.
#include "sim/statistics.h"

#include <gtest/gtest.h>

#include <cmath>
#include <random>

namespace spot::sim {
namespace {

// For the mean of n normal draws the bootstrap percentile interval is close
// to the normal-theory one, mean +- 1.96 s / sqrt(n): here within a tenth of
// a standard error at each end, and it holds the true mean.
TEST(Bootstrap, MatchesTheNormalIntervalOfAMean) {
  std::mt19937_64 rng(7);
  std::normal_distribution<double> normal(10, 2);
  std::vector<double> v(400);
  for (double& x : v) x = normal(rng);
  double mean = 0, var = 0;
  for (double x : v) mean += x / v.size();
  for (double x : v) var += (x - mean) * (x - mean) / (v.size() - 1);
  const double se = std::sqrt(var / v.size());
  Interval ci = BootstrapMeanInterval(v, {.resamples = 4000, .seed = 3});
  EXPECT_NEAR(ci.lo, mean - 1.96 * se, 0.1 * se);
  EXPECT_NEAR(ci.hi, mean + 1.96 * se, 0.1 * se);
  EXPECT_LT(ci.lo, 10);
  EXPECT_GT(ci.hi, 10);
  // A 50% interval is narrower: about +- 0.674 se.
  Interval half = BootstrapMeanInterval(v, {.resamples = 4000, .seed = 3, .level = 0.5});
  EXPECT_NEAR(half.hi - half.lo, 2 * 0.674 * se, 0.15 * se);
}

TEST(Bootstrap, DeterministicAndDegenerate) {
  std::vector<double> v = {1, 5, 2, 8, 3, 3, 9};
  Interval a = BootstrapMeanInterval(v, {.seed = 11});
  Interval b = BootstrapMeanInterval(v, {.seed = 11});
  EXPECT_EQ(a.lo, b.lo);
  EXPECT_EQ(a.hi, b.hi);
  Interval c = BootstrapMeanInterval(v, {.seed = 12});
  EXPECT_TRUE(c.lo != a.lo || c.hi != a.hi);
  std::vector<double> same(50, 4.25);
  Interval s = BootstrapMeanInterval(same);
  EXPECT_EQ(s.lo, 4.25);
  EXPECT_EQ(s.hi, 4.25);
  Interval none = BootstrapMeanInterval(std::vector<double>{});
  EXPECT_EQ(none.lo, 0);
  EXPECT_EQ(none.hi, 0);
}

// Strata keep their sizes: two constant strata give the same mean in every
// resample (a pooled bootstrap would not).
TEST(Bootstrap, StrataKeepTheirSizes) {
  std::vector<double> zeros(30, 0), ones(10, 1);
  const std::span<const double> strata[] = {zeros, ones};
  Interval ci = BootstrapMeanInterval(strata);
  EXPECT_DOUBLE_EQ(ci.lo, 0.25);
  EXPECT_DOUBLE_EQ(ci.hi, 0.25);
  std::vector<double> all = zeros;
  all.insert(all.end(), ones.begin(), ones.end());
  Interval pooled = BootstrapMeanInterval(all);
  EXPECT_LT(pooled.lo, 0.2);
  EXPECT_GT(pooled.hi, 0.3);
  Distribution d = Summarize(strata);
  EXPECT_DOUBLE_EQ(d.mean, 0.25);
  EXPECT_EQ(d.p95, 1);
}

}  // namespace
}  // namespace spot::sim
