// mdp-zones: mdp (mdp_policy.h) deciding WHEN to run spot over the whole
// market, with a rule for WHERE in a market of several zones, possibly in
// several regions, each with its own prices, lifetimes and a migration cost
// between regions (fleet/migration.h):
//   - each zone has its own availability chain (availability_chain.h),
//     fitted on the same window and schedule as mdp's, which gives the
//     expected length of its current spot run from its age;
//   - entering spot, it takes the usable zone (capacity for the gang, price
//     below on-demand) of least expected cost per hour of progress:
//     (N x price x (L + d) + migration) / L, with L the expected run length
//     capped at the work left; when even that zone costs more per hour of
//     progress than on-demand (a migration dearer than the run is worth), it
//     does without spot this tick (on-demand when behind, else idle);
//   - running on spot in a zone that stays usable, it moves to zone j only
//     when the expected saving, N x (price here - price there) x L_j, beats
//     move_margin x (N x price there x d + the migration), and the slack
//     beyond the safety net is at least move_slack_changeovers x d;
//   - when mdp leaves on-demand make before break (mdp_policy.h), the spot
//     gang starts in the zone an entry would choose, and stays there once
//     ready unless a move pays as above;
//   - mdp's answers stand otherwise: on-demand, idle, and UP's latched 2d
//     safety net first, so it meets every deadline UP meets.
// On a single zone it decides exactly as mdp.
#pragma once

#include <memory>

#include "core/config_fields.h"
#include "policy/availability_chain.h"
#include "policy/mdp_policy.h"
#include "policy/policy.h"

namespace spot::policy {

struct MdpZonesOptions {
  MdpOptions mdp;  // when to run spot (mdp's parameters, same names)
  // A voluntary move must save more than this many times its cost (> 0).
  double move_margin = 2;
  // ... and find at least this many changeovers of slack beyond the 2d net.
  double move_slack_changeovers = 4;
};

void DeclareFields(MdpZonesOptions& o, FieldVisitor& v);

std::unique_ptr<Policy> MakeMdpZonesPolicy(MdpZonesOptions options = {});

// The expected number of further chain steps an up run in state `state`
// lasts (availability_chain.h's survival by run age); `cap` when the chain
// never saw such a run end.
double ExpectedUpSteps(const AvailabilityChain& chain, int state, double cap);

}  // namespace spot::policy
