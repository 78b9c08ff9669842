#include "dist/straggler.h"

#include <gtest/gtest.h>

namespace spot::dist {
namespace {

TEST(StragglerTest, ARankSlowerThanTheMedianByTheFactorForTheTimeIsFlaggedOnce) {
  StragglerWatch w({.factor = 2, .seconds = 10});
  // Rank 2 runs at a third of the others' speed.
  EXPECT_TRUE(w.Observe(0, {300, 310, 100, 305}).empty());
  EXPECT_DOUBLE_EQ(w.median(), 302.5);
  EXPECT_TRUE(w.Observe(9.9, {300, 310, 100, 305}).empty());  // not yet long enough
  EXPECT_EQ(w.Observe(10, {300, 310, 100, 305}), std::vector<int>{2});
  EXPECT_TRUE(w.Observe(11, {300, 310, 100, 305}).empty());  // once
  EXPECT_EQ(w.stragglers(), std::set<int>{2});
  // It recovers, then slows down again: the clock starts over.
  EXPECT_TRUE(w.Observe(12, {300, 310, 290, 305}).empty());
  EXPECT_TRUE(w.stragglers().empty());
  EXPECT_TRUE(w.Observe(13, {300, 310, 100, 305}).empty());
  EXPECT_TRUE(w.Observe(22, {300, 310, 100, 305}).empty());
  EXPECT_EQ(w.Observe(23, {300, 310, 100, 305}), std::vector<int>{2});
}

TEST(StragglerTest, ASlowStepThatDoesNotLastIsNoStraggler) {
  StragglerWatch w({.factor = 2, .seconds = 5});
  for (int t = 0; t < 100; ++t) {
    // Rank 1 has a slow step every few seconds, never for 5 s in a row.
    const double r1 = t % 4 == 0 ? 50 : 200;
    EXPECT_TRUE(w.Observe(t, {200, r1, 210}).empty()) << t;
  }
}

TEST(StragglerTest, TwoWorkersUnknownRatesAndANewGeneration) {
  StragglerWatch w({.factor = 2, .seconds = 0});
  // Two workers: each is compared with the other.
  EXPECT_EQ(w.Observe(0, {300, 100}), std::vector<int>{1});
  EXPECT_TRUE(w.Observe(1, {300, 0}).empty());  // unknown: nobody to compare
  w.Reset();
  EXPECT_TRUE(w.stragglers().empty());
  EXPECT_TRUE(w.Observe(2, {300, 200}).empty());                  // 1.5x is within the factor
  EXPECT_EQ(w.Observe(3, {100, 300, 320}), std::vector<int>{0});  // the world changed size
}

}  // namespace
}  // namespace spot::dist
