// spot_bench's `ckpt` workload: what checkpointing costs a training job, on
// two training states, each after a few real Adam steps on Fashion-MNIST:
//   cnn     the Fashion-MNIST CNN (train::MakeModel("cnn"), 421,738 parameters) + Adam
//   mlp50m  an MLP 784 -> 4096 -> 4096 -> 4096 -> 4096 -> 10 defined in the bench
//           (53,600,266 parameters, ~643 MB of f32 state with Adam's moments) + Adam
// Six measurements, each against an anchor measured in the same run:
//   1. blocking time of an asynchronous save (AsyncSaver Acquire + Recycle +
//      CaptureTrainState + Submit, steady state) vs a memcpy of the same
//      tensors into preallocated buffers; torch::save for reference
//   2. training throughput with no checkpointing vs the trainer's default
//      policy (AsyncSaver, sub-delta, full_every 8, IntervalPolicy with default
//      IntervalOptions) and vs a save every few seconds
//   3. bytes per save: raw, shuffle-zstd, planes-zstd, xor-delta, sub-delta
//      (1 and 10 steps, and 1 step later in training), q8-delta, torch::save's
//      files
//   4. single-thread codec throughput (ChunkCodec, per chunk)
//   5. restore time (LoadNewestValid + RestoreTrainState) of a full version
//      and of a delta at chain depth 3 vs torch::load; then a restart in a
//      new process (this binary started per rep, for ours and for
//      torch::load), as a job pays after a preemption
//   6. a restart with no survivor (the local tier lost) from the durable
//      tier, with durable copies written in full past durable_max_chain
//      (no limit, 1, 0): replication cost per version, restore time and the
//      chain depth it decodes vs torch::load (ckpt_durable.h)
// Every restore and decode is checked against what was saved.
// LibTorch-free header.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/status.h"

namespace spot::bench {

struct CkptBenchOptions {
  std::vector<std::string> states = {"cnn", "mlp50m"};
  int warmup_steps = 3;     // Adam steps before anything is measured
  int saves = 5;            // 1: timed saves per method (after 2 warm-up saves)
  int runs = 3;             // 2: training runs per arm (plain, default policy, aggressive)
  int64_t cnn_steps = 300;  // 2: steps per training run, CNN
  int64_t mlp_steps = 12;   // 2: steps per training run, 50M MLP (~0.5-0.8 s each on 2 cores)
  double aggressive_interval_s = 2;  // 2: the forced interval, CNN
  double mlp_aggressive_interval_s =
      5;                      // 2: the forced interval, 50M MLP (a write takes longer than 2 s)
  int restores = 3;           // 5, 6: timed restores per method
  bool restore_only = false;  // measure 5 and 6 alone (no training runs)
  int64_t batch = 64;
  int threads = 2;  // intra-op threads
  int64_t seed = 1;
  std::string dataset_path = "/usr/share/datasets/fashion-mnist";
  std::string work_dir;       // checkpoint and torch::save files go under it
  double quiet_cores = 0.25;  // before each state, wait until other processes use fewer
  double quiet_wait_s = 10;   // cores than this, or this long has passed
  // Internal: this process is a restart child of sections 5 and 6 (a
  // restart in a new process). It builds the state's model and optimizer
  // (untimed), restores into them (timed) and writes the seconds and the
  // state's fingerprint to restart_out.
  std::string restart_child;        // "ours" or "torch"; "" when not a child
  std::string restart_dir;          // ours: the store's local tier; torch: torch::save's files
  int64_t restart_before_step = 0;  // ours: LoadNewestValid(before_step)
  std::string restart_durable_dir;  // ours: the store's durable tier ("" for none)
  int restart_durable_max_chain = 1;
  std::string restart_out;
};

// Returns the report (Markdown tables and method) or the first failure,
// including a restore or decode that does not give back what was saved.
Result<std::string> RunCkptWorkload(const CkptBenchOptions& options);

// The child's side of a restart in a new process (sections 5 and 6;
// restart_child set; states holds the one state). OK only when it wrote
// restart_out.
Status RunCkptRestartChild(const CkptBenchOptions& options);

}  // namespace spot::bench
