// Pieces every trainer builds the same way (the single-process Trainer and the
// elastic workers of dist/): data as tensors, the optimizer, checkpoint
// settings, the process's allocator setup, and evaluation.
#pragma once

#include <ATen/core/Tensor.h>
#include <torch/optim/optimizer.h>

#include <cstdint>
#include <memory>
#include <optional>
#include <utility>
#include <vector>

#include "ckpt/format.h"
#include "ckpt/store.h"
#include "core/status.h"
#include "train/data_cache.h"
#include "train/fashion_mnist.h"
#include "train/host_array.h"
#include "train/model.h"
#include "train/train_spec.h"
#include "train/train_state.h"

namespace spot::train {

class ImageShards;

// A split's samples: images (or any float samples) [n, ...] with int64
// labels [n]; or a token stream, whose samples are its windows: sample i is
// the `context` tokens from offset i * stride, its labels the same window one
// token on (next-token targets).
struct TensorSet {
  at::Tensor images;
  at::Tensor labels;
  at::Tensor tokens;  // int64 [N], when a token stream
  int64_t context = 0;
  int64_t stride = 0;
  std::optional<DataCacheStats> cache_stats;  // dataset.cache: what served the shards
  // An image folder loaded shard by shard (LoadSplit's `sharded`): `images`
  // is its tensor, whose rows Take and Range load first when not held.
  std::shared_ptr<ImageShards> shards;

  int64_t size() const;
  // One sample's shape: [context] for a token stream.
  std::vector<int64_t> SampleShape() const;
  // Samples and labels at positions `idx` (int64 [b]), or [begin, end).
  std::pair<at::Tensor, at::Tensor> Take(const at::Tensor& idx) const;
  std::pair<at::Tensor, at::Tensor> Range(int64_t begin, int64_t end) const;
  // Keeps the first `n` samples (a sharded set: a view of them).
  void Truncate(int64_t n);
};

// LibTorch's element type for a HostArray dtype ("f4" -> kFloat); Undefined
// for one it lacks (uint16).
at::ScalarType TorchTypeOf(const std::string& dtype);
// A copy of `a` as a tensor. REQUIRES: TorchTypeOf(a.dtype) is defined.
at::Tensor TensorFromHost(const HostArray& a);

// Loads one split as tensors, keeping the first `limit` images (0 = all).
// InvalidArgument names the spec's dataset.path. `sharded`: an image folder
// with dataset.cache on is not loaded now but shard by shard (TensorSet::
// shards: the caller loads what it wants held, Take the rest on demand);
// other data sets load whole.
Result<TensorSet> LoadSplit(const TrainSpec& spec, Split split, int64_t limit,
                            bool sharded = false);

// The optimizer over all of the model's parameters, as one group.
std::unique_ptr<torch::optim::Optimizer> MakeOptimizer(const OptimizerSpec& o, Net& model);
// The job's optimizer: one group per spec.param_groups entry, in order, then
// one of the remaining parameters (when any remain). InvalidArgument naming
// the entry for a prefix that matches no parameter.
Result<std::unique_ptr<torch::optim::Optimizer>> MakeOptimizer(const TrainSpec& spec, Net& model);

// Sets intra-op threads (0 = all cores), the allocator thresholds and the
// seed. Returns the thread count in force.
int PrepareProcess(const TrainSpec& spec);
// The malloc settings training runs under (PrepareProcess applies them): large
// per-step buffers stay in the heap for reuse instead of being mapped afresh.
void KeepActivationBuffersInHeap();

// The counters of a fresh run of `spec` on `threads` intra-op threads (what
// a checkpoint records about its job and machine: seed, batch, model,
// optimizer, threads, BLAS).
TrainerCounters FreshCounters(const TrainSpec& spec, int threads);

ckpt::RetentionPolicy RetentionFor(const CheckpointSpec& c);
ckpt::CodecPlan CodecPlanFor(const CheckpointSpec& c);

// Sums over test samples [begin, end): correct predictions (for lm, the
// fraction of a sample's tokens predicted right; none for mse) and the loss.
// Puts the model in eval mode for the duration.
struct EvalSums {
  double correct = 0;
  double loss_sum = 0;
  double count = 0;
};
// Batches of spec.eval_batch_size, spec.loss, spec.precision, on spec.device.
EvalSums EvaluateRange(Net& model, const TensorSet& test, int64_t begin, int64_t end,
                       const TrainSpec& spec);

// The numeric precision of forward passes in its scope (spec.precision on
// spec.device): "bf16" runs matrix products and convolutions in bfloat16
// under LibTorch's CPU autocast (CUDA's on device cuda; normalization, softmax
// and losses stay float32 by autocast's rules), while weights, gradients and
// optimizer state stay float32; "auto" is bf16 with the layers the model's
// LayerPrecision keeps float32 (layer_precision.h); "fp16" on cuda is CUDA
// autocast in float16 (the step runner scales the loss); "fp32" changes
// nothing, and so does fp16 on the CPU, which only tests build (the spec
// reader refuses it). Restores the previous state and drops autocast's cache
// of cast weights on exit.
class PrecisionScope {
 public:
  explicit PrecisionScope(const std::string& precision, const std::string& device = "cpu");
  ~PrecisionScope();
  PrecisionScope(const PrecisionScope&) = delete;
  PrecisionScope& operator=(const PrecisionScope&) = delete;

 private:
  bool cuda_ = false;
  bool enabled_ = false;
  bool was_enabled_ = false;
};

// loss mse: InvalidArgument naming model.loss and dataset.path unless the
// model's output for the first training samples has the targets' shape
// ([b, 1] outputs take [b] targets). Runs the model once in eval mode without
// gradients. OK for other losses.
Status CheckLossTargets(const TrainSpec& spec, Net& model, const TensorSet& train);

// The summed loss of a batch's model output against its labels: spec.loss
// cross_entropy (the output is logits) or nll (log-probabilities), or lm:
// next-token logits [b, T, vocab] against targets [b, T], each sample's loss
// the mean over its tokens; or mse: outputs [b] or [b, k] against float
// targets of the same shape ([b, 1] outputs take [b] targets), each sample's
// loss the mean over its k outputs.
at::Tensor LossSum(const std::string& loss, const at::Tensor& output, const at::Tensor& labels);

}  // namespace spot::train
