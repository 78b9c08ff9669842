// Data under elasticity. Every epoch has one global sample order
// (train::EpochOrder of seed and epoch); global batch k of an epoch is the
// positions [k*B, min(n, (k+1)*B)) of that order, whatever the world size. A
// step splits its global batch among the current workers by their shares, so
// when the world changes mid-epoch the next step simply splits the next
// global batch among the new workers: no sample is skipped or seen twice, and
// the mathematics of a step (the SUM of share-weighted gradients) does not
// depend on the world size up to the order of floating-point reduction.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace spot::train {

struct Slice {
  int64_t begin = 0;  // positions in the epoch's order, [begin, end)
  int64_t end = 0;
  int64_t size() const { return end - begin; }
};

// The positions global batch `k` covers in an epoch of `n` samples.
Slice GlobalBatch(int64_t k, int64_t batch_size, int64_t n);

// Splits `batch` into contiguous slices in rank order, sized in proportion to
// `weights` (each > 0) by the largest-remainder method; ties go to the lower
// rank. Equal weights give sizes that differ by at most one, the extras to the
// first ranks. Every slice holds at least one sample when the batch has one
// for each rank (a rank of tiny weight takes one from the largest slice); a
// slice may be empty only when the batch is smaller than the world.
std::vector<Slice> SplitBatch(Slice batch, const std::vector<double>& weights);

// Weights from measured throughputs (samples/s): unknown (<= 0) entries count
// as the mean of the known ones; all unknown gives equal weights. Throughputs
// within `tolerance` (relative) of each other count as equal, so noise in the
// measurement does not reshuffle the split of equal workers.
std::vector<double> WeightsFromThroughput(const std::vector<double>& samples_per_s,
                                          double tolerance = 0.1);

// Data held in shards by the replicas (dataset.cache.hold: own): the shards
// are dealt into slots (SlotOrder, sampler.h), and each slot has one owner
// among the members of a generation, by rendezvous (highest-random-weight)
// hashing with bounded loads (Thaler and Ravishankar 1998; Mirrokni, Thorup
// and Zadimoghaddam 2018): slot j goes to the member whose id scores highest
// for j (XXH3-64 of the id seeded by j) among those holding fewer than
// ceil(slots / members) slots, slots taken in order. Every member computes
// the same owners from the same ids, whatever their order; no member holds
// more than ceil(slots / members) (the least possible largest share, which a
// step waits for); a member leaving or joining moves its share of the slots
// and, through the bound, a few more (measured by
// `spot_bench --workloads images`).

// The slots of a data set of `shards` shards trained in batches of
// `batch_size` samples: min(shards, batch_size), at least 1, so every batch
// holds a sample of every slot.
int64_t ShardSlots(int64_t shards, int64_t batch_size);
// The owner of every slot, as an index into `members`. REQUIRES: members not
// empty, ids distinct.
std::vector<int32_t> SlotOwners(int64_t slots, const std::vector<std::string>& members);
// The owner of every shard: that of its slot (s mod slots).
std::vector<int32_t> ShardOwners(int64_t shards, int64_t slots,
                                 const std::vector<std::string>& members);

// Reorders the samples of each global batch of `order` (positions
// [k*B, min(n, (k+1)*B)), B = batch_size) by the owner of their shard
// (sample / shard_size), lowest owner first, keeping the epoch's order among
// one owner's samples. SplitBatch's contiguous slices in rank order then give
// each rank mostly samples of shards it holds. A batch keeps its samples, so
// every sample is still trained on once per epoch. `owners` is indexed by
// shard (ShardOwners); REQUIRES: it covers every sample's shard.
void ArrangeByOwner(std::vector<int64_t>& order, int64_t batch_size, int64_t shard_size,
                    const std::vector<int32_t>& owners);

}  // namespace spot::train
