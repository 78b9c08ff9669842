#include "monitor/gradient_watch.h"

#include <algorithm>
#include <cmath>

namespace spot::monitor {

std::optional<double> GradientWatch::Observe(double grad_norm) {
  if (!std::isfinite(grad_norm) || grad_norm <= 0) return std::nullopt;
  if (steps_ > 0 && steps_ >= warmup_ && grad_norm > factor_ * average_) {
    return grad_norm / average_;
  }
  ++steps_;
  // A plain mean over the first 50 steps, then an exponential average of that weight.
  const double w = 1.0 / static_cast<double>(std::min<int64_t>(steps_, 50));
  average_ += w * (grad_norm - average_);
  return std::nullopt;
}

}  // namespace spot::monitor
