#include "market/trace.h"

#include <gtest/gtest.h>

namespace spot::market {
namespace {

TEST(PoolTest, KeyJoinsCloudZoneAndType) {
  Pool p{"aws", "us-east-1", "us-east-1a", "p3.2xlarge"};
  EXPECT_EQ(p.Key(), "aws/us-east-1a/p3.2xlarge");
}

TEST(StepSeriesTest, AtHoldsValueUntilNextChange) {
  StepSeries s{{10, 20, 30}, {1, 2, 3}};
  EXPECT_EQ(s.At(0), 1);  // before the first change point: the first value
  EXPECT_EQ(s.At(10), 1);
  EXPECT_EQ(s.At(19.9), 1);
  EXPECT_EQ(s.At(20), 2);
  EXPECT_EQ(s.At(1e9), 3);
}

TEST(StepSeriesTest, ResampleMatchesAt) {
  StepSeries s{{0, 25, 26, 100}, {5, 6, 7, 8}};
  std::vector<double> r = s.Resample(-10, 10, 14);
  ASSERT_EQ(r.size(), 14u);
  for (int k = 0; k < 14; ++k) EXPECT_EQ(r[k], s.At(-10 + 10.0 * k)) << k;
  EXPECT_TRUE(s.Resample(0, 10, 0).empty());
}

TEST(RunsTest, SplitsIntoAlternatingRunsWithThreshold) {
  Trace t;
  t.gap_seconds = 60;
  t.available = {0, 4, 4, 2, 0, 4};
  std::vector<AvailabilityRun> r = AvailabilityRuns(t, 4);
  ASSERT_EQ(r.size(), 4u);
  EXPECT_FALSE(r[0].up);
  EXPECT_EQ(r[0].length, 1);
  EXPECT_TRUE(r[1].up);
  EXPECT_EQ(r[1].begin, 1);
  EXPECT_EQ(r[1].length, 2);
  EXPECT_FALSE(r[2].up);
  EXPECT_EQ(r[2].length, 2);
  EXPECT_TRUE(r[3].censored_end);
  EXPECT_FALSE(r[2].censored_end);
  EXPECT_DOUBLE_EQ(AvailabilityFraction(t, 4), 0.5);
  EXPECT_DOUBLE_EQ(AvailabilityFraction(t, 1), 4.0 / 6);
  EXPECT_TRUE(AvailabilityRuns(Trace{}).empty());
}

}  // namespace
}  // namespace spot::market
