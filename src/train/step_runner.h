// The one training step, shared by the single-process Trainer, the elastic
// workers of dist/ and the checkpoint benchmark. A step:
//   1. sets the scheduled learning rate (times the rollback scale);
//   2. runs forward and backward over this replica's part of the global batch
//      in micro-batches (gradients of the summed loss over the global batch
//      size, so parts add up to the mean over the whole batch), seeding the
//      dropout draws from (seed, step, first sample): a step's randomness
//      depends on what it trains on, not on the history or the world size;
//   3. hands the gradients to a GradientSync (none for one process, Gloo's
//      all-reduce for elastic workers), which returns the global loss;
//   4. judges that loss (the anomaly guard: not finite, or a spike above
//      rollback.spike_factor times its moving average) before it touches the
//      weights, and only then steps the optimizer.
// With precision: fp16 the loss is scaled before backward and the gradients
// unscaled after the sync (loss_scaler.h); a step whose gradients overflow is
// counted but changes no weights (not an anomaly: no rollback). With
// precision: auto the first step (or PreparePrecision) measures which layers
// stay float32, once per run: the counters keep the choice.
// Batches come from one deterministic order per epoch (EpochOrder); global
// batch k of an epoch is positions [k*B, min(n, (k+1)*B)), whatever the world.
#pragma once

#include <ATen/core/Tensor.h>

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "core/status.h"
#include "train/batch_prefetcher.h"
#include "train/partition.h"
#include "train/train_setup.h"
#include "train/train_spec.h"
#include "train/train_state.h"

namespace spot::train {

// A replica's contribution to a step.
struct ReplicaLoss {
  double loss_sum = 0;         // summed loss over its samples
  int64_t samples = 0;         // its part of the global batch
  int64_t batch = 0;           // the global batch's size
  double compute_seconds = 0;  // its forward and backward
};
// The step as a whole.
struct GlobalLoss {
  double loss_sum = 0;
  double samples = 0;
  double mean() const { return samples > 0 ? loss_sum / samples : 0; }
};

class GradientSync {
 public:
  virtual ~GradientSync() = default;
  // Called after this replica's backward: leaves in every parameter's grad
  // the global batch's gradient (and in the floating-point buffers the
  // replicas' common values) and returns the global loss. Aborted when a
  // collective fails: the step is abandoned, nothing was applied.
  virtual Result<GlobalLoss> Sync(const ReplicaLoss& mine) = 0;
};

// One process trains the whole batch: nothing to combine.
class LocalSync final : public GradientSync {
 public:
  Result<GlobalLoss> Sync(const ReplicaLoss& mine) override {
    return GlobalLoss{mine.loss_sum, static_cast<double>(mine.samples)};
  }
};

// Where a step's time went, for profiles and metrics (per span: a phase, when
// it began and how long it took). Forward and backward alternate once per
// micro-batch; the forward span includes the loss.
enum class StepPhase { kData, kForward, kBackward, kSync, kOptimizer };
inline constexpr const char* kStepPhaseNames[] = {"data", "forward", "backward", "sync",
                                                  "optimizer"};
inline const char* StepPhaseName(StepPhase p) { return kStepPhaseNames[static_cast<int>(p)]; }
struct PhaseSpan {
  StepPhase phase;
  std::chrono::steady_clock::time_point start;
  double seconds = 0;
};

// A layer group's gradient and update (parameters grouped by module: "fc1",
// "blocks.0"), the seeds' watch for exploding or vanishing gradients.
struct LayerGroupStats {
  std::string group;
  double grad_norm = 0;     // L2 norm of the group's global gradient
  double weight_norm = 0;   // of its weights before the update
  double update_ratio = 0;  // ||update|| / ||weights||: ~1e-3 is healthy for Adam and SGD
};
// The group of a parameter named `name`: its module path, at most two levels.
std::string LayerGroupOf(const std::string& name);

struct StepOutcome {
  bool committed = false;  // false: the loss diverged and nothing was applied
  std::string anomaly;     // why not, e.g. "loss is nan", "loss spike: 7.1 > 5 x 0.42"
  int64_t batch = 0;       // the global batch number
  double loss = 0;         // mean over the global batch
  double lr = 0;
  double grad_norm = 0;                 // L2 norm of the global gradient (when asked for)
  bool overflow = false;                // fp16: a gradient was inf/nan; the update was skipped
  double loss_scale = 0;                // fp16: the scale this step ran with
  double compute_seconds = 0;           // this replica's forward and backward
  std::vector<PhaseSpan> spans;         // in order of their start
  std::vector<LayerGroupStats> layers;  // on the steps set_layer_stats_every() asks for
};

// Where the counters stand after a batch.
struct BatchEnd {
  bool epoch_done = false;  // the batch was the epoch's last
  bool last = false;        // training is complete
  int64_t epoch = 0;        // the epoch the batch belonged to (0-based)
};

class StepRunner {
 public:
  // `data` and the objects `state` points to must outlive the runner.
  StepRunner(const TrainSpec& spec, const TensorSet& data, TrainRefs state);
  ~StepRunner();

  int64_t steps_per_epoch() const { return steps_per_epoch_; }
  int64_t total_steps() const { return total_steps_; }
  bool Finished() const;
  // The next global batch (positions in the epoch's order) and its number.
  Slice NextBatch() const;
  int64_t BatchNumber() const;
  // True when the anomaly guard skips the next batch for good (rolled back past it).
  bool NextIsSkipped() const;

  // Runs one step over `mine`, this replica's part of the global batch `batch`.
  // On commit the step counter advances; call Advance(batch) after it.
  Result<StepOutcome> Run(Slice batch, Slice mine, GradientSync& sync, bool want_grad_norm = false);
  // Moves the position past `batch` (committed or skipped): epoch accounting.
  BatchEnd Advance(Slice batch);
  // The counters were replaced (resume, rollback, state sync).
  void Reset();
  // dataset.prefetch: micro-batches found ready, and those made on demand.
  int64_t prefetch_hits() const { return prefetch_ ? prefetch_->hits() : 0; }
  int64_t prefetch_misses() const { return prefetch_ ? prefetch_->misses() : 0; }
  // precision: auto. Applies the counters' choice of float32 layers to the
  // model, measuring and logging it first when the counters hold none (a
  // fresh run). Run calls it; call it before anything else uses the model
  // (the first checkpoint, an evaluation). Nothing for other precisions.
  void PreparePrecision();
  // Data held in shards by the replicas (TensorSet::shards): every global
  // batch is arranged by the rank owning each sample's shard (ArrangeByOwner;
  // `owners` by shard, ShardOwners over shard_slots(); shards of `shard_size`
  // samples), so each rank's samples of a batch are contiguous. With
  // `own_rank` >= 0 this replica's part of a batch is exactly its own samples
  // (OwnPart), about its share of the slots since the order deals every
  // batch from all of them (SlotOrder); with -1 the caller splits the batch
  // (SplitBatch) and a part takes what it lacks from other shards. Empty
  // `owners`: the epoch's order as it is. Drops the order and any prefetched
  // batch. The same owners on every rank, or the ranks' parts would overlap.
  void SetShardOwners(int64_t shard_size, std::vector<int32_t> owners, int own_rank = -1);
  bool PartsByOwner() const { return own_rank_ >= 0; }
  // The slots of the shards (ShardSlots) when the data is held in shards
  // (TensorSet::shards): the epoch's order is then SlotOrder's; 0 otherwise.
  int64_t shard_slots() const;
  // The positions of `batch` whose shards own_rank owns. REQUIRES: PartsByOwner().
  Slice OwnPart(Slice batch);
  // Layer-group statistics (StepOutcome::layers) every `k` steps (0: never).
  // They read every weight and gradient once more, and copy the weights.
  void set_layer_stats_every(int64_t k) { layer_stats_every_ = k; }

 private:
  std::string Judge(double loss) const;
  void ApplyParamGroups(double lr);
  void EnsureOrder();

  const TrainSpec& spec_;
  const TensorSet& data_;
  TrainRefs state_;
  int64_t steps_per_epoch_ = 0;
  int64_t total_steps_ = 0;
  // dataset.prefetch: the next micro-batch prepared while a step computes.
  std::function<Batch()> BatchMaker(Slice part) const;
  Batch TakeBatch(Slice part);
  void Prefetch(Slice part);
  Slice PredictNextPart(Slice batch, Slice mine) const;

  int64_t layer_stats_every_ = 0;
  int64_t shard_size_ = 0;
  std::vector<int32_t> shard_owners_;
  int own_rank_ = -1;
  Slice OwnPartOfCurrentOrder(Slice batch) const;
  at::Tensor order_;
  int64_t order_epoch_ = -1;
  std::unique_ptr<BatchPrefetcher> prefetch_;  // declared last: joined first
};

// Whether to evaluate after a batch that ended as `end`, the counters now at
// `step`, the last evaluation at `evaluated_step`: at an epoch's end, at the
// last step, and every spec.eval_every steps.
bool EvaluationDue(const TrainSpec& spec, const BatchEnd& end, int64_t step,
                   int64_t evaluated_step);

// The log line for a step whose fp16 gradients overflowed (`o.overflow`),
// the counters now at `c`: "step 12: a gradient overflowed at loss scale
// 65536: update skipped, scale now 32768".
std::string OverflowText(const StepOutcome& o, const TrainerCounters& c);

// Steps per epoch and in all for a training set of `n` samples.
int64_t StepsPerEpoch(const TrainSpec& spec, int64_t n);
int64_t TotalSteps(const TrainSpec& spec, int64_t n);

}  // namespace spot::train
