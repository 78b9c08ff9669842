#include "train/lr_schedule.h"

#include <algorithm>
#include <cmath>
#include <numbers>

namespace spot::train {

double LearningRate(const ScheduleSpec& s, double base_lr, int64_t step, int64_t total_steps) {
  if (s.type == "constant") return base_lr;
  if (step < s.warmup_steps) {
    return base_lr * static_cast<double>(step + 1) / static_cast<double>(s.warmup_steps);
  }
  int64_t t = step - s.warmup_steps;
  if (s.type == "step") return base_lr * std::pow(s.gamma, static_cast<double>(t / s.step_size));
  // cosine
  int64_t span = std::max<int64_t>(1, total_steps - s.warmup_steps);
  double p = std::clamp(static_cast<double>(t) / static_cast<double>(span), 0.0, 1.0);
  return s.min_lr + (base_lr - s.min_lr) * 0.5 * (1.0 + std::cos(std::numbers::pi * p));
}

}  // namespace spot::train
