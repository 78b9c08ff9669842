// Dynamic loss scaling for precision: fp16, as PyTorch's
// torch.cuda.amp.GradScaler does it, written with plain ATen ops (LibTorch
// 1.13's fused _amp_* kernels are CUDA-only): the loss is multiplied by the
// scale before backward, the gradients divided by it after, and a step whose
// gradients hold an inf or nan is skipped while the scale backs off; after
// growth_interval clean steps in a row the scale grows. The state is two
// numbers the trainer's counters carry, so a checkpoint holds it and a resume
// continues bit for bit.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <vector>

#include "train/train_spec.h"

namespace spot::train {

struct LossScale {
  double scale = 0;            // the factor in force; 0 = not started (init_scale)
  int64_t growth_tracker = 0;  // clean steps in a row since the last change
};

// The scale in force for `s`: s.scale, or o.init_scale when not started.
double CurrentLossScale(const PrecisionOptions& o, const LossScale& s);

// Multiplies every defined gradient of `params` in place by the float32
// reciprocal of `scale` (GradScaler's inv_scale) and returns true when any
// gradient held an inf or a nan before (then the step must be skipped).
// REQUIRES: scale > 0.
bool UnscaleGradients(const std::vector<at::Tensor>& params, double scale);

// The state after a step: on overflow the scale times backoff_factor and the
// tracker reset; otherwise the tracker counts the step, and on reaching
// growth_interval the scale times growth_factor (kept when that would not be
// a finite float32, as GradScaler keeps it) and the tracker reset.
LossScale NextLossScale(const PrecisionOptions& o, const LossScale& s, bool found_inf);

}  // namespace spot::train
