// The preemption target on a view's ticks: "a spot instance held at tick t - 1
// (up) is preempted or finds no capacity at some tick of [t, t + H)".
#pragma once

#include <cstdint>
#include <vector>

#include "forecast/history.h"

namespace spot::forecast {

// next[t] = the first down tick >= t in [0, end()), or end() when none.
// Size end() + 1.
std::vector<int64_t> NextDownTicks(const HistoryView& h, int z);

// The event at origin t, known only when t + H <= end() (REQUIRES that).
inline bool EventWithin(const std::vector<int64_t>& next_down, int64_t t, int64_t horizon) {
  return next_down[t] < t + horizon;
}

}  // namespace spot::forecast
