// Straggler detection for an elastic group. In synchronous data parallelism
// every rank waits for the slowest at each all-reduce, so one slow machine
// (a noisy neighbour, a throttled GPU, a failing disk) slows the whole gang.
// The group shares each rank's compute throughput (samples per second of
// forward and backward) at every step; a rank whose throughput stays below
// 1/factor of the median of the others' for `seconds` without a break is a
// straggler (with two workers, the other's).
// (Balancing, distributed.balance, gives it a smaller share of the batch; its
// throughput per sample stays low, so it is still seen.)
#pragma once

#include <set>
#include <vector>

namespace spot::dist {

struct StragglerOptions {
  double factor = 2;    // slower than the median by this factor (> 1)
  double seconds = 30;  // for this long without a break (>= 0)
};

class StragglerWatch {
 public:
  explicit StragglerWatch(StragglerOptions options) : opt_(options) {}
  // The ranks' throughputs at `now_s` (rank order; 0 = unknown). Returns the
  // ranks that have just become stragglers (each once, until it recovers).
  std::vector<int> Observe(double now_s, const std::vector<double>& rates);
  // A new generation: ranks mean other workers now.
  void Reset();
  const std::set<int>& stragglers() const { return flagged_; }
  // The median of all known throughputs at the last Observe (0: none).
  double median() const { return median_; }

 private:
  StragglerOptions opt_;
  std::vector<double> slow_since_;  // per rank; < 0: not slow
  std::set<int> flagged_;
  double median_ = 0;
};

}  // namespace spot::dist
