#include "sim_workload.h"

#include <chrono>
#include <filesystem>

#include <fmt/format.h>

#include "market/loaders.h"
#include "market/synthetic.h"
#include "policy/registry.h"
#include "report.h"
#include "sim/evaluate.h"

namespace spot::bench {
namespace {

constexpr const char* kZones[] = {"us-east-1a", "us-east-1d", "us-east-2a", "us-west-2a",
                                  "us-west-2b"};

// The recorded zones with prices, or the synthetic ones; `source` says which.
Result<std::vector<market::Trace>> LoadZones(const std::string& data_dir, std::string* source) {
  namespace fs = std::filesystem;
  fs::path avail = fs::path(data_dir) / "availability" / "aws-v100-2023-02";
  fs::path prices = fs::path(data_dir) / "prices" / "aws_p3.2xlarge_spot_2023-02-15_2023-04-02.csv";
  if (!fs::exists(avail) || !fs::exists(prices)) {
    *source = "synthetic zones fitted to availability/aws-v100-2023-02 (records not found)";
    return market::DefaultSyntheticZones();
  }
  SPOT_ASSIGN_OR_RETURN(market::PriceTable table, market::LoadPriceTable(prices.string(), 195));
  std::vector<market::Trace> zones;
  for (const char* z : kZones) {
    SPOT_ASSIGN_OR_RETURN(market::Trace t, market::LoadAvailabilityJson(
                                               (avail / (std::string(z) + "_v100_1.json")).string()));
    SPOT_RETURN_IF_ERROR(market::AttachPrices(table, &t));
    zones.push_back(std::move(t));
  }
  *source = "availability/aws-v100-2023-02 (5 zones) with prices/aws_p3.2xlarge_spot_2023-02-15_"
            "2023-04-02.csv";
  return zones;
}

struct Timing {
  int runs = 0;
  double seconds = 0;
  double mean_cost = 0;  // over the zones
};

// Evaluates `policy` on every zone alone, `samples` starts each.
Result<Timing> TimePolicy(const policy::PolicyRegistry& registry, const std::string& policy,
                          const std::vector<market::Trace>& zones, int samples) {
  sim::JobSpec job{.compute_hours = 48, .deadline_hours = 60, .changeover_hours = 0.2,
                   .nodes = 1, .ondemand_price = 3.0};
  Timing t;
  auto t0 = std::chrono::steady_clock::now();
  for (const market::Trace& z : zones) {
    const market::Trace* one[] = {&z};
    SPOT_ASSIGN_OR_RETURN(sim::PolicyStats s,
                          sim::EvaluatePolicy(registry, policy, one, job, samples));
    t.runs += s.samples;
    t.mean_cost += s.mean_cost / static_cast<double>(zones.size());
  }
  t.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return t;
}

}  // namespace

Result<std::string> RunSimWorkload(const SimBenchOptions& o) {
  std::string source;
  SPOT_ASSIGN_OR_RETURN(std::vector<market::Trace> zones, LoadZones(o.data_dir, &source));
  policy::PolicyRegistry registry;
  policy::RegisterBuiltinPolicies(registry);
  Table table({"what", "runs", "seconds", "runs/s", "mean $", "goal", "result"});
  double fast_total = 0;
  for (const char* p : {"od", "greedy", "up", "hazard-up"}) {
    Progress(fmt::format("sim: {} on {} zones x {} samples", p, zones.size(), o.samples));
    SPOT_ASSIGN_OR_RETURN(Timing t, TimePolicy(registry, p, zones, o.samples));
    fast_total += t.seconds;
    table.AddRow({p, std::to_string(t.runs), fmt::format("{:.3f}", t.seconds),
                  fmt::format("{:.0f}", t.runs / t.seconds), fmt::format("{:.2f}", t.mean_cost),
                  "", ""});
  }
  table.AddRow({"eval od+greedy+up+hazard-up", std::to_string(4 * o.samples * 5),
                fmt::format("{:.3f}", fast_total), "", "", "< 1 s",
                fast_total < 1.0 ? "PASS" : "MISS"});
  Progress(fmt::format("sim: omniscient on {} zones x {} samples", zones.size(),
                       o.omniscient_samples));
  SPOT_ASSIGN_OR_RETURN(Timing om, TimePolicy(registry, "omniscient", zones, o.omniscient_samples));
  table.AddRow({"omniscient (exact DP)", std::to_string(om.runs), fmt::format("{:.1f}", om.seconds),
                fmt::format("{:.2f}", om.runs / om.seconds), fmt::format("{:.2f}", om.mean_cost),
                "", ""});
  return fmt::format(
      "## sim: SpotSim evaluation speed\n\nMarket: {}. Job: C = 48 h, D = 60 h, d = 0.2 h, "
      "k = 3 $/h, one node; each zone evaluated alone. Simulation only (traces loaded "
      "before timing), one thread.\n\n{}",
      source, table.ToMarkdown());
}

}  // namespace spot::bench
