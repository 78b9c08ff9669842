// Deterministic data order: the permutation of an epoch is a pure function of
// (seed, epoch, n), the same on every machine and in every run, so a resumed
// job sees exactly the samples the uninterrupted one would have.
#pragma once

#include <cstdint>
#include <vector>

namespace spot::train {

// A permutation of 0..n-1 (Fisher-Yates driven by SplitMix64 seeded from
// seed and epoch; unbiased bounded draws by rejection).
std::vector<int64_t> EpochOrder(uint64_t seed, int64_t epoch, int64_t n);

}  // namespace spot::train
