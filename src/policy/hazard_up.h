// hazard-up: our policy. Uniform Progress (uniform_progress.h) made aware of
// what the market's history says about spot lifetimes:
//   - leaving on-demand for spot costs two changeovers if the spot run ends
//     soon (d at the spot price to enter, d at k to come back), so from
//     on-demand (or for a run it already passed over) it takes spot only when
//     the expected residual lifetime of the current run, from the empirical
//     survival curve of past runs in that zone given the run's age, exceeds the
//     break-even 2 k d / (k - p_spot);
//   - with several zones it moves to the zone whose current run is expected to
//     last longest (ties: cheapest);
//   - where spot was scarce in the window (see scarce_availability) it waits
//     for spot instead of following the uniform-progress line;
//   - its safety net is UP's, one tick earlier (at least as conservative), and
//     latched, so it meets every deadline UP meets on the property tests.
#pragma once

#include <memory>

#include "core/config_fields.h"
#include "policy/policy.h"

namespace spot::policy {

struct HazardUpOptions {
  double history_window_hours = 14 * 24;  // past window for the survival curve
  int64_t min_runs = 5;                   // fewer surviving runs: act like UP
  double breakeven_scale = 1.0;           // multiplies the break-even lifetime
  bool median = false;                    // median residual (else mean)
  bool check_from_idle = false;           // also weigh entering spot from idle
  // Scarce spot: when every zone had capacity less than this fraction of the
  // history window (and the window holds >= min_history_hours), chasing the
  // uniform-progress line only buys on-demand early and then pays changeovers
  // to hop onto short spot runs; it then waits for spot and leaves the rest
  // to the (latched) safety net, as greedy does.
  double scarce_availability = 0.25;
  double min_history_hours = 24;
};

// Its parameters (a job's `policy: {name: hazard-up, ...}`), with bounds and help.
void DeclareFields(HazardUpOptions& o, FieldVisitor& v);

std::unique_ptr<Policy> MakeHazardUpPolicy(HazardUpOptions options = {});

}  // namespace spot::policy
