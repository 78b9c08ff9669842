#include "monitor/gradient_watch.h"

#include <gtest/gtest.h>

#include <cmath>

namespace spot::monitor {
namespace {

TEST(GradientWatchTest, AlertsOnANormTenTimesItsAverageAfterTheWarmup) {
  GradientWatch w(10, 20);
  // The first steps may be wild: no alert while the average forms.
  EXPECT_FALSE(w.Observe(100).has_value());
  for (int i = 0; i < 19; ++i) EXPECT_FALSE(w.Observe(1).has_value());
  EXPECT_NEAR(w.average(), 119.0 / 20, 1e-12);
  for (int i = 0; i < 200; ++i) EXPECT_FALSE(w.Observe(1).has_value());
  EXPECT_NEAR(w.average(), 1, 0.1);          // the first wild step has nearly faded
  EXPECT_FALSE(w.Observe(9.9).has_value());  // high, not exploding
  auto ratio = w.Observe(50);
  ASSERT_TRUE(ratio.has_value());
  EXPECT_NEAR(*ratio, 50 / w.average(), 1e-12);
  // Exploding steps do not raise the bar: the next one alerts too.
  const double before = w.average();
  EXPECT_TRUE(w.Observe(60).has_value());
  EXPECT_EQ(w.average(), before);
}

TEST(GradientWatchTest, NormsThatAreNotFiniteAndPositiveAreIgnored) {
  GradientWatch w(10, 0);
  EXPECT_FALSE(w.Observe(std::nan("")).has_value());
  EXPECT_FALSE(w.Observe(INFINITY).has_value());
  EXPECT_FALSE(w.Observe(0).has_value());
  EXPECT_FALSE(w.Observe(-3).has_value());
  EXPECT_EQ(w.average(), 0);
  EXPECT_FALSE(w.Observe(2).has_value());
  EXPECT_TRUE(w.Observe(21).has_value());
}

}  // namespace
}  // namespace spot::monitor
