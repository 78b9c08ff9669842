// Everything a training run needs to continue exactly, gathered into (and
// restored from) a checkpoint Container: parameters and buffers, the
// optimizer's per-parameter state, the CPU generator's state, and the
// trainer's counters as JSON. Record names:
//   model/<param or buffer name>
//   optim/<param name>/<state field>   (SGD: momentum_buffer;
//                                       Adam: step, exp_avg, exp_avg_sq, max_exp_avg_sq)
//   rng/cpu                            (LibTorch's CPU generator, 5,056 bytes)
//   rng/cuda                           (the current GPU's generator, when the
//                                       model is on a GPU)
//   trainer/state                      (TrainerCounters as JSON)
#pragma once

#include <torch/optim/optimizer.h>

#include <cstdint>
#include <string>
#include <vector>

#include "ckpt/container.h"
#include "core/status.h"
#include "train/model.h"

namespace spot::train {

// Counters and the facts a resume must agree with.
struct TrainerCounters {
  int64_t step = 0;            // optimizer steps completed
  int64_t epoch = 0;           // epoch of the next step
  int64_t index_in_epoch = 0;  // samples of `epoch` already consumed
  int64_t seed = 0;
  int64_t batch_size = 0;
  std::string model;
  std::string optimizer;  // sgd | adam
  int64_t threads = 0;    // intra-op threads (bitwise resume needs the same)
  std::string blas;       // BLAS library in use, for the same reason
  double last_test_accuracy = -1;
  // Rollback state (trainer.cc): global batch numbers never trained on, the
  // learning-rate multiplier, rollbacks so far, and the loss moving average
  // that spikes are judged against.
  std::vector<int64_t> skipped_batches;
  double lr_scale = 1.0;
  int64_t rollbacks = 0;
  double loss_ema = 0;
  int64_t loss_ema_steps = 0;
  // precision: fp16, the dynamic loss scale (loss_scaler.h); 0 = not started.
  double loss_scale = 0;
  int64_t loss_scale_growth_tracker = 0;
  // precision: auto, the layers chosen to stay float32 (layer_precision.h),
  // kept so that a resume runs the same selection.
  bool precision_chosen = false;
  std::vector<std::string> fp32_layers;

  std::string ToJson() const;
  static Result<TrainerCounters> FromJson(std::string_view json);
};

// The live training state of one replica, as the step runner, the
// checkpointer and the elastic state sync see it.
struct TrainRefs {
  Net* model = nullptr;
  torch::optim::Optimizer* optimizer = nullptr;
  std::string optimizer_type;  // sgd | adam
  TrainerCounters* counters = nullptr;
  // The sample shape BuildModel built `model` for (a fresh start's model);
  // empty when unknown or not rebuildable (then a restore copies into the
  // model instead of decoding into it: Checkpointer::Resume).
  std::vector<int64_t> sample_shape;
};

Status CaptureTrainState(Net& model, torch::optim::Optimizer& optimizer,
                         const std::string& optimizer_type, const TrainerCounters& counters,
                         ckpt::Container* out);

// Restores into an already built model and optimizer of the same shape.
// Returns the counters. FailedPrecondition when the checkpoint does not fit.
Result<TrainerCounters> RestoreTrainState(const ckpt::Container& in, Net& model,
                                          torch::optim::Optimizer& optimizer,
                                          const std::string& optimizer_type);

}  // namespace spot::train
