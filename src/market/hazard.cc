#include "market/hazard.h"

#include <algorithm>
#include <cmath>
#include <limits>

namespace spot::market {
namespace {

int HourOfDay(double unix_s) {
  double h = std::fmod(std::floor(unix_s / 3600), 24.0);
  return static_cast<int>(h < 0 ? h + 24 : h);
}

}  // namespace

std::vector<Lifetime> SpotLifetimes(const Trace& trace, const LifetimeOptions& options) {
  std::vector<Lifetime> out;
  for (const AvailabilityRun& r : AvailabilityRuns(trace, options.min_count)) {
    if (!r.up || (options.drop_left_truncated && r.begin == 0)) continue;
    out.push_back({static_cast<double>(r.length) * trace.gap_seconds / 3600, r.censored_end});
  }
  return out;
}

SurvivalCurve KaplanMeier(std::vector<Lifetime> lifetimes) {
  // Events before censorings at equal times: a censored lifetime at t_j is at risk at t_j.
  std::sort(lifetimes.begin(), lifetimes.end(), [](const Lifetime& a, const Lifetime& b) {
    return a.hours != b.hours ? a.hours < b.hours : !a.censored && b.censored;
  });
  SurvivalCurve c;
  c.lifetimes = static_cast<int64_t>(lifetimes.size());
  double s = 1;
  for (size_t i = 0; i < lifetimes.size();) {
    const double t = lifetimes[i].hours;
    const int64_t at_risk = static_cast<int64_t>(lifetimes.size() - i);
    int64_t events = 0;
    for (; i < lifetimes.size() && lifetimes[i].hours == t; ++i) {
      lifetimes[i].censored ? ++c.censored : ++events;
    }
    if (events == 0) continue;
    s *= 1 - static_cast<double>(events) / static_cast<double>(at_risk);
    c.time_h.push_back(t);
    c.survival.push_back(s);
    c.at_risk.push_back(at_risk);
    c.events.push_back(events);
  }
  return c;
}

SurvivalCurve LifetimeSurvival(const Trace& trace, const LifetimeOptions& options) {
  return KaplanMeier(SpotLifetimes(trace, options));
}

double SurvivalCurve::At(double hours) const {
  auto it = std::upper_bound(time_h.begin(), time_h.end(), hours);
  if (it == time_h.begin()) return 1;
  return survival[static_cast<size_t>(it - time_h.begin()) - 1];
}

double SurvivalCurve::MedianHours() const {
  for (size_t j = 0; j < survival.size(); ++j) {
    if (survival[j] <= 0.5) return time_h[j];
  }
  return std::numeric_limits<double>::infinity();
}

HourlyHazard PreemptionRateByHour(const Trace& trace, int32_t min_count) {
  HourlyHazard h;
  for (int64_t t = 0; t < trace.ticks(); ++t) {
    const int hour = HourOfDay(trace.start_unix_s + static_cast<double>(t) * trace.gap_seconds);
    const bool up = trace.available[static_cast<size_t>(t)] >= min_count;
    if (up) h.exposure_hours[hour] += trace.gap_seconds / 3600;
    if (!up && t > 0 && trace.available[static_cast<size_t>(t - 1)] >= min_count) {
      ++h.preemptions[hour];
    }
  }
  double exposure = 0;
  int64_t preemptions = 0;
  for (int i = 0; i < 24; ++i) {
    if (h.exposure_hours[i] > 0) h.rate_per_hour[i] = h.preemptions[i] / h.exposure_hours[i];
    exposure += h.exposure_hours[i];
    preemptions += h.preemptions[i];
  }
  if (exposure > 0) h.overall_rate_per_hour = static_cast<double>(preemptions) / exposure;
  return h;
}

}  // namespace spot::market
