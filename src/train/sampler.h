// Deterministic data order: the permutation of an epoch is a pure function of
// (seed, epoch, n), the same on every machine and in every run, so a resumed
// job sees exactly the samples the uninterrupted one would have.
#pragma once

#include <cstdint>
#include <vector>

namespace spot::train {

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
  // Uniform in [0, bound) without modulo bias. REQUIRES: bound > 0.
  uint64_t Below(uint64_t bound) {
    uint64_t limit = UINT64_MAX - UINT64_MAX % bound;
    uint64_t x;
    do x = Next();
    while (x >= limit);
    return x % bound;
  }
  // Uniform in [0, 1), 53 bits.
  double Uniform() { return static_cast<double>(Next() >> 11) * 0x1.0p-53; }

 private:
  uint64_t s_;
};

// A permutation of 0..n-1 (Fisher-Yates driven by SplitMix64 seeded from
// seed and epoch; unbiased bounded draws by rejection).
std::vector<int64_t> EpochOrder(uint64_t seed, int64_t epoch, int64_t n);

// dataset.sampling for class labels `labels` (>= 0), n = labels.size() slots:
//   stratified: a permutation of 0..n-1 in which every class is spread
//     evenly, so any run of consecutive positions (a batch) holds the classes
//     in about the data set's proportions;
//   balanced: each class gets an equal share of the n slots (the classes of
//     a minority repeat their samples, each reshuffled on every pass; those
//     of a majority are subsampled), spread evenly: the remedy for
//     imbalanced data.
// Each class's own order is EpochOrder's for (seed, epoch, class).
std::vector<int64_t> ClassOrder(uint64_t seed, int64_t epoch, const std::vector<int64_t>& labels,
                                bool balanced);

// The order of an epoch whose samples are held in shards by the replicas
// (dataset.cache.hold: own). The data set's shards of `shard_size` samples
// (rows in file order) are dealt into `slots` slots (shard s into slot
// s mod slots); each slot's samples are shuffled (EpochOrder of a seed drawn
// from seed and slot, and epoch) and spread evenly over the epoch: slot j's
// i-th sample of n_j goes at fraction (2i + 1) / (2 n_j), ties to the lower
// slot (slots of one size deal round robin). Any B consecutive positions
// then hold about B * n_j / n samples of slot j (within one), so a replica
// that owns some slots (train::ShardOwners) gets about their share of every
// batch, whatever the draw, to the epoch's end. The order depends on neither
// the world nor the members. REQUIRES: shard_size >= 1, slots >= 1.
std::vector<int64_t> SlotOrder(uint64_t seed, int64_t epoch, int64_t n, int64_t shard_size,
                               int64_t slots);

}  // namespace spot::train
