// Uniform Progress (UP), "Can't Be Late: Optimizing Spot Instance Savings
// under Deadlines" (Wu et al., NSDI'24), with the paper's refinements. With
// ep(t) = t * C / D the uniform-progress line, at each tick, in this order:
//   1. safety net: once remaining time < remaining work + 2d, on-demand until
//      the end (latched);
//   2. hysteresis: on on-demand and progress < ep(t + 2d): stay on on-demand;
//   3. exploitation: spot whenever a zone has capacity (even when ahead);
//   4. behind (progress < ep(t)): on-demand;
//   5. else idle.
#pragma once

#include <memory>

#include "policy/policy.h"

namespace spot::policy {

std::unique_ptr<Policy> MakeUniformProgressPolicy();

// ep(t): the progress a job of `job` should have at time t (hours).
inline double ExpectedProgress(const JobSpec& job, double t) {
  return t * job.compute_hours / job.deadline_hours;
}

}  // namespace spot::policy
