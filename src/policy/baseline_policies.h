// The two reference policies of "Can't Be Late" (NSDI'24):
//   od:     on-demand for the whole job.
//   greedy: spot whenever some zone has capacity, else idle; once the remaining
//           time drops below the remaining work + 2d it switches to on-demand
//           and stays there (latched) until the job completes.
#pragma once

#include <memory>

#include "policy/policy.h"

namespace spot::policy {

std::unique_ptr<Policy> MakeOnDemandPolicy();
std::unique_ptr<Policy> MakeGreedyPolicy();

}  // namespace spot::policy
