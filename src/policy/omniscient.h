// The omniscient offline optimum: the least cost at which the job can meet its
// deadline when the whole future of the market is known, under exactly the
// simulator's model (sim/spot_sim.h). It is the bound every policy is measured
// against; it cannot run live (needs_future() is true).
//
// Method: dynamic programming over (tick, mode, deficit). A mode is idle, or
// an instance (spot in zone z, or on-demand) whose changeover is over (J =
// ceil(d / g) ticks after entering it). The deficit is time - progress (idle
// and changeover time), on a grid of q = g / K hours. When g and the
// changeover's last partial tick are whole seconds, K makes the grid exact
// (q = gcd of both) and the DP is the exact optimum.
// The changeover's ticks are not states: all but its last make no progress
// and bill a whole tick, as idling would for free, so leaving during them (or
// being preempted) is dominated by having idled; an entry at tick t either
// finishes the job in its last changeover tick or, when its zone stays up
// through ticks t .. t + J - 1, becomes the instance's state at tick t + J.
// Moves between regions (JobSpec::checkpoint_gb at JobSpec::egress's prices)
// are billed as the simulator bills them, on a spot launch in another region
// than the zone the job's state is in: when any move costs money, idle and
// on-demand modes also carry that zone (none yet, or zone z), so the bound is
// the optimum with moves, and its plan replayed costs exactly the bound.
// (Moves are priced by their cheapest path through other regions; where a
// catalog's direct price is dearer, the bound stays a bound, not exact.)
// Cost: O(ticks x modes x deficits), independent of J; modes: zones + 2, or
// 3 zones + 2 where moves cost.
//
// Rounding, and why the result stays a LOWER bound when the grid is coarser:
// the work done in a tick is rounded UP to the grid (deficit rounded down), so
// along any sequence of decisions the DP's progress is >= the real progress at
// every tick (induction: equal start; each tick adds >= the real increment,
// and the increment depends only on the decision and the phase, which are the
// same in both). Ticks before completion are billed in full in both, so the
// costs agree until the DP completes, which it does no later than the real
// run; its completing tick is billed for (C - p_dp) <= (C - p_real) hours of
// work, and it meets the deadline whenever the real run does. So for every
// real schedule S, dp_cost(S) <= cost(S), and min over S of dp_cost <= min over
// S of cost. Pruning deficits above D - C only removes states from which no
// schedule can finish in time (the real deficit is >= the grid deficit).
// The property test omniscient_test.cc checks bound <= every policy's cost.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "core/config_fields.h"
#include "core/status.h"
#include "policy/policy.h"

namespace spot::policy {

struct OmniscientOptions {
  int max_units_per_tick = 64;                 // K cap; a coarser grid stays a lower bound
  int64_t max_table_bytes = int64_t{1} << 30;  // back-pointer table; K shrinks to fit
  // Also spot entered from on-demand make before break (policy/mdp_policy.h:
  // the spot group starts beside a ready on-demand, which keeps working and
  // billing until the tick in which that group becomes ready; only where the
  // changeover spans two ticks or more): the bound for a policy that does
  // so, which can cost less than the one-group bound. The
  // plan then holds its cost only, no placements (the omniscient policy
  // replays placements, one group at a time).
  bool overlap_entries = false;
};

// Its parameters, with bounds and help.
void DeclareFields(OmniscientOptions& o, FieldVisitor& v);

struct OmniscientPlan {
  bool feasible = false;   // some schedule meets the deadline
  bool exact = false;      // the progress grid was exact (no rounding), every move priced as billed
  double cost = 0;         // the bound: minimum cost ($) when feasible
  int units_per_tick = 0;  // K used
  std::vector<Placement> placements;  // decision per tick from the start (when feasible)
};

// Solves the job starting at future.start_tick. InvalidArgument for more
// than 125 zones (41 where moves cost).
Result<OmniscientPlan> SolveOmniscient(const FutureView& future, const JobSpec& job,
                                       const OmniscientOptions& options = {});

std::unique_ptr<Policy> MakeOmniscientPolicy(OmniscientOptions options = {});

}  // namespace spot::policy
