// spot_bench's `ckpt` workload: the cost of one checkpoint save and load of
// the CNN + Adam training state, ours (CaptureTrainState + CheckpointStore,
// crash-safe) against torch::save / torch::load of the same model and optimizer.
// LibTorch-free header.
#pragma once

#include <cstdint>
#include <string>

#include "core/status.h"

namespace spot::bench {

struct CkptBenchOptions {
  int reps = 20;    // timed saves and loads per method; the median is reported
  int threads = 2;  // intra-op threads (the training steps before timing)
  int64_t seed = 1;
  std::string work_dir;       // checkpoint files go under it
  double quiet_cores = 0.25;  // first wait until other processes use fewer cores than this ...
  double quiet_wait_s = 120;  // ... or this long has passed
};

// Returns the report (Markdown table and method) or the first failure.
Result<std::string> RunCkptWorkload(const CkptBenchOptions& options);

}  // namespace spot::bench
