// Spot lifetimes seen in an availability history: the lengths of the runs of
// ticks with capacity (count >= nodes), and the expected residual lifetime of
// a run that has already lasted `age` ticks (the empirical survival curve).
// Computed from the past only, so any policy may use it live.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

namespace spot::policy {

class LifetimeStats {
 public:
  // Runs ended by an outage inside `history`; the run still open at the end
  // is left out (censored). Only the last `window` ticks are looked at.
  LifetimeStats(std::span<const int32_t> history, int nodes, int64_t window);
  LifetimeStats() = default;

  int64_t runs() const { return static_cast<int64_t>(sorted_.size()); }
  // E[L - age | L > age] in ticks over the observed runs; `fallback` when
  // fewer than `min_runs` runs outlived `age`.
  double ResidualTicks(int64_t age, double fallback, int64_t min_runs = 3) const;
  // The median of L - age over the observed runs with L > age (robust to the
  // heavy tail of spot lifetimes); `fallback` as above.
  double MedianResidualTicks(int64_t age, double fallback, int64_t min_runs = 3) const;
  // Fraction of ticks with capacity in the window (0 when empty).
  double availability() const { return availability_; }

 private:
  std::vector<int64_t> sorted_;  // run lengths, ascending
  std::vector<int64_t> suffix_;  // suffix_[i] = sum of sorted_[i..]
  double availability_ = 0;
};

// Length of the run of capacity ending at the last tick of `history` (0 when
// the last tick has none).
int64_t CurrentRunAge(std::span<const int32_t> history, int nodes);

}  // namespace spot::policy
