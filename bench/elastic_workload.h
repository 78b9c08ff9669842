// spot_bench's `elastic` workload: elastic data-parallel training with real
// `spot` worker processes against torchrun (python3-torch's elastic launcher,
// bench/torchrun_worker.py) on the same MLP, data and machine, in one run:
//   recovery: SIGKILL of one of 3 workers -> next step completed by the others
//   join:     a new worker process started -> first step it took part in
//   steps/s:  1, 2 and 4 workers
//   compression: gradient bytes per step and test accuracy per choice.
// LibTorch-free header.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/status.h"

namespace spot::bench {

struct ElasticBenchOptions {
  std::string spot_bin;                      // the `spot` binary
  std::string python = "/usr/bin/python3";   // Debian's, which has python3-torch
  std::string script;                        // bench/torchrun_worker.py
  std::string dataset_path = "/usr/share/datasets/fashion-mnist";
  std::string work_dir;
  int repeats = 3;                  // kills and joins per side; the median is reported
  // Kill / join once the job has passed this step: halfway between torchrun's
  // checkpoints (every 50 steps), where a preemption lands on average.
  int64_t kill_after_step = 175;
  std::vector<int> worlds = {1, 2, 4};
  int64_t throughput_steps = 600;   // steps per throughput run
  std::vector<std::string> compressions = {"none", "fp16", "bf16", "powersgd", "topk"};
  int64_t accuracy_epochs = 3;      // compression runs: 2 workers, full data set
};

// Returns the report (Markdown tables, raw numbers, method). Fails when a run
// fails; a missed goal is a result.
Result<std::string> RunElasticWorkload(const ElasticBenchOptions& options);

}  // namespace spot::bench
