// Small decision helpers shared by the rule-based policies.
#pragma once

#include "policy/observation.h"

namespace spot::policy {

// The spot zone to use now: the current spot zone while it has capacity
// (moving costs a changeover), else the cheapest zone with capacity (lowest
// index on ties); -1 when no zone has capacity.
int PickSpotZone(const Observation& obs);

// The "2d" safety net shared by greedy, up and ours: true when the remaining
// time is below the remaining work plus two changeovers.
inline bool BelowSafetyNet(const Observation& obs, double extra_hours = 0) {
  return obs.remaining_time() < obs.remaining_work() + 2 * obs.job.changeover_hours + extra_hours;
}

// The latched form of that net: once engaged it stays engaged for the rest
// of the job (on-demand to the end). Reset() at each job's start.
class LatchedSafetyNet {
 public:
  void Reset() { engaged_ = false; }
  // True when the job must be on on-demand now (and from now on).
  bool Engaged(const Observation& obs) {
    engaged_ = engaged_ || BelowSafetyNet(obs);
    return engaged_;
  }

 private:
  bool engaged_ = false;
};

}  // namespace spot::policy
