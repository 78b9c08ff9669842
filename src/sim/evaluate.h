// Evaluation of policies over many sampled job starts of one market (one
// zone, or several zones as one multi-zone market).
#pragma once

#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <vector>

#include "core/status.h"
#include "market/trace.h"
#include "policy/registry.h"
#include "sim/spot_sim.h"

namespace spot::sim {

struct PolicyStats {
  std::string policy;
  int samples = 0;
  double mean_cost = 0;
  double p50_cost = 0;  // linear interpolation between order statistics
  double p95_cost = 0;
  int deadline_misses = 0;
  double mean_spot_hours = 0;
  double mean_od_hours = 0;
  double seconds = 0;           // wall time of the evaluation
  std::vector<RunResult> runs;  // one per sample, in start order (no timelines)
};

// Called after each sample with (samples done, samples in all).
using EvalProgressFn = std::function<void(int done, int total)>;

// Simulation threads for a request of `threads` (0: one per core, at most 8:
// each thread holds its own policy instances, the omniscient DP's table up to
// 1 GiB while it solves).
int SimulationThreads(int threads);

// Calls run(share, item) for every item in [0, items), split in `shares`
// contiguous shares in item order, each share on a thread of its own (share
// 0 on the caller's; a share whose thread cannot be started runs on the
// caller's after it). Returns when all have run.
void RunInShares(size_t items, size_t shares, const std::function<void(size_t, size_t)>& run);

// Runs policy `name` (fresh from `registry`) on `samples` starts of `zones`,
// on `threads` threads (SimulationThreads), each with its own instance of the
// policy: policies start every job afresh, so the figures do not depend on
// the threads. `progress` is called from one thread at a time.
// InvalidArgument for a bad market or job, NotFound for an unknown policy.
Result<PolicyStats> EvaluatePolicy(const policy::PolicyRegistry& registry, const std::string& name,
                                   std::span<const market::Trace* const> zones, const JobSpec& job,
                                   int samples, const EvalProgressFn& progress = nullptr,
                                   int threads = 1);

// Quantile q in [0, 1] of `values` (copied and sorted; 0 when empty).
double Quantile(std::vector<double> values, double q);

}  // namespace spot::sim
