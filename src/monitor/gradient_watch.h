// The alert on exploding gradients: a step whose gradient norm exceeds
// `factor` times the moving average of the norms before it (after `warmup`
// steps, so the first noisy steps set the average without alerting). An
// exploding step does not move the average, so a run of them keeps alerting.
#pragma once

#include <cstdint>
#include <optional>

namespace spot::monitor {

class GradientWatch {
 public:
  explicit GradientWatch(double factor = 10, int64_t warmup = 20)
      : factor_(factor), warmup_(warmup) {}
  // The norm of this step's gradient; the ratio to the average when it exploded.
  // Norms that are not finite and positive are ignored (the loss guard sees those).
  std::optional<double> Observe(double grad_norm);
  double average() const { return average_; }

 private:
  double factor_;
  int64_t warmup_;
  double average_ = 0;
  int64_t steps_ = 0;
};

}  // namespace spot::monitor
