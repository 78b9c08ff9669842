#include "train/sampler.h"

#include <gtest/gtest.h>

#include <algorithm>

namespace spot::train {
namespace {

TEST(SamplerTest, IsAPermutation) {
  std::vector<int64_t> o = EpochOrder(7, 3, 1000);
  std::vector<int64_t> sorted = o;
  std::sort(sorted.begin(), sorted.end());
  for (int64_t i = 0; i < 1000; ++i) EXPECT_EQ(sorted[static_cast<size_t>(i)], i);
  EXPECT_NE(o, sorted);
}

TEST(SamplerTest, DependsOnlyOnSeedAndEpoch) {
  EXPECT_EQ(EpochOrder(7, 0, 500), EpochOrder(7, 0, 500));
  EXPECT_NE(EpochOrder(7, 0, 500), EpochOrder(7, 1, 500));
  EXPECT_NE(EpochOrder(7, 0, 500), EpochOrder(8, 0, 500));
}

TEST(SamplerTest, OrderIsFrozen) {
  // The order is part of what a checkpoint means: changing the generator would
  // make old checkpoints resume onto different data. This pins it.
  std::vector<int64_t> expected = EpochOrder(42, 0, 10);
  EXPECT_EQ(expected.size(), 10u);
  static const std::vector<int64_t> kGolden = {4, 6, 7, 0, 9, 5, 1, 2, 3, 8};
  EXPECT_EQ(expected, kGolden);
}

TEST(SamplerTest, EdgeSizes) {
  EXPECT_TRUE(EpochOrder(1, 0, 0).empty());
  EXPECT_EQ(EpochOrder(1, 0, 1), std::vector<int64_t>{0});
}

}  // namespace
}  // namespace spot::train
