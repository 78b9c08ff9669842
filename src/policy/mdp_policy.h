// mdp: our single-zone policy. It plans with the market's own history: a
// Markov chain of availability fitted to the past (availability_chain.h: up
// and down runs, hazard by run age, the mean spot price) and the decision
// process over (time, deficit, what it holds, chain state) solved backward
// (mdp_solver.h), so it weighs waiting for spot against the slack left, and
// each changeover against how long the spot run it enters should last.
//   - The chain is fitted on the history up to the last multiple of
//     refit_hours (jobs starting the same day share it and its solution),
//     over the last history_window_hours, and refitted when the job crosses
//     the next multiple (in the market's first refit period: every eighth
//     of it).
//   - With history_half_life_hours, runs that ended longer ago weigh less
//     (half per half-life), so a market that changed is learned sooner;
//     the stable one pays with a noisier chain. Off by default; the
//     evaluation protocols fit it.
//   - "Up" means some zone has capacity for the gang at a spot price below
//     on-demand: it never takes or keeps spot priced at or above on-demand.
//   - With less than min_history_hours of history it acts as up, but
//     leaves on-demand for spot only (never to wait: up, ahead of its line
//     with no spot, stops on-demand and starts it again once behind, a
//     changeover each time) and make before break.
//   - It leaves on-demand for spot make before break: on-demand is kept
//     while the spot gang starts and let go at the start of the tick in
//     which that gang becomes ready, so a spot run that ends inside its
//     changeover does not cost on-demand's changeover again, nor its
//     progress (and the job never holds both ready at once).
//   - Its safety net is UP's (2d, latched): on-demand to the end once the
//     remaining time is below the remaining work + 2d, so it meets every
//     deadline UP meets.
#pragma once

#include <memory>
#include <optional>

#include "core/config_fields.h"
#include "policy/policy.h"

namespace spot::policy {

struct MdpOptions {
  double history_window_hours = 14 * 24;  // past window the chain is fitted on
  double history_half_life_hours = 0;     // runs weigh 2^(-age / this); 0: alike
  double min_history_hours = 24;          // less history: act as up
  double refit_hours = 24;                // the chain is refitted at multiples of this
  double prior_steps = 4;                 // shrinkage of each age bucket's hazard (steps)
  double step_hours = 0.2;                // the decision process's step (a multiple of ticks)
  int64_t cells_per_step = 2;             // deficit grid cells per step
  // Multiplies the fitted hazard of up runs (> 1: spot runs are trusted less).
  double spot_hazard_scale = 1;
};

// Its parameters (a job's `policy: {name: mdp, ...}`), with bounds and help.
void DeclareFields(MdpOptions& o, FieldVisitor& v);

// The chain fit's half-life in ticks of `gap_hours` (0: none).
int64_t HalfLifeTicks(const MdpOptions& o, double gap_hours);

std::unique_ptr<Policy> MakeMdpPolicy(MdpOptions options = {});

// The fleet of a job on on-demand while a spot gang starts in `zone` (both
// gangs of `nodes`), and the zone of such a decision (nullopt for any other).
Decision OnDemandWhileSpotStarts(int zone, int nodes);
std::optional<int> SpotStartingZone(const Decision& d, int nodes);

}  // namespace spot::policy
