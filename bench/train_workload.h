// spot_bench's `train` workload: training throughput of the C++ Trainer against
// the same CNN and data pipeline in Python PyTorch (bench/train_bench.py), run
// one after the other (never concurrently) and alternating, so the ratio comes
// from one run on one machine. LibTorch-free header.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/status.h"

namespace spot::bench {

struct TrainBenchOptions {
  std::vector<int64_t> batch_sizes = {64, 256};
  int64_t samples = 7680;    // timed samples per run; steps = samples / batch (>= 1)
  int64_t steps = 0;         // when > 0: timed steps per run at every batch size instead
  int64_t warmup_steps = 5;  // untimed steps before the timed ones, on both sides
  int repeats = 3;           // runs per side and batch size; the median is reported
  int threads = 2;           // intra-op threads on both sides
  int64_t seed = 1;
  double lr = 1e-3;  // Adam
  std::string dataset_path = "/usr/share/datasets/fashion-mnist";
  std::string python = "/usr/bin/python3";  // Debian's, which has python3-torch
  std::string script;                       // bench/train_bench.py
  std::string module;  // a TorchScript module both sides train instead of the CNN ("" = the CNN)
  std::vector<std::string> python_env;      // VAR=VALUE pairs set for the Python runs only
  std::string work_dir;                     // trainer outputs (deleted after each run)
  double quiet_cores = 0.25;  // before each run, wait until others use fewer cores than
  double quiet_wait_s = 120;  // this (or this long); a disturbed run is redone, 3 tries
};

// Runs every batch size and returns the report (Markdown: a table, the raw
// numbers and the method). Fails when a run fails; a missed goal is a result.
Result<std::string> RunTrainWorkload(const TrainBenchOptions& options);

}  // namespace spot::bench
