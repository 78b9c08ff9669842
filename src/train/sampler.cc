#include "train/sampler.h"

#include <cstddef>
#include <utility>

namespace spot::train {
namespace {

// SplitMix64 (Steele, Lea, Flood 2014): a fixed, portable generator.
class SplitMix64 {
 public:
  explicit SplitMix64(uint64_t seed) : s_(seed) {}
  uint64_t Next() {
    uint64_t z = (s_ += 0x9E3779B97F4A7C15ULL);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
    return z ^ (z >> 31);
  }
  // Uniform in [0, bound) without modulo bias.
  uint64_t Below(uint64_t bound) {
    uint64_t limit = UINT64_MAX - UINT64_MAX % bound;
    uint64_t x;
    do x = Next();
    while (x >= limit);
    return x % bound;
  }

 private:
  uint64_t s_;
};

}  // namespace

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

}  // namespace spot::train
