#include "policy/registry.h"

#include "policy/baseline_policies.h"
#include "policy/fleet_up.h"
#include "policy/forecast_aware.h"
#include "policy/hazard_up.h"
#include "policy/omniscient.h"
#include "policy/uniform_progress.h"

namespace spot::policy {

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
  auto with = [&r]<typename Options>(const std::string& name, std::string help,
                                     std::unique_ptr<Policy> (*make)(Options)) {
    Status s = r.RegisterWithOptions<Options>(name, std::move(help),
                                              [make](const Options& o) { return make(o); });
    (void)s;
  };
  with("omniscient", "exact minimum cost knowing the future (DP; a lower bound)",
       &MakeOmniscientPolicy);
  with("hazard-up", "ours: UP whose spot use follows the zones' history (survival, hour of day)",
       &MakeHazardUpPolicy);
  with("forecast-up",
       "ours: UP acting on forecasts (zone by price and preemption risk, moves before a predicted "
       "preemption, waits for spot predicted to return or a predicted price drop when slack "
       "allows)",
       &MakeForecastUpPolicy);
  with("fleet-up",
       "UP for a fleet: N reference units from the cheapest spot pools per unit of throughput, "
       "spread over pools, topped up on demand when behind; a gang job is up's",
       &MakeFleetUpPolicy);
}

}  // namespace spot::policy
