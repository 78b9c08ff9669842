#include "train/partition.h"

#include <gtest/gtest.h>

#include <numeric>
#include <random>
#include <set>

namespace spot::train {
namespace {

TEST(PartitionTest, GlobalBatchesTileTheEpoch) {
  const int64_t n = 1000, b = 64;
  int64_t at = 0;
  for (int64_t k = 0; at < n; ++k) {
    Slice s = GlobalBatch(k, b, n);
    EXPECT_EQ(s.begin, at);
    EXPECT_EQ(s.size(), std::min<int64_t>(b, n - at));
    at = s.end;
  }
  EXPECT_EQ(GlobalBatch(100, b, n).size(), 0);
}

TEST(PartitionTest, EqualWeightsDifferByAtMostOneExtrasFirst) {
  for (int w = 1; w <= 8; ++w) {
    for (int64_t n : {0, 1, 5, 63, 64, 65, 256, 1000}) {
      std::vector<Slice> s = SplitBatch({10, 10 + n}, std::vector<double>(w, 1.0));
      ASSERT_EQ(s.size(), static_cast<size_t>(w));
      int64_t at = 10;
      for (int r = 0; r < w; ++r) {
        EXPECT_EQ(s[r].begin, at) << "w " << w << " n " << n << " rank " << r;
        at = s[r].end;
        EXPECT_EQ(s[r].size(), n / w + (r < n % w ? 1 : 0)) << "w " << w << " n " << n;
      }
      EXPECT_EQ(at, 10 + n);
    }
  }
}

TEST(PartitionTest, ProportionalToWeightsAndAlwaysComplete) {
  std::vector<Slice> s = SplitBatch({0, 300}, {1.0, 2.0, 3.0});
  EXPECT_EQ(s[0].size(), 50);
  EXPECT_EQ(s[1].size(), 100);
  EXPECT_EQ(s[2].size(), 150);
  std::mt19937 rng(7);
  std::uniform_real_distribution<double> u(0.1, 10);
  for (int trial = 0; trial < 200; ++trial) {
    int w = 1 + trial % 8;
    std::vector<double> weights(w);
    for (double& x : weights) x = u(rng);
    int64_t n = trial * 3;
    std::vector<Slice> parts = SplitBatch({0, n}, weights);
    int64_t at = 0;
    double total = std::accumulate(weights.begin(), weights.end(), 0.0);
    for (int r = 0; r < w; ++r) {
      EXPECT_EQ(parts[r].begin, at);
      at = parts[r].end;
      // Within one of proportional, or two for a slice that gave a sample
      // to a rank that would have had none.
      EXPECT_LE(std::abs(static_cast<double>(parts[r].size()) - n * weights[r] / total), 2.0);
      if (n >= w) EXPECT_GE(parts[r].size(), 1);
    }
    EXPECT_EQ(at, n);
  }
}

TEST(PartitionTest, EveryRankKeepsASampleWhileTheBatchHasOneForEach) {
  // A rank 1000x slower than the others would get nothing by proportion; it
  // keeps one sample (from the largest slice), so its throughput is still
  // measured and it can win work back.
  std::vector<Slice> s = SplitBatch({0, 32}, {1000.0, 1.0, 1000.0});
  EXPECT_EQ(s[0].size(), 15);
  EXPECT_EQ(s[1].size(), 1);
  EXPECT_EQ(s[2].size(), 16);
  s = SplitBatch({0, 3}, {1e6, 1.0, 1.0});
  for (const Slice& x : s) EXPECT_EQ(x.size(), 1);
  // Fewer samples than ranks: the smallest weights go without.
  s = SplitBatch({0, 2}, {1.0, 1e-3, 1.0});
  EXPECT_EQ(s[0].size(), 1);
  EXPECT_EQ(s[1].size(), 0);
  EXPECT_EQ(s[2].size(), 1);
}

TEST(PartitionTest, WeightsFromThroughputFillsUnknownAndIgnoresNoise) {
  EXPECT_EQ(WeightsFromThroughput({0, 0, 0}), (std::vector<double>{1, 1, 1}));
  EXPECT_EQ(WeightsFromThroughput({1000, 1050, 980}), (std::vector<double>{1, 1, 1}));
  EXPECT_EQ(WeightsFromThroughput({1000, 0, 3000}), (std::vector<double>{1000, 2000, 3000}));
}

}  // namespace
}  // namespace spot::train
