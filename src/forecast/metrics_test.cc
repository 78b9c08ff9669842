// Scores on hand-computed examples.
#include "forecast/metrics.h"

#include <gtest/gtest.h>

#include <cmath>

namespace spot::forecast {
namespace {

TEST(PriceMetrics, HandComputed) {
  // last 1 everywhere; actual 2, 1, 0.5; predicted 1.5, 1, 1.
  std::vector<PricePoint> pts = {{1.5, 2, 1}, {1, 1, 1}, {1, 0.5, 1}};
  PriceMetrics m = ScorePrices(pts);
  EXPECT_EQ(m.n, 3);
  EXPECT_NEAR(m.mae, (0.5 + 0 + 0.5) / 3, 1e-12);
  EXPECT_NEAR(m.naive_mae, (1 + 0 + 0.5) / 3, 1e-12);
  EXPECT_NEAR(m.mase, 1.0 / 1.5, 1e-12);
  EXPECT_NEAR(m.mape, 100 * (0.25 + 0 + 1) / 3, 1e-9);
  // Directions: up/up, flat/flat, flat/down.
  EXPECT_NEAR(m.directional, 2.0 / 3, 1e-12);
}

TEST(PriceMetrics, MaseUndefinedWhenLastValueIsExact) {
  std::vector<PricePoint> pts = {{1.1, 1, 1}};
  EXPECT_TRUE(std::isnan(ScorePrices(pts).mase));
  EXPECT_EQ(ScorePrices({}).n, 0);
}

TEST(ProbabilityMetrics, BrierSkillLogLossCalibration) {
  // Climatology 0.5 everywhere; the model says 0.9 for the two events, 0.1 otherwise.
  std::vector<ProbabilityPoint> pts = {
      {0.9, true, 0.5}, {0.9, true, 0.5}, {0.1, false, 0.5}, {0.1, false, 0.5}};
  ProbabilityMetrics m = ScoreProbabilities(pts);
  EXPECT_EQ(m.events, 2);
  EXPECT_NEAR(m.brier, 0.01, 1e-12);
  EXPECT_NEAR(m.brier_climatology, 0.25, 1e-12);
  EXPECT_NEAR(m.bss, 1 - 0.01 / 0.25, 1e-12);
  EXPECT_NEAR(m.log_loss, -std::log(0.9), 1e-12);
  ASSERT_EQ(m.calibration.size(), 10u);
  EXPECT_EQ(m.calibration[9].n, 2);
  EXPECT_NEAR(m.calibration[9].observed, 1.0, 1e-12);
  EXPECT_EQ(m.calibration[1].n, 2);
  EXPECT_NEAR(m.calibration[1].mean_p, 0.1, 1e-12);
  // Certain and wrong: log loss is finite (clipped).
  ProbabilityMetrics w = ScoreProbabilities(std::vector<ProbabilityPoint>{{0.0, true, 0.5}});
  EXPECT_NEAR(w.log_loss, -std::log(1e-4), 1e-9);
}

}  // namespace
}  // namespace spot::forecast
