#include "train/sampler.h"

#include <algorithm>
#include <cstddef>
#include <map>
#include <queue>
#include <tuple>
#include <utility>

namespace spot::train {
std::vector<int64_t> EpochOrder(uint64_t seed, int64_t epoch, int64_t n) {
  std::vector<int64_t> order(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) order[static_cast<size_t>(i)] = i;
  SplitMix64 mix(seed);
  SplitMix64 rng(mix.Next() ^ (static_cast<uint64_t>(epoch) * 0xD1B54A32D192ED03ULL));
  for (int64_t i = n - 1; i > 0; --i) {
    auto j = static_cast<int64_t>(rng.Below(static_cast<uint64_t>(i) + 1));
    std::swap(order[static_cast<size_t>(i)], order[static_cast<size_t>(j)]);
  }
  return order;
}

std::vector<int64_t> ClassOrder(uint64_t seed, int64_t epoch, const std::vector<int64_t>& labels,
                                bool balanced) {
  std::map<int64_t, std::vector<int64_t>> members;  // class -> its samples, in data order
  for (size_t i = 0; i < labels.size(); ++i) members[labels[i]].push_back(static_cast<int64_t>(i));
  const auto n = static_cast<int64_t>(labels.size());
  const auto classes = static_cast<int64_t>(members.size());
  // (key, class rank, sample): sorting by key spreads each class evenly.
  std::vector<std::tuple<double, int64_t, int64_t>> slots;
  slots.reserve(labels.size());
  int64_t rank = 0;
  for (const auto& [label, samples] : members) {
    const auto size = static_cast<int64_t>(samples.size());
    const int64_t share = balanced ? n / classes + (rank < n % classes ? 1 : 0) : size;
    const uint64_t class_seed = seed ^ (static_cast<uint64_t>(label) * 0x9E3779B97F4A7C15ULL);
    std::vector<int64_t> order;
    for (int64_t s = 0; s < share; ++s) {
      if (s % size == 0) order = EpochOrder(class_seed, epoch * 1000003 + s / size, size);
      slots.emplace_back((static_cast<double>(s) + 0.5) / static_cast<double>(share), rank,
                         samples[order[s % size]]);
    }
    ++rank;
  }
  // Ties (equal keys) go to the classes in an order drawn for the epoch.
  const std::vector<int64_t> tie = EpochOrder(seed ^ 0x5851F42D4C957F2DULL, epoch, classes);
  std::sort(slots.begin(), slots.end(), [&](const auto& a, const auto& b) {
    return std::tie(std::get<0>(a), tie[std::get<1>(a)]) <
           std::tie(std::get<0>(b), tie[std::get<1>(b)]);
  });
  std::vector<int64_t> out;
  out.reserve(slots.size());
  for (const auto& slot : slots) out.push_back(std::get<2>(slot));
  return out;
}

std::vector<int64_t> SlotOrder(uint64_t seed, int64_t epoch, int64_t n, int64_t shard_size,
                               int64_t slots) {
  const int64_t shards = (n + shard_size - 1) / shard_size;
  std::vector<std::vector<int64_t>> slot(static_cast<size_t>(slots));
  for (int64_t s = 0; s < shards; ++s) {
    std::vector<int64_t>& rows = slot[static_cast<size_t>(s % slots)];
    for (int64_t i = s * shard_size; i < std::min(n, (s + 1) * shard_size); ++i) rows.push_back(i);
  }
  for (int64_t j = 0; j < slots; ++j) {
    std::vector<int64_t>& rows = slot[static_cast<size_t>(j)];
    SplitMix64 mix(seed ^ (static_cast<uint64_t>(j) * 0x9E3779B97F4A7C15ULL));
    const std::vector<int64_t> perm =
        EpochOrder(mix.Next(), epoch, static_cast<int64_t>(rows.size()));
    std::vector<int64_t> shuffled(rows.size());
    for (size_t i = 0; i < rows.size(); ++i) shuffled[i] = rows[static_cast<size_t>(perm[i])];
    rows = std::move(shuffled);
  }
  // Slot j's i-th sample goes at fraction (2i + 1) / (2 n_j) of the epoch:
  // merged by that key (compared exactly), ties to the lower slot.
  struct Next {
    int64_t slot, i, size;
    // a's key after b's: (2 a.i + 1) / a.size > (2 b.i + 1) / b.size
    bool operator<(const Next& b) const {
      const auto l = static_cast<__int128>(2 * i + 1) * b.size;
      const auto r = static_cast<__int128>(2 * b.i + 1) * size;
      return l != r ? l > r : slot > b.slot;
    }
  };
  std::priority_queue<Next> next;
  for (int64_t j = 0; j < slots; ++j) {
    const auto size = static_cast<int64_t>(slot[static_cast<size_t>(j)].size());
    if (size > 0) next.push({j, 0, size});
  }
  std::vector<int64_t> order;
  order.reserve(static_cast<size_t>(n));
  while (!next.empty()) {
    Next x = next.top();
    next.pop();
    order.push_back(slot[static_cast<size_t>(x.slot)][static_cast<size_t>(x.i)]);
    if (++x.i < x.size) next.push(x);
  }
  return order;
}

}  // namespace spot::train
