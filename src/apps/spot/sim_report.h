// Output of `spot sim run` and `spot sim eval`: the JSON the issue fixes and a
// table with cost relative to on-demand.
#pragma once

#include <string>
#include <vector>

#include "apps/spot/commands.h"
#include "market/trace.h"
#include "sim/evaluate.h"
#include "sim/protocol.h"

namespace spot::cli {

// One market being evaluated: a trace, or several as zones ("multi-zone").
struct SimMarket {
  std::string name;
  std::vector<const market::Trace*> zones;
};

struct MarketReport {
  std::string name;
  std::vector<sim::PolicyStats> stats;
};

// {"traces": {"<name>": {"<policy>": {"mean_cost", "p50_cost", "p95_cost",
//   "deadline_misses", "mean_spot_hours", "mean_od_hours", "seconds"}}},
//  "job": {...}, "samples": S}
std::string EvalJson(const std::vector<MarketReport>& reports, const SimArgs& args);
// Per market: one row per policy; "vs od" is mean cost / mean cost of od
// (blank when od was not evaluated).
std::string EvalTable(const std::vector<MarketReport>& reports);
// `spot sim eval --protocol P`: one JSON document (docs/spotsim.md,
// "Evaluation protocol") and a table per market plus the pooled one.
// With `runs`, each market's policies list every scored start's run (its
// start tick, cost, on-demand and spot hours, deadline, changeovers,
// preemptions): the starts behind a mean or a p95.
std::string ProtocolJson(const sim::ProtocolResult& result, bool runs = false);
std::string ProtocolTable(const sim::ProtocolResult& result);
// What the protocol means, in one line ("loo: parameters fitted on the other
// markets, scored on the one left out").
std::string ProtocolDescription(sim::Protocol protocol);

std::string RunSummary(const std::string& market, const std::string& policy,
                       const sim::RunResult& r, const SimArgs& args);

}  // namespace spot::cli
