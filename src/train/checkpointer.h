// The one checkpoint writer of a training run, shared by the single-process
// Trainer and the writer (rank 0) of an elastic generation:
//   - when to save: checkpoint.interval (Young/Daly capped by the measured
//     overhead, or every N steps), ckpt::SaveDue;
//   - what a version holds: the TrainState records and metadata (epoch,
//     position, accuracy, loss, rollbacks), snapshotted and written in the
//     background by ckpt::AsyncSaver;
//   - resuming from the newest valid version, refusing another job's;
//   - rolling back past a diverged loss (the anomaly guard's remedy): restore
//     an earlier version, skip the batches that diverged, scale the learning
//     rate, and record the event in <output_dir>/events.jsonl.
//
// This header is LibTorch-free (the state is passed by reference).
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "ckpt/async_saver.h"
#include "core/status.h"
#include "train/train_spec.h"

namespace spot::train {

struct TrainRefs;

// One automatic rollback.
struct RollbackEvent {
  int64_t at_step = 0;  // the step whose loss diverged
  int64_t batch = 0;    // its global batch number (skipped from now on)
  std::string reason;   // "loss is nan", "loss spike: 7.1 > 5 x 0.42"
  int64_t restored_version = 0;
  int64_t restored_step = 0;
  double lr_scale = 1;  // multiplier in force afterwards
};

// What a resume found.
struct ResumeInfo {
  int64_t version = -1;  // -1: nothing to resume from (fresh start)
  int64_t step = -1;
  std::string tier;  // local | durable
};

class Checkpointer {
 public:
  using Clock = std::chrono::steady_clock;

  // Opens (creating) the spec's checkpoint store.
  static Result<std::unique_ptr<Checkpointer>> Open(const TrainSpec& spec);
  ~Checkpointer();

  // True when a save is due after `step` (and `step` is not saved yet).
  bool Due(int64_t step) const;
  // Snapshots `state` and submits it for writing (waits for the write too
  // when checkpoint.async is false). `test_loss` goes into the metadata when
  // known at this step. Returns the seconds training was blocked.
  Result<double> Save(const TrainRefs& state, std::optional<double> test_loss = std::nullopt);
  // A training step of `seconds`; `during_save` when a write was pending at
  // its start or end (the interval policy's overhead measurement).
  void RecordStep(double seconds, bool during_save);
  bool busy() const;
  // Waits for pending writes (to the durable tier too), until `deadline` if given.
  Status Flush(std::optional<Clock::time_point> deadline = std::nullopt);
  std::vector<ckpt::SaveReport> TakeCompleted();

  // Restores the newest valid version into `state` (spec.resume: auto).
  // FailedPrecondition for a checkpoint of another job (model, batch size or
  // seed differ). Keeps the counters' threads and BLAS of this process.
  // The parameters and buffers are decoded straight into the model's tensors
  // (built-in models and the GPT; a TorchScript model's by copy). When no
  // version loads, the model holds the weights a fresh start gives it (the
  // spec's seed, BuildModel), bitwise, and the CPU generator is where it was.
  // REQUIRES: state.model was built as a fresh start builds it (seeded by
  // PrepareProcess, then BuildModel) and not trained yet.
  Result<ResumeInfo> Resume(const TrainRefs& state);
  // The anomaly guard's remedy for the step after `state.counters->step`,
  // whose global batch `batch` diverged for `reason`: restores the newest
  // version before it (before the version restored last time, when it
  // diverges again before passing that step), skips rollback.skip_batches
  // batches from `batch`, scales the learning rate by rollback.lr_factor.
  // DataLoss when rollback is off, max_rollbacks are used up, or nothing
  // earlier exists: the run cannot go on.
  Result<RollbackEvent> Rollback(const TrainRefs& state, int64_t batch, const std::string& reason);

  int64_t last_saved_step() const { return last_saved_step_; }
  // Interval policy (checkpoint.interval: auto) figures; 0 without one.
  double MeasuredOverhead() const;
  double IntervalSeconds() const;
  bool has_interval() const;

 private:
  struct Impl;
  explicit Checkpointer(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
  int64_t last_saved_step_ = -1;
};

// Whether the training may go on after a diverged loss at all (rollback on and
// not used up): every replica can tell from the shared counters alone.
// DataLoss naming `reason` and the step otherwise.
Status RollbackAllowed(const RollbackSpec& rollback, int64_t rollbacks_so_far,
                       const std::string& reason, int64_t at_step);

}  // namespace spot::train
