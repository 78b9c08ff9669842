// Policies by name, with their parameters (core/registry.h). Registration is
// explicit: call RegisterBuiltinPolicies() (static self-registration silently
// vanishes from static libraries).
//
// A policy may also declare TUNABLE parameters: a few of its declared fields,
// each with the values an evaluation protocol (sim/protocol.h) may try when it
// fits the policy on training data. The grid is the Cartesian product of those
// values, in declaration order; every tunable's first value is its default, so
// grid point 0 is the policy as registered.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "core/registry.h"
#include "policy/policy.h"

namespace spot::policy {

// One tunable parameter: a declared field and the values to try, written as a
// job file writes them ("0.25", "true"). values[0] is the field's default.
struct TunableParam {
  std::string name;
  std::vector<std::string> values;
};

// One point of a policy's grid: parameter -> value as written.
using ParamSet = std::map<std::string, std::string>;

// Create() gives a fresh policy: NotFound (naming the known ones) for an
// unknown name, InvalidArgument for bad parameters. Not thread-safe while
// registering; lookups are const.
class PolicyRegistry final : public Registry<Policy> {
 public:
  PolicyRegistry() : Registry("policy") {}

  // Declares `name`'s tunable parameters (replacing any). InvalidArgument
  // unless `name` is registered, each parameter is one of its fields and
  // listed once, has at least one value, and every grid point is accepted
  // by Validate().
  Status SetTunables(const std::string& name, std::vector<TunableParam> params);
  // The tunables of `name` (empty: nothing to fit).
  const std::vector<TunableParam>& Tunables(const std::string& name) const;
  // Every grid point of `name`, in order (one empty ParamSet when it has no
  // tunables).
  std::vector<ParamSet> Grid(const std::string& name) const;

 private:
  std::map<std::string, std::vector<TunableParam>> tunables_;
};

// The config that creates policy `name` with `params`.
ComponentConfig PolicyConfig(const std::string& name, const ParamSet& params);
// "breakeven_scale=1, scarce_availability=0.25" ("defaults" when empty).
std::string FormatParams(const ParamSet& params);

// od, greedy, up, omniscient, hazard-up, mdp, mdp-zones, forecast-up,
// fleet-up; with the tunables of hazard-up, forecast-up, mdp and mdp-zones.
void RegisterBuiltinPolicies(PolicyRegistry& registry);

}  // namespace spot::policy
