#include "train/loss_scaler.h"

#include <ATen/ATen.h>

#include <limits>

namespace spot::train {

double CurrentLossScale(const PrecisionOptions& o, const LossScale& s) {
  return s.scale > 0 ? s.scale : o.init_scale;
}

bool UnscaleGradients(const std::vector<at::Tensor>& params, double scale) {
  // GradScaler's inv_scale: the reciprocal in double, rounded to float32.
  const float inv_scale = static_cast<float>(1.0 / scale);
  at::NoGradGuard no_grad;
  at::Tensor found;  // one flag for all gradients: a single host sync on a GPU
  for (const at::Tensor& p : params) {
    const at::Tensor& g = p.grad();
    if (!g.defined()) continue;
    at::Tensor bad = g.isfinite().logical_not().any();
    found = found.defined() ? found.logical_or(bad) : bad;
    g.mul_(inv_scale);
  }
  return found.defined() && found.item<bool>();
}

LossScale NextLossScale(const PrecisionOptions& o, const LossScale& s, bool found_inf) {
  LossScale next{.scale = CurrentLossScale(o, s), .growth_tracker = s.growth_tracker};
  if (found_inf) {
    next.scale *= o.backoff_factor;
    next.growth_tracker = 0;
    return next;
  }
  if (++next.growth_tracker < o.growth_interval) return next;
  const double grown = next.scale * o.growth_factor;
  if (grown <= std::numeric_limits<float>::max()) next.scale = grown;
  next.growth_tracker = 0;
  return next;
}

}  // namespace spot::train
