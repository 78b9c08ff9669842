#include "policy/registry.h"

#include <set>

#include "policy/baseline_policies.h"
#include "policy/fleet_up.h"
#include "policy/forecast_aware.h"
#include "policy/hazard_up.h"
#include "policy/mdp_policy.h"
#include "policy/mdp_zones.h"
#include "policy/omniscient.h"
#include "policy/uniform_progress.h"

namespace spot::policy {

ComponentConfig PolicyConfig(const std::string& name, const ParamSet& params) {
  ComponentConfig c{.name = name, .params = params, .field = "policy"};
  return c;
}

std::string FormatParams(const ParamSet& params) {
  if (params.empty()) return "defaults";
  std::string out;
  for (const auto& [k, v] : params) out += (out.empty() ? "" : ", ") + k + "=" + v;
  return out;
}

Status PolicyRegistry::SetTunables(const std::string& name, std::vector<TunableParam> params) {
  if (!Has(name)) return NotFoundError("tunables of unknown policy '" + name + "'");
  std::set<std::string> fields, seen;
  for (const FieldInfo& f : Fields(name)) fields.insert(f.name);
  for (const TunableParam& p : params) {
    if (!fields.count(p.name)) {
      return InvalidArgumentError("policy '" + name + "' has no parameter '" + p.name + "'");
    }
    if (!seen.insert(p.name).second) {
      return InvalidArgumentError("tunable '" + p.name + "' of '" + name + "' listed twice");
    }
    if (p.values.empty()) {
      return InvalidArgumentError("tunable '" + p.name + "' of '" + name + "' has no values");
    }
  }
  std::vector<TunableParam> old = std::move(tunables_[name]);
  tunables_[name] = std::move(params);
  for (const ParamSet& point : Grid(name)) {
    Status s = Validate(PolicyConfig(name, point));
    if (!s.ok()) {
      tunables_[name] = std::move(old);
      return s.WithContext("tunables of '" + name + "'");
    }
  }
  return Status::Ok();
}

const std::vector<TunableParam>& PolicyRegistry::Tunables(const std::string& name) const {
  static const std::vector<TunableParam> kNone;
  auto it = tunables_.find(name);
  return it == tunables_.end() ? kNone : it->second;
}

std::vector<ParamSet> PolicyRegistry::Grid(const std::string& name) const {
  std::vector<ParamSet> grid(1);
  for (const TunableParam& p : Tunables(name)) {
    std::vector<ParamSet> next;
    for (const ParamSet& partial : grid) {
      for (const std::string& v : p.values) {
        ParamSet point = partial;
        point[p.name] = v;
        next.push_back(std::move(point));
      }
    }
    grid = std::move(next);
  }
  return grid;
}

void RegisterBuiltinPolicies(PolicyRegistry& r) {
  // Builtin names and tunables are fixed here; a clash or a bad grid is a
  // programmer bug that policy_test's RegistryTunables tests catch.
  auto add = [&r](const std::string& name, std::string help, PolicyRegistry::Factory f) {
    Status s = r.Register(name, std::move(help), std::move(f));
    (void)s;
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
  with("mdp",
       "ours: plans over a Markov chain of availability fitted to the market's history (hazard "
       "by run age, spot price), solved backward as a decision process; UP's safety net",
       &MakeMdpPolicy);
  with("mdp-zones",
       "ours: mdp for markets of several zones and regions: enters the zone of least expected "
       "cost per hour of progress (its own chain's run length, its price, the migration), moves "
       "only when the saving beats the move's cost; mdp on one zone",
       &MakeMdpZonesPolicy);
  with("forecast-up",
       "ours: UP acting on forecasts (zone by price and preemption risk, moves before a predicted "
       "preemption, waits for spot predicted to return or a predicted price drop when slack "
       "allows)",
       &MakeForecastUpPolicy);
  with("fleet-up",
       "UP for a fleet: N reference units from the cheapest spot pools per unit of throughput, "
       "spread over pools, topped up on demand when behind; a gang job is up's",
       &MakeFleetUpPolicy);
  // What the evaluation protocols may fit (sim/protocol.h), defaults first.
  // hazard-up: how long a spot run must promise to last before it leaves
  // on-demand, and below what availability it waits for spot (0: never).
  (void)r.SetTunables("hazard-up", {{"breakeven_scale", {"1", "0.5", "2"}},
                                    {"scarce_availability", {"0.25", "0", "0.5"}}});
  // forecast-up: how sure it must be that spot returns before it waits for
  // it (1: never waits), and the price drop worth waiting for (1: never).
  (void)r.SetTunables("forecast-up", {{"spot_wait_probability", {"0.5", "0.8", "1"}},
                                      {"price_drop", {"0.1", "0.25", "1"}}});
  // mdp: how far back the chain looks, how much more recent runs count
  // (a market that changes), and how much it trusts spot runs.
  (void)r.SetTunables("mdp", {{"history_window_hours", {"336", "72"}},
                              {"history_half_life_hours", {"0", "48"}},
                              {"spot_hazard_scale", {"1", "2"}}});
  // mdp-zones: mdp's window, and how much a voluntary move must save.
  (void)r.SetTunables("mdp-zones",
                      {{"history_window_hours", {"336", "72"}}, {"move_margin", {"2", "1"}}});
}

}  // namespace spot::policy
