// The `sim` workload of spot_bench: how fast SpotSim evaluates policies.
// On the five zones of availability/aws-v100-2023-02 with p3.2xlarge prices
// (from ../shared/data; the built-in synthetic zones when absent): a full
// `eval` of od, greedy, up and hazard-up over S samples per zone (goal: under
// 1 s for S = 300), simulated runs per second per policy, and the omniscient
// DP on a few samples.
#pragma once

#include <string>

#include "core/status.h"

namespace spot::bench {

struct SimBenchOptions {
  std::string data_dir;          // the shared records (../shared/data)
  int samples = 300;             // starts per zone for the fast policies
  int omniscient_samples = 6;    // starts per zone for omniscient (~0.4 s a job)
};

// Returns the report (Markdown) or the error that stopped it.
Result<std::string> RunSimWorkload(const SimBenchOptions& options);

}  // namespace spot::bench
