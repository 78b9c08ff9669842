#include "policy/availability_chain.h"

#include <algorithm>
#include <cmath>
#include <limits>

namespace spot::policy {
namespace {

double BucketLow(int b) { return kAgeEdges[b]; }
double BucketHigh(int b) {
  return b + 1 < kAgeBuckets ? kAgeEdges[b + 1] : std::numeric_limits<double>::infinity();
}

struct SideCounts {
  std::array<double, kAgeBuckets> events{}, exposure{};
  int64_t runs = 0;
};

// Adds one run of `steps` steps (ended by a flip, or still open) to `c`.
void AddRun(SideCounts& c, double steps, bool ended, double weight) {
  ++c.runs;
  for (int b = 0; b < kAgeBuckets; ++b) {
    c.exposure[b] += weight * std::clamp(steps - BucketLow(b), 0.0, BucketHigh(b) - BucketLow(b));
    // A run of L steps ended during its step (L - 1, L]: that step's bucket.
    if (ended && steps > BucketLow(b) && steps <= BucketHigh(b)) c.events[b] += weight;
  }
}

// Per-bucket survival of one step, shrunk toward the side's pooled hazard.
// The pooled hazard counts half an event more than seen, so a side that was
// never seen ending (a market up all window) still may end.
void Survival(const SideCounts& c, double prior, double* out) {
  double e = 0, x = 0;
  for (int b = 0; b < kAgeBuckets; ++b) e += c.events[b], x += c.exposure[b];
  double pooled = (e + 0.5) / (x + prior);
  for (int b = 0; b < kAgeBuckets; ++b) {
    double rate = (c.events[b] + prior * pooled) / (c.exposure[b] + prior);
    out[b] = std::exp(-rate);
  }
}

}  // namespace

int ChainState(bool up, int64_t age_ticks, double step_ticks) {
  double age = std::max<double>(0, static_cast<double>(age_ticks - 1)) / step_ticks;
  int b = 0;
  while (b + 1 < kAgeBuckets && age >= kAgeEdges[b + 1]) ++b;
  return up ? b : kAgeBuckets + b;
}

double AdvanceChance(int state) {
  int b = state % kAgeBuckets;
  return b + 1 < kAgeBuckets ? 1.0 / (kAgeEdges[b + 1] - kAgeEdges[b]) : 0.0;
}

AvailabilityChain FitAvailabilityChain(std::span<const uint8_t> up, std::span<const double> price,
                                       const ChainFitOptions& o) {
  size_t n = up.size();
  size_t first = o.window_ticks > 0 && static_cast<size_t>(o.window_ticks) < n
                     ? n - static_cast<size_t>(o.window_ticks)
                     : 0;
  AvailabilityChain chain;
  chain.step_ticks = o.step_ticks;
  SideCounts side[2];  // 0: up runs, 1: down runs
  double price_sum = 0;
  int64_t up_ticks = 0;
  size_t run_start = first;
  for (size_t t = first; t < n; ++t) {
    if (up[t]) {
      ++up_ticks;
      price_sum += price.empty() ? 1.0 : price[t];
    }
    bool ends = t + 1 == n || up[t + 1] != up[t];
    if (!ends) continue;
    const double weight =
        o.half_life_ticks > 0
            ? std::exp2(-static_cast<double>(n - 1 - t) / static_cast<double>(o.half_life_ticks))
            : 1.0;
    AddRun(side[up[t] ? 0 : 1], static_cast<double>(t + 1 - run_start) / o.step_ticks, t + 1 < n,
           weight);
    run_start = t + 1;
  }
  Survival(side[0], o.prior_steps, chain.survive.data());
  Survival(side[1], o.prior_steps, chain.survive.data() + kAgeBuckets);
  chain.up_runs = side[0].runs;
  chain.down_runs = side[1].runs;
  chain.availability =
      n > first ? static_cast<double>(up_ticks) / static_cast<double>(n - first) : 0;
  chain.spot_price = up_ticks > 0 ? price_sum / static_cast<double>(up_ticks) : 1.0;
  return chain;
}

}  // namespace spot::policy
