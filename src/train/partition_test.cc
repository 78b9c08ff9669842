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

// Rendezvous hashing with bounded loads: no member holds more than
// ceil(slots / members), the owners do not depend on the members' order, and
// a member leaving or joining moves its share and only a few slots more.
TEST(PartitionTest, SlotOwnersAreBalancedAndMoveLittleWhenAMemberLeavesOrJoins) {
  for (int64_t slots : {16, 64, 256, 1024}) {
    for (int w = 1; w <= 8; ++w) {
      std::vector<std::string> ids, shuffled;
      for (int i = 0; i < w; ++i) ids.push_back("worker-" + std::to_string(i));
      shuffled = ids;
      std::shuffle(shuffled.begin(), shuffled.end(), std::mt19937(w));
      const std::vector<int32_t> owners = SlotOwners(slots, ids);
      const std::vector<int32_t> again = SlotOwners(slots, shuffled);
      std::vector<int64_t> count(w, 0);
      for (int64_t s = 0; s < slots; ++s) {
        ++count[owners[s]];
        ASSERT_EQ(ids[owners[s]], shuffled[again[s]]) << slots << " slots, slot " << s;
      }
      // The largest share, which a step waits for, is the least possible.
      EXPECT_EQ(*std::max_element(count.begin(), count.end()), (slots + w - 1) / w)
          << slots << " slots, " << w << " members";
      std::vector<std::string> joined = ids;
      joined.push_back("newcomer");
      const std::vector<int32_t> after_join = SlotOwners(slots, joined);
      int64_t moved_join = 0, to_newcomer = 0;
      for (int64_t s = 0; s < slots; ++s) {
        moved_join += joined[after_join[s]] != ids[owners[s]];
        to_newcomer += joined[after_join[s]] == "newcomer";
      }
      EXPECT_GE(moved_join, to_newcomer);
      // Measured bound: at most twice a share, and two more.
      EXPECT_LE(moved_join, 2 * ((slots + w) / (w + 1)) + 2)
          << slots << " slots, " << w << " members";
      if (w == 1) continue;
      const std::vector<std::string> left(ids.begin(), ids.end() - 1);
      const std::vector<int32_t> after_leave = SlotOwners(slots, left);
      int64_t moved_leave = 0;
      for (int64_t s = 0; s < slots; ++s) moved_leave += left[after_leave[s]] != ids[owners[s]];
      EXPECT_GE(moved_leave, count[w - 1]);
      EXPECT_LE(moved_leave, 2 * ((slots + w - 1) / w) + 2)
          << slots << " slots, " << w << " members";
    }
  }
  EXPECT_EQ(SlotOwners(5, {"solo"}), std::vector<int32_t>(5, 0));
  EXPECT_EQ(ShardSlots(18, 16), 16);
  EXPECT_EQ(ShardSlots(3, 16), 3);
  EXPECT_EQ(ShardSlots(0, 16), 1);
  const std::vector<int32_t> by_slot = SlotOwners(4, {"a", "b"});
  const std::vector<int32_t> by_shard = ShardOwners(10, 4, {"a", "b"});
  for (int64_t s = 0; s < 10; ++s) EXPECT_EQ(by_shard[s], by_slot[s % 4]) << "shard " << s;
}

// Arranging keeps each batch's samples (every sample once per epoch), orders
// them by owner, stably, and lets each rank's slice hold mostly its own.
TEST(PartitionTest, ArrangeByOwnerKeepsEveryBatchAndGroupsItsSamplesByOwner) {
  const int64_t n = 1003, b = 64, shard = 10;
  std::vector<int64_t> order(n);
  std::iota(order.begin(), order.end(), 0);
  std::shuffle(order.begin(), order.end(), std::mt19937(7));
  const std::vector<std::string> members = {"w0", "w1", "w2"};
  const std::vector<int32_t> owners = ShardOwners((n + shard - 1) / shard, 16, members);
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
