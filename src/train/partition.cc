#include "train/partition.h"

#include <xxhash.h>

#include <algorithm>
#include <cmath>
#include <numeric>

namespace spot::train {

Slice GlobalBatch(int64_t k, int64_t batch_size, int64_t n) {
  int64_t begin = std::min(n, k * batch_size);
  return {begin, std::min(n, begin + batch_size)};
}

std::vector<Slice> SplitBatch(Slice batch, const std::vector<double>& weights) {
  const size_t w = weights.size();
  const double total = std::accumulate(weights.begin(), weights.end(), 0.0);
  const int64_t n = batch.size();
  std::vector<int64_t> sizes(w);
  std::vector<std::pair<double, size_t>> remainders(w);
  int64_t given = 0;
  for (size_t r = 0; r < w; ++r) {
    double exact = static_cast<double>(n) * weights[r] / total;
    sizes[r] = static_cast<int64_t>(std::floor(exact));
    given += sizes[r];
    remainders[r] = {exact - static_cast<double>(sizes[r]), r};
  }
  // Largest remainder first; equal remainders go to the lower rank.
  std::stable_sort(remainders.begin(), remainders.end(),
                   [](const auto& a, const auto& b) { return a.first > b.first; });
  for (size_t i = 0; given < n; ++i, ++given) ++sizes[remainders[i % w].second];
  // A member keeps at least one sample while the batch has one for each: a
  // rank given none would measure no throughput, keep its last (low) rate
  // and never get work again, however fast it became. The sample comes from
  // the largest slice (the lowest rank of equal ones).
  if (n >= static_cast<int64_t>(w)) {
    for (size_t r = 0; r < w; ++r) {
      if (sizes[r] > 0) continue;
      size_t donor =
          static_cast<size_t>(std::max_element(sizes.begin(), sizes.end()) - sizes.begin());
      --sizes[donor];
      ++sizes[r];
    }
  }
  std::vector<Slice> out(w);
  int64_t at = batch.begin;
  for (size_t r = 0; r < w; ++r) {
    out[r] = {at, at + sizes[r]};
    at += sizes[r];
  }
  return out;
}

std::vector<double> WeightsFromThroughput(const std::vector<double>& samples_per_s,
                                          double tolerance) {
  double known_sum = 0;
  int known = 0;
  for (double s : samples_per_s) {
    if (s > 0) known_sum += s, ++known;
  }
  std::vector<double> w(samples_per_s.size(), 1.0);
  if (known == 0) return w;
  const double mean = known_sum / known;
  double lo = mean, hi = mean;
  for (size_t i = 0; i < w.size(); ++i) {
    w[i] = samples_per_s[i] > 0 ? samples_per_s[i] : mean;
    lo = std::min(lo, w[i]);
    hi = std::max(hi, w[i]);
  }
  if (hi <= lo * (1 + tolerance)) std::fill(w.begin(), w.end(), 1.0);
  return w;
}

int64_t ShardSlots(int64_t shards, int64_t batch_size) {
  return std::max<int64_t>(1, std::min(shards, batch_size));
}

std::vector<int32_t> SlotOwners(int64_t slots, const std::vector<std::string>& members) {
  const auto w = static_cast<int64_t>(members.size());
  const int64_t cap = (slots + w - 1) / w;
  std::vector<int64_t> load(members.size(), 0);
  std::vector<int32_t> owners(static_cast<size_t>(std::max<int64_t>(0, slots)), 0);
  for (int64_t s = 0; s < slots; ++s) {
    int best = -1;
    uint64_t best_score = 0;
    for (size_t m = 0; m < members.size(); ++m) {
      if (load[m] >= cap) continue;
      const uint64_t score =
          XXH3_64bits_withSeed(members[m].data(), members[m].size(), static_cast<uint64_t>(s));
      // Ties (vanishingly rare) go to the smaller id, so the order of
      // `members` never matters.
      if (best < 0 || score > best_score ||
          (score == best_score && members[m] < members[static_cast<size_t>(best)])) {
        best = static_cast<int>(m);
        best_score = score;
      }
    }
    owners[static_cast<size_t>(s)] = best;
    ++load[static_cast<size_t>(best)];
  }
  return owners;
}

std::vector<int32_t> ShardOwners(int64_t shards, int64_t slots,
                                 const std::vector<std::string>& members) {
  const std::vector<int32_t> by_slot = SlotOwners(slots, members);
  std::vector<int32_t> owners(static_cast<size_t>(std::max<int64_t>(0, shards)));
  for (int64_t s = 0; s < shards; ++s) owners[s] = by_slot[static_cast<size_t>(s % slots)];
  return owners;
}

void ArrangeByOwner(std::vector<int64_t>& order, int64_t batch_size, int64_t shard_size,
                    const std::vector<int32_t>& owners) {
  const auto n = static_cast<int64_t>(order.size());
  auto owner = [&](int64_t sample) { return owners[static_cast<size_t>(sample / shard_size)]; };
  for (int64_t begin = 0; begin < n; begin += batch_size) {
    const int64_t end = std::min(n, begin + batch_size);
    std::stable_sort(order.begin() + begin, order.begin() + end,
                     [&](int64_t a, int64_t b) { return owner(a) < owner(b); });
  }
}

}  // namespace spot::train
