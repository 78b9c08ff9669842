#include "train/sampler.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <map>

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

// 90 samples of class 0 and 10 of class 1 (the minority scattered in data order).
std::vector<int64_t> Imbalanced() {
  std::vector<int64_t> labels(100, 0);
  for (int i = 3; i < 100; i += 10) labels[i] = 1;
  return labels;
}

TEST(SamplerTest, StratifiedOrdersSpreadEveryClassOverEveryBatch) {
  const std::vector<int64_t> labels = Imbalanced();
  std::vector<int64_t> o = ClassOrder(5, 0, labels, /*balanced=*/false);
  EXPECT_EQ(o, ClassOrder(5, 0, labels, false)) << "deterministic";
  EXPECT_NE(o, ClassOrder(5, 1, labels, false)) << "another epoch, another order";
  for (int b = 0; b < 10; ++b) {
    int minority = 0;
    for (int i = 0; i < 10; ++i) minority += labels[o[b * 10 + i]];
    EXPECT_EQ(minority, 1) << "batch " << b << " of 10 holds one of the 10 minority samples";
  }
  std::sort(o.begin(), o.end());
  for (int64_t i = 0; i < 100; ++i) EXPECT_EQ(o[i], i) << "a permutation";
}

TEST(SamplerTest, BalancedOrdersGiveEachClassAnEqualShare) {
  const std::vector<int64_t> labels = Imbalanced();
  const std::vector<int64_t> o = ClassOrder(5, 0, labels, /*balanced=*/true);
  ASSERT_EQ(o.size(), 100u);
  std::map<int64_t, int> seen;
  int minority = 0;
  for (int64_t s : o) {
    ++seen[s];
    minority += labels[s];
  }
  EXPECT_EQ(minority, 50);
  for (int i = 3; i < 100; i += 10) EXPECT_EQ(seen[i], 5) << "each minority sample 5 times";
  EXPECT_EQ(seen.size(), 10u + 50u) << "50 of the 90 majority samples, once each";
  for (int b = 0; b < 50; ++b) {
    EXPECT_EQ(labels[o[2 * b]] + labels[o[2 * b + 1]], 1) << "alternating: pair " << b;
  }
}

// Shards dealt into slots: a permutation, the same for a seed and epoch,
// reshuffled each epoch, and every batch holds every slot in proportion to
// its size, to the epoch's end.
TEST(SamplerTest, SlotOrdersDealEveryBatchFromEverySlotInProportion) {
  // 101 shards of 10 (the last of 3) in 5 slots: slot 0 has 203 samples, the others 200.
  const int64_t n = 1003, shard = 10, slots = 5;
  const std::vector<int64_t> o = SlotOrder(3, 0, n, shard, slots);
  ASSERT_EQ(o.size(), static_cast<size_t>(n));
  EXPECT_EQ(o, SlotOrder(3, 0, n, shard, slots));
  EXPECT_NE(o, SlotOrder(3, 1, n, shard, slots));
  EXPECT_NE(o, SlotOrder(4, 0, n, shard, slots));
  for (int64_t b = 0; b * 10 < n; ++b) {
    std::vector<int> count(slots, 0);
    const int64_t end = std::min(n, (b + 1) * 10);
    for (int64_t p = b * 10; p < end; ++p) ++count[(o[p] / shard) % slots];
    for (int j = 0; j < slots; ++j) {
      EXPECT_GE(count[j], end - b * 10 == 10 ? 1 : 0) << "batch " << b << ", slot " << j;
      EXPECT_LE(count[j], 3) << "batch " << b << ", slot " << j;
    }
  }
  // Slots of one size deal round robin.
  const std::vector<int64_t> even = SlotOrder(3, 0, 1000, shard, slots);
  for (int64_t p = 0; p < 1000; ++p) ASSERT_EQ((even[p] / shard) % slots, p % slots) << p;
  std::vector<int64_t> sorted = o;
  std::sort(sorted.begin(), sorted.end());
  for (int64_t i = 0; i < n; ++i) ASSERT_EQ(sorted[i], i) << "a permutation";
  EXPECT_EQ(SlotOrder(3, 0, 0, 10, 4).size(), 0u);
}

}  // namespace
}  // namespace spot::train
