#include "policy/registry.h"

#include "policy/baseline_policies.h"
#include "policy/forecast_aware.h"
#include "policy/hazard_up.h"
#include "policy/omniscient.h"
#include "policy/uniform_progress.h"

namespace spot::policy {

Status PolicyRegistry::Register(const std::string& name, std::string help, Factory factory) {
  if (name.empty()) return InvalidArgumentError("policy name is empty");
  if (entries_.count(name)) return InvalidArgumentError("policy '" + name + "' registered twice");
  entries_[name] = {std::move(help), std::move(factory)};
  return Status::Ok();
}

Result<std::unique_ptr<Policy>> PolicyRegistry::Create(const std::string& name) const {
  auto it = entries_.find(name);
  if (it == entries_.end()) {
    std::string known;
    for (const auto& [n, e] : entries_) known += (known.empty() ? "" : ", ") + n;
    return NotFoundError("unknown policy '" + name + "' (known: " + known + ")");
  }
  return it->second.factory();
}

std::vector<std::string> PolicyRegistry::Names() const {
  std::vector<std::string> names;
  for (const auto& [n, e] : entries_) names.push_back(n);
  return names;
}

const std::string& PolicyRegistry::Help(const std::string& name) const {
  return entries_.at(name).help;
}

void RegisterBuiltinPolicies(PolicyRegistry& r) {
  auto add = [&r](const std::string& name, std::string help, PolicyRegistry::Factory f) {
    Status s = r.Register(name, std::move(help), std::move(f));
    (void)s;  // builtin names are distinct; a clash is a programmer bug caught by tests
  };
  add("od", "on-demand only", [] { return MakeOnDemandPolicy(); });
  add("greedy", "spot when available, else idle; latched on-demand when R < C_left + 2d",
      [] { return MakeGreedyPolicy(); });
  add("up", "Uniform Progress (Can't Be Late, NSDI'24)",
      [] { return MakeUniformProgressPolicy(); });
  add("omniscient", "exact minimum cost knowing the future (DP; a lower bound)",
      [] { return MakeOmniscientPolicy(); });
  add("hazard-up", "ours: UP whose spot use follows the zones' history (survival, hour of day)",
      [] { return MakeHazardUpPolicy(); });
  add("forecast-up",
      "ours: UP acting on forecasts (zone by price and preemption risk, moves before a predicted "
      "preemption, waits for spot predicted to return or a predicted price drop when slack allows)",
      [] { return MakeForecastUpPolicy(); });
}

}  // namespace spot::policy
