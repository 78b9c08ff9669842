// forecast-up: Uniform Progress (uniform_progress.h) acting on forecasts
// (forecast/) instead of only on the present. Survival models (Kaplan-Meier,
// forecast/survival.h) of each zone's spot lifetimes and outage lengths are
// fitted on the last history_window_hours at the job's start.
//   - zone choice: among zones with capacity, the lowest expected $ per hour
//     over zone_horizon_hours: price + P(preempted) * 2 d k / horizon;
//   - move before a predicted preemption: on spot in a zone whose chance of a
//     preemption within the next hour exceeds move_probability, it moves to a
//     zone with capacity whose chance is at least move_margin lower; it also
//     moves to a cheaper zone when the saving over that zone's expected
//     remaining lifetime exceeds move_gain times the move's cost (2 d p);
//   - wait for spot: behind the uniform-progress line with no capacity
//     anywhere, UP buys on-demand; this policy waits when some zone's outage
//     is likely (>= spot_wait_probability) to end within spot_wait_hours and
//     the slack (R - W - 2d) is at least twice that;
//   - wait for a predicted price drop: off spot with capacity available, when
//     the price model (default Holt-Winters on hourly means) predicts the
//     zone's price to fall by price_drop within price_horizon_hours and the
//     job would still be on the uniform-progress line after waiting, it
//     stays idle;
//   - its safety net is UP's, latched, so it meets every deadline UP meets
//     (the property tests of sim/ check it).
#pragma once

#include <memory>
#include <string>

#include "core/config_fields.h"
#include "policy/policy.h"

namespace spot::policy {

struct ForecastUpOptions {
  double history_window_hours = 14 * 24;  // past window the survival models are fitted on
  double zone_horizon_hours = 6;          // preemption horizon that ranks zones, > 0
  double move_probability = 0.6;          // P(preempted within 1 h) that makes it move
  double move_margin = 0.3;               // the other zone must be this much less likely
  // Moves to a cheaper zone when the expected saving exceeds this many times
  // the move's cost.
  double move_gain = 2;
  // Behind the uniform-progress line with no spot anywhere, it waits instead
  // of buying on-demand when some zone's outage is likely to end within
  // spot_wait_hours (Kaplan-Meier of past outage lengths given their age) and
  // the slack exceeds twice that wait.
  double spot_wait_hours = 1;  // > 0
  double spot_wait_probability = 0.5;
  double price_drop = 0.1;                   // predicted relative drop worth waiting for
  double price_horizon_hours = 6;            // how far ahead it looks for the drop, > 0
  double price_refresh_hours = 1;            // price forecasts are recomputed this often
  std::string price_model = "holt-winters";  // a registered forecast price model
};

// Its parameters (a job's `policy: {name: forecast-up, ...}`), with bounds and help.
void DeclareFields(ForecastUpOptions& o, FieldVisitor& v);

std::unique_ptr<Policy> MakeForecastUpPolicy(ForecastUpOptions options = {});

}  // namespace spot::policy
