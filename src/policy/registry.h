// Policies by name, with their parameters (core/registry.h). Registration is
// explicit: call RegisterBuiltinPolicies() (static self-registration silently
// vanishes from static libraries).
#pragma once

#include "core/registry.h"
#include "policy/policy.h"

namespace spot::policy {

// Create() gives a fresh policy: NotFound (naming the known ones) for an
// unknown name, InvalidArgument for bad parameters.
class PolicyRegistry final : public Registry<Policy> {
 public:
  PolicyRegistry() : Registry("policy") {}
};

// od, greedy, up, omniscient, hazard-up, forecast-up, fleet-up.
void RegisterBuiltinPolicies(PolicyRegistry& registry);

}  // namespace spot::policy
