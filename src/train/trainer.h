// Trainer: runs one TrainSpec to completion on this process. Deterministic:
// the same spec, thread count and BLAS give bitwise the same losses and
// parameters, whether or not the run was killed and resumed from a checkpoint.
//
// This header is LibTorch-free (pimpl), so the CLI and other layers can hold a
// Trainer without parsing LibTorch's headers.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "core/status.h"
#include "train/checkpointer.h"
#include "train/train_spec.h"

namespace spot::train {

struct TrainOptions {
  std::string step_log_path;  // when set, appends "step,epoch,loss,lr" per step (core/job_files.h)
  bool plain_progress = false;  // periodic log lines even on a terminal
  double log_interval_s = 10;   // seconds between plain progress lines
  // Install handlers: SIGUSR1 saves a checkpoint now; SIGTERM and SIGINT save
  // one, wait up to checkpoint.flush_deadline_s for it to be written and
  // replicated, and stop (TrainSummary::stopped_by_signal).
  bool handle_signals = false;
};

struct EpochResult {
  int64_t epoch = 0;         // 0-based
  int64_t step = 0;          // optimizer steps completed at its end
  double test_accuracy = 0;  // fraction in [0, 1]
  double test_loss = 0;
};

struct TrainSummary {
  int64_t steps = 0;               // optimizer steps completed in all
  int64_t steps_this_run = 0;      // of which this process ran
  int64_t resumed_from_step = -1;  // -1 when it started fresh
  int64_t resumed_from_version = -1;
  std::vector<EpochResult> epochs;  // evaluations this process ran
  double test_accuracy = 0;         // after the last step
  double test_loss = 0;
  double train_samples_per_s = 0;  // training steps only (no eval, no checkpoint)
  double checkpoint_seconds = 0;   // time training waited for saves (snapshots), this run
  int64_t checkpoints_saved = 0;
  double checkpoint_write_seconds = 0;    // background encode + write time
  uint64_t checkpoint_bytes = 0;          // bytes written to the local tier
  uint64_t checkpoint_payload_bytes = 0;  // raw state bytes those saves held
  int64_t delta_checkpoints = 0;
  double checkpoint_overhead = 0;    // measured fraction of training time lost to saves
  double checkpoint_interval_s = 0;  // interval in force at the end (auto) or 0
  std::vector<RollbackEvent> rollbacks;
  int stopped_by_signal = 0;  // the signal that stopped training early, 0 if none
  int64_t last_checkpoint_version = -1;
  double wall_seconds = 0;
  std::string model_path;    // state dict for Python (torch.load)
  std::string summary_path;  // this summary as JSON
};

// The BLAS library serving libblas.so.3 ("openblas-openmp", ...; "unknown").
// Recorded in checkpoints: a bitwise resume needs the same one.
std::string BlasLibrary();

class Trainer {
 public:
  // Validates what the spec cannot check alone (loads the data set).
  static Result<std::unique_ptr<Trainer>> Create(const TrainSpec& spec, TrainOptions options);
  ~Trainer();

  // Trains to the spec's end, resuming from the newest valid checkpoint when
  // spec.resume is "auto". Writes the model and summary under output_dir.
  Result<TrainSummary> Run();

 private:
  struct Impl;
  explicit Trainer(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace spot::train
