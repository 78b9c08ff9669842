#include "ckpt/interval.h"

#include <algorithm>
#include <cmath>

namespace spot::ckpt {

bool SaveDue(const IntervalPolicy* policy, int64_t every_steps, int64_t step,
             double seconds_since_last_save) {
  return policy ? seconds_since_last_save >= policy->IntervalSeconds() : step % every_steps == 0;
}
namespace {

// Running mean that adapts: plain mean over the first 100 samples, then an
// exponential moving average with the same weight.
void Update(double* mean, int64_t* n, double x) {
  ++*n;
  double w = 1.0 / static_cast<double>(std::min<int64_t>(*n, 100));
  *mean += w * (x - *mean);
}

}  // namespace

void IntervalPolicy::RecordStep(double seconds, bool saving) {
  total_step_s_ += seconds;
  if (saving) {
    Update(&busy_step_s_, &busy_steps_, seconds);
  } else {
    Update(&idle_step_s_, &idle_steps_, seconds);
  }
}

void IntervalPolicy::RecordSave(double blocking_s) {
  int64_t n = saves_;
  Update(&blocking_s_, &n, blocking_s);
  ++saves_;
  total_blocking_s_ += blocking_s;
}

double IntervalPolicy::CostSeconds() const {
  double interference = 0;
  if (busy_steps_ > 0 && idle_steps_ > 0 && saves_ > 0) {
    // Extra time per busy step, times busy steps per save.
    double per_step = std::max(0.0, busy_step_s_ - idle_step_s_);
    interference = per_step * static_cast<double>(busy_steps_) / static_cast<double>(saves_);
  }
  return blocking_s_ + interference;
}

double IntervalPolicy::MeasuredOverhead() const {
  double train = total_step_s_ + total_blocking_s_;
  if (train <= 0) return 0;
  double interference = 0;
  if (busy_steps_ > 0 && idle_steps_ > 0) {
    interference = std::max(0.0, busy_step_s_ - idle_step_s_) * static_cast<double>(busy_steps_);
  }
  return (total_blocking_s_ + interference) / train;
}

double IntervalPolicy::YoungDaly(double cost_s, double mtbf_s) {
  double t = std::sqrt(2 * cost_s * mtbf_s);
  return cost_s < mtbf_s / 2 ? t - cost_s : t;
}

void IntervalPolicy::Seed(double cost_s) {
  if (std::isfinite(cost_s) && cost_s > 0) seed_cost_s_ = cost_s;
}

double IntervalPolicy::IntervalSeconds() const {
  if (saves_ == 0 && seed_cost_s_ <= 0) {
    return std::clamp(std::min(opt_.first_save_s, opt_.mtbf_s / 10), opt_.min_interval_s,
                      opt_.max_interval_s);
  }
  double c = saves_ == 0 ? seed_cost_s_ : CostSeconds();
  double t = std::max(YoungDaly(c, opt_.mtbf_s), c / opt_.max_overhead);
  return std::clamp(t, opt_.min_interval_s, opt_.max_interval_s);
}

}  // namespace spot::ckpt
