// Learning-rate schedules as pure functions of the step, so resuming needs no
// scheduler state beyond the step counter.
#pragma once

#include <cstdint>

#include "train/train_spec.h"

namespace spot::train {

// The learning rate for optimizer step `step` (0-based) of `total_steps`.
//   constant: base_lr
//   step:     base_lr * gamma^floor(step / step_size), after warm-up
//   cosine:   min_lr + (base_lr - min_lr) * (1 + cos(pi * p)) / 2, p the fraction
//             of post-warm-up steps done
// Warm-up (step, cosine): base_lr * (step + 1) / warmup_steps for the first
// warmup_steps steps.
double LearningRate(const ScheduleSpec& s, double base_lr, int64_t step, int64_t total_steps);

}  // namespace spot::train
