// Preemption hazard from any availability history: the survival curve of spot
// lifetimes (Kaplan-Meier) and the preemption rate by UTC hour of day.
//
// A lifetime is one up run (available >= min_count): how long an instance
// taken at the run's first tick lives. A run cut off by the end of the trace
// is right-censored (we only know it lived at least that long). A run that is
// already up at tick 0 is left-truncated; it is kept as observed unless
// drop_left_truncated, which makes estimates slightly pessimistic.
#pragma once

#include <array>
#include <cstdint>
#include <vector>

#include "market/trace.h"

namespace spot::market {

struct Lifetime {
  double hours = 0;
  bool censored = false;  // true: the instance was still alive after `hours`
};

struct LifetimeOptions {
  int32_t min_count = 1;             // a tick is up when available >= min_count, >= 1
  bool drop_left_truncated = false;  // skip an up run that starts at tick 0
};

std::vector<Lifetime> SpotLifetimes(const Trace& trace, const LifetimeOptions& options = {});

// The Kaplan-Meier estimate S(t) = prod over event times t_j <= t of
// (1 - d_j / n_j): d_j lifetimes end at t_j, n_j are still alive just before
// t_j (censored lifetimes at t_j count as alive there, the usual convention).
struct SurvivalCurve {
  std::vector<double> time_h;    // distinct event (preemption) times, increasing
  std::vector<double> survival;  // S just after time_h[j]
  std::vector<int64_t> at_risk;  // n_j
  std::vector<int64_t> events;   // d_j
  int64_t lifetimes = 0;         // all lifetimes, censored ones included
  int64_t censored = 0;

  // S(t): 1 before the first event; constant after the last one.
  double At(double hours) const;
  // The smallest event time with S <= 0.5; +infinity when S never gets there.
  double MedianHours() const;
};

SurvivalCurve KaplanMeier(std::vector<Lifetime> lifetimes);
SurvivalCurve LifetimeSurvival(const Trace& trace, const LifetimeOptions& options = {});

// Preemptions per available hour, by UTC hour of day. A preemption is a tick t
// that is down after an up tick t - 1; it counts in the hour of tick t's start
// (trace.start_unix_s + t * gap). Each up tick adds gap_seconds of exposure to
// the hour its start falls in. With start_unix_s = 0 (unknown), "hours" are
// hours since the trace's start modulo 24.
struct HourlyHazard {
  std::array<double, 24> exposure_hours{};  // up time starting in each hour
  std::array<int64_t, 24> preemptions{};
  std::array<double, 24> rate_per_hour{};  // preemptions / exposure_hours; 0 when no exposure
  double overall_rate_per_hour = 0;        // all preemptions / all exposure
};

HourlyHazard PreemptionRateByHour(const Trace& trace, int32_t min_count = 1);

}  // namespace spot::market
