#include "train/sampler.h"

#include <algorithm>
#include <cstddef>
#include <map>
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

}  // namespace spot::train
