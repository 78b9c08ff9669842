#include "policy/lifetime_stats.h"

#include <algorithm>

namespace spot::policy {

LifetimeStats::LifetimeStats(std::span<const int32_t> history, int nodes, int64_t window) {
  size_t begin = history.size() > static_cast<size_t>(window) ? history.size() - window : 0;
  int64_t run = 0, up = 0;
  bool seen_down = false;  // a run that began before the window is censored too
  for (size_t i = begin; i < history.size(); ++i) {
    bool a = history[i] >= nodes;
    up += a;
    if (a) {
      ++run;
    } else {
      if (run > 0 && seen_down) sorted_.push_back(run);
      run = 0;
      seen_down = true;
    }
  }
  size_t n = history.size() - begin;
  availability_ = n ? static_cast<double>(up) / n : 0;
  std::sort(sorted_.begin(), sorted_.end());
  suffix_.assign(sorted_.size() + 1, 0);
  for (size_t i = sorted_.size(); i-- > 0;) suffix_[i] = suffix_[i + 1] + sorted_[i];
}

double LifetimeStats::ResidualTicks(int64_t age, double fallback, int64_t min_runs) const {
  auto it = std::upper_bound(sorted_.begin(), sorted_.end(), age);
  size_t i = it - sorted_.begin();
  int64_t n = static_cast<int64_t>(sorted_.size() - i);
  if (n < min_runs) return fallback;
  return static_cast<double>(suffix_[i]) / n - static_cast<double>(age);
}

double LifetimeStats::MedianResidualTicks(int64_t age, double fallback, int64_t min_runs) const {
  size_t i = std::upper_bound(sorted_.begin(), sorted_.end(), age) - sorted_.begin();
  int64_t n = static_cast<int64_t>(sorted_.size() - i);
  if (n < min_runs) return fallback;
  return static_cast<double>(sorted_[i + n / 2] - age);
}

int64_t CurrentRunAge(std::span<const int32_t> history, int nodes) {
  int64_t age = 0;
  for (size_t i = history.size(); i-- > 0 && history[i] >= nodes;) ++age;
  return age;
}

}  // namespace spot::policy
