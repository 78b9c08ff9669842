#include "market/trace.h"

#include <algorithm>
#include <cassert>

namespace spot::market {

std::string Pool::Key() const { return cloud + "/" + zone + "/" + instance_type; }

double StepSeries::At(double t) const {
  assert(!empty());
  // The last change point at or before t; before the first one, the first value.
  auto it = std::upper_bound(time_s.begin(), time_s.end(), t);
  if (it == time_s.begin()) return value.front();
  return value[static_cast<size_t>(it - time_s.begin()) - 1];
}

std::vector<double> StepSeries::Resample(double t0, double gap_s, int64_t ticks) const {
  std::vector<double> out;
  if (empty() || ticks <= 0) return out;
  out.reserve(static_cast<size_t>(ticks));
  // Walk the change points once instead of a binary search per tick.
  size_t i = 0;
  for (int64_t k = 0; k < ticks; ++k) {
    double t = t0 + static_cast<double>(k) * gap_s;
    while (i + 1 < time_s.size() && time_s[i + 1] <= t) ++i;
    out.push_back(value[i]);
  }
  return out;
}

std::vector<AvailabilityRun> AvailabilityRuns(const Trace& trace, int32_t min_count) {
  std::vector<AvailabilityRun> runs;
  const int64_t n = trace.ticks();
  for (int64_t t = 0; t < n; ++t) {
    bool up = trace.available[static_cast<size_t>(t)] >= min_count;
    if (runs.empty() || runs.back().up != up) runs.push_back({t, 0, up, false});
    ++runs.back().length;
  }
  if (!runs.empty()) runs.back().censored_end = true;
  return runs;
}

double AvailabilityFraction(const Trace& trace, int32_t min_count) {
  if (trace.available.empty()) return 0;
  auto up = std::count_if(trace.available.begin(), trace.available.end(),
                          [&](int32_t a) { return a >= min_count; });
  return static_cast<double>(up) / static_cast<double>(trace.available.size());
}

}  // namespace spot::market
