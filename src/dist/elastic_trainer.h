// An elastic data-parallel worker (`spot worker`): joins its job's rendezvous,
// trains the job's model with the other current workers over a Gloo process
// group, and keeps going as workers are lost or arrive.
//
// Each generation: rendezvous -> Gloo group -> state sync (the member at the
// highest committed step broadcasts its state to the others, so joiners and
// members that fell a step behind end bitwise equal) -> synchronous steps.
// A step splits the next global batch among the members by their shares
// (partition.h), sums share-weighted gradients (compression.h), and commits
// only when its collectives succeeded. A collective that fails or times out
// abandons the step and re-forms the group from the survivors' in-memory
// state; only when no worker survives does the job resume from the newest
// checkpoint (rank 0 of a generation saves them).
//
// This header is LibTorch-free (the CLI holds it without parsing LibTorch).
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "core/status.h"
#include "train/train_spec.h"

namespace spot::dist {

// What a worker measured, handed to WorkerObserver callbacks on the training
// thread (keep them quick: they run between steps).
// One span of a step (data, forward, backward, sync, optimizer), for profiles.
struct PhaseTime {
  const char* phase = "";  // a static name
  std::chrono::steady_clock::time_point start;
  double seconds = 0;
};
// A layer group's gradient and update on a step (train::LayerGroupStats).
struct LayerStats {
  std::string group;
  double grad_norm = 0;
  double update_ratio = 0;  // ||update|| / ||weights||
};
struct StepStats {
  int64_t step = 0;   // the job's committed steps after this one
  int64_t epoch = 0;  // 0-based epoch the step belonged to
  int64_t generation = 0;
  int world = 0;
  int rank = 0;
  double loss = 0;  // mean training loss of the global batch
  double lr = 0;
  double grad_norm = 0;            // L2 norm of the reduced (global mean) gradient
  double step_seconds = 0;         // wall time of the whole step on this worker
  double compute_seconds = 0;      // forward and backward of this worker's part
  double collective_seconds = 0;   // the gradient and control all-reduces
  int64_t samples = 0;             // this worker's part of the batch
  int64_t batch = 0;               // the global batch
  std::vector<PhaseTime> phases;   // where this worker's step time went, in order
  std::vector<LayerStats> layers;  // rank 0, every 10th step: per layer group
  int stragglers = 0;              // rank 0: workers of the group flagged as stragglers
};
struct EvalStats {
  int64_t step = 0;
  int64_t epoch = 0;  // the epoch evaluated (0-based)
  bool partial = false;
  double test_accuracy = 0;
  double test_loss = 0;
  int rank = 0;
};
struct CheckpointStats {
  int64_t step = 0;
  double stall_seconds = 0;                     // training blocked for the snapshot
  std::chrono::steady_clock::time_point start;  // when the save began
};
struct CheckpointWritten {
  int64_t version = 0;
  uint64_t file_bytes = 0;   // written to the local tier
  double write_seconds = 0;  // encode + write on the background thread
};
struct WorkerObserver {
  std::function<void(const StepStats&)> on_step;
  std::function<void(const EvalStats&)> on_eval;
  std::function<void(const CheckpointStats&)> on_checkpoint;
  std::function<void(const CheckpointWritten&)> on_checkpoint_written;
};

struct WorkerOptions {
  std::string rendezvous;          // tcp://HOST:PORT | etcd://HOST:PORT[,HOST:PORT...] (required)
  std::string id;                  // unique per worker process; "" = <hostname>-<pid>-<random>
  std::string host = "127.0.0.1";  // address the other workers reach this one at
  // Per committed step, "step,epoch,loss,lr" (written by rank 0 of each generation).
  std::string step_log_path;
  // Per committed step and every worker in it:
  // "step,epoch,generation,world,rank,batch_begin,batch_end,begin,end" where
  // [batch_begin, batch_end) is the global batch's positions in the epoch's
  // order and [begin, end) this worker's part of it.
  std::string sample_log_path;
  // One JSON line per generation this worker was in (number, rank, world,
  // step, state hash after the sync, bytes broadcast, seconds to form).
  std::string event_log_path;
  bool plain_progress = false;
  double log_interval_s = 10;
  // SIGTERM/SIGINT: finish the current step, (rank 0) save a checkpoint, leave
  // the group so the others re-form at once, and stop.
  bool handle_signals = false;
  // Rank 0 rewrites this JSON file (atomically) about twice a second and at
  // the end: step, total_steps, epoch, loss, test_accuracy, world,
  // generation, restored_step (the checkpoint step it resumed from, -1 none),
  // done. A controller follows the training through it.
  std::string progress_path;
  // Test and benchmark hook: after each step's compute, sleep this multiple of
  // it (1.0 makes a worker half as fast), to emulate a slower machine.
  double slowdown = 0;
  // Measurements for metrics and event files (all optional).
  WorkerObserver observer;
};

struct WorkerSummary {
  int64_t steps = 0;            // committed steps of the job at the end
  int64_t steps_here = 0;       // of which this worker took part in
  int64_t generations = 0;      // generations this worker was in
  int64_t abandoned_steps = 0;  // steps dropped because a collective failed
  int64_t stragglers = 0;       // as rank 0: workers flagged as stragglers (dist/straggler.h)
  int final_rank = -1;
  int final_world = 0;
  double test_accuracy = -1;  // after the last step (-1: not evaluated here)
  double test_loss = -1;
  double samples_per_s = 0;  // this worker's compute rate
  uint64_t bytes_sent = 0;   // gradient payload handed to collectives
  uint64_t state_bytes_received = 0;
  // An image folder held in shards (dataset.cache.hold: own): the shards of
  // the samples trained on, those this worker held at the end, those it
  // loaded at the start of its generations (its own under the generation's
  // owners, train::ShardOwners) and those a batch asked for (other ranks',
  // only with distributed.balance; shards once held stay held).
  int64_t shards = 0;
  int64_t shards_held = 0;
  int64_t shards_loaded = 0;
  int64_t shards_on_demand = 0;
  int stopped_by_signal = 0;
  bool stopped_by_request = false;  // RequestWorkerStop (a termination notice)
  double stop_flush_seconds = -1;   // from the stop request to the flushed checkpoint (rank 0)
  double wall_seconds = 0;
};

// Asks the worker running in this process to stop as after SIGTERM (finish
// the step; rank 0 saves a checkpoint and flushes it, to the durable tier
// too, by `flush_deadline_unix_s`; leave the group so the others re-form),
// for a termination notice. Thread-safe; a no-op when no worker runs.
void RequestWorkerStop(double flush_deadline_unix_s);

// Runs until the job's steps/epochs are done (every worker returns), the
// rendezvous times out (DeadlineExceeded), or a signal stops this worker.
Result<WorkerSummary> RunWorker(const train::TrainSpec& spec, const WorkerOptions& options);

}  // namespace spot::dist
