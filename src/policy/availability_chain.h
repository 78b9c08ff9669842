// A Markov chain of spot availability fitted to a market's past: the
// market is up (capacity for the gang at a price below on-demand) or down,
// and the chance that it flips within the next step depends on how long the
// current up or down run has lasted (by run-age bucket), which is how
// heavy-tailed spot lifetimes and outages show up (a run that has lasted
// long is likely to last longer). Estimated per bucket as events / exposure
// (the Kaplan-Meier hazard over run lengths, the run still open at the end
// counted as exposure only), shrunk toward the side's pooled hazard.
// Plain data, computed from the past only, so any policy may use it live.
#pragma once

#include <array>
#include <cstdint>
#include <span>
#include <vector>

namespace spot::policy {

// Run-age buckets, in steps: [0,1), [1,2), [2,4), [4,8), [8,16), [16,32), [32,inf).
inline constexpr std::array<int, 7> kAgeEdges = {0, 1, 2, 4, 8, 16, 32};
inline constexpr int kAgeBuckets = static_cast<int>(kAgeEdges.size());
// A chain state: up with age bucket b is b, down with age bucket b is kAgeBuckets + b.
inline constexpr int kChainStates = 2 * kAgeBuckets;

struct AvailabilityChain {
  // P(the run of state s goes on for another step); by state.
  std::array<double, kChainStates> survive{};
  double step_ticks = 1;  // ticks per step of the chain
  double spot_price = 1;  // mean spot $/h per instance over the up ticks of the fit window
  int64_t up_runs = 0;    // runs seen in the window (ended or not), for reports
  int64_t down_runs = 0;
  double availability = 0;  // share of window ticks that were up

  bool operator==(const AvailabilityChain&) const = default;
};

// The state of a market that is `up` (or down) in a run that has lasted
// `age_ticks` ticks so far (>= 1 at the tick the run began).
int ChainState(bool up, int64_t age_ticks, double step_ticks);
// The state a step later when the run survives it: the next age bucket with
// chance 1 / (bucket width), else the same (the last bucket keeps its own).
double AdvanceChance(int state);
inline bool IsUp(int state) { return state < kAgeBuckets; }

struct ChainFitOptions {
  double step_ticks = 1;     // ticks per step, >= 1
  double prior_steps = 4;    // pseudo-exposure (steps) at the side's pooled hazard per bucket
  int64_t window_ticks = 0;  // only the last window_ticks of `up` (0: all)
  // Runs weigh 2^(-ticks since they ended / half_life_ticks) (0: all alike).
  int64_t half_life_ticks = 0;
};

// Fits the chain to `up` (1 per tick the market was up). An empty or
// one-run history still gives a chain: a side never seen ending never ends.
AvailabilityChain FitAvailabilityChain(std::span<const uint8_t> up, std::span<const double> price,
                                       const ChainFitOptions& options);

}  // namespace spot::policy
