#include "train/partition.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <numeric>
#include <random>
#include <set>
#include <string>

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
      if (n >= w) {
        EXPECT_GE(parts[r].size(), 1);
      }
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

// Rendezvous hashing: a leaving member's shards, and only those, move; a
// joining member takes shards only for itself; ownership is about even and
// does not depend on the order of the members.
TEST(PartitionTest, ShardOwnersMoveOnlyTheShardsOfTheMemberThatChanged) {
  const int64_t shards = 4000;
  const std::vector<std::string> abc = {"a", "b", "c"}, ac = {"a", "c"},
                                 abcd = {"a", "b", "c", "d"}, cab = {"c", "a", "b"};
  const std::vector<int32_t> three = ShardOwners(shards, abc);
  std::vector<int64_t> count(3, 0);
  for (int32_t o : three) ++count[o];
  for (int64_t c : count) EXPECT_NEAR(c, shards / 3, shards / 20);  // within 5% of even

  const std::vector<int32_t> left = ShardOwners(shards, ac);  // b left
  const std::vector<int32_t> joined = ShardOwners(shards, abcd);
  const std::vector<int32_t> shuffled = ShardOwners(shards, cab);
  int64_t moved_left = 0, moved_joined = 0;
  for (int64_t s = 0; s < shards; ++s) {
    const std::string before = abc[three[s]];
    EXPECT_EQ(cab[shuffled[s]], before) << "shard " << s;
    if (ac[left[s]] != before) {
      ++moved_left;
      EXPECT_EQ(before, "b") << "shard " << s << " moved though its owner stayed";
    }
    if (abcd[joined[s]] != before) {
      ++moved_joined;
      EXPECT_EQ(abcd[joined[s]], "d") << "shard " << s << " moved between the old members";
    }
  }
  EXPECT_EQ(moved_left, count[1]);
  EXPECT_NEAR(moved_joined, shards / 4, shards / 20);
  EXPECT_EQ(ShardOwners(shards, {"solo"}), std::vector<int32_t>(shards, 0));
  EXPECT_TRUE(ShardOwners(0, abc).empty());
}

// Arranging keeps each batch's samples (every sample once per epoch), orders
// them by owner, stably, and lets each rank's slice hold mostly its own.
TEST(PartitionTest, ArrangeByOwnerKeepsEveryBatchAndGroupsItsSamplesByOwner) {
  const int64_t n = 1003, b = 64, shard = 10;
  std::vector<int64_t> order(n);
  std::iota(order.begin(), order.end(), 0);
  std::shuffle(order.begin(), order.end(), std::mt19937(7));
  const std::vector<std::string> members = {"w0", "w1", "w2"};
  const std::vector<int32_t> owners = ShardOwners((n + shard - 1) / shard, members);
  std::vector<int64_t> arranged = order;
  ArrangeByOwner(arranged, b, shard, owners);
  int64_t own = 0, total = 0;
  for (int64_t k = 0; k * b < n; ++k) {
    const Slice batch = GlobalBatch(k, b, n);
    std::multiset<int64_t> was(order.begin() + batch.begin, order.begin() + batch.end);
    std::multiset<int64_t> is(arranged.begin() + batch.begin, arranged.begin() + batch.end);
    ASSERT_EQ(was, is) << "batch " << k;
    for (int64_t p = batch.begin + 1; p < batch.end; ++p) {
      const int32_t o0 = owners[arranged[p - 1] / shard], o1 = owners[arranged[p] / shard];
      ASSERT_LE(o0, o1) << "batch " << k << " position " << p;
      if (o0 == o1) {  // stable: the epoch's order among one owner's samples
        auto at = [&](int64_t sample) {
          return std::find(order.begin() + batch.begin, order.begin() + batch.end, sample) -
                 order.begin();
        };
        ASSERT_LT(at(arranged[p - 1]), at(arranged[p])) << "batch " << k;
      }
    }
    const std::vector<Slice> parts = SplitBatch(batch, std::vector<double>(3, 1.0));
    for (int r = 0; r < 3; ++r) {
      for (int64_t p = parts[r].begin; p < parts[r].end; ++p) {
        own += owners[arranged[p] / shard] == r;
        ++total;
      }
    }
  }
  EXPECT_EQ(total, n);
  // Unarranged, a rank's slice holds its own shards' samples a third of the
  // time; arranged, most of the time (the rest: owners' counts differ from
  // the slices' sizes in a batch).
  EXPECT_GT(static_cast<double>(own) / static_cast<double>(total), 0.8);
}

}  // namespace
}  // namespace spot::train
