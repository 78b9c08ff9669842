#include "apps/spot/sim_report.h"

#include <fmt/format.h>

#include <nlohmann/json.hpp>

namespace spot::cli {

std::string EvalJson(const std::vector<MarketReport>& reports, const SimArgs& a) {
  nlohmann::ordered_json j;
  j["job"] = {{"compute_hours", a.compute_hours}, {"deadline_hours", a.deadline_hours},
              {"changeover_hours", a.changeover_hours}, {"ondemand_price", a.ondemand_price},
              {"nodes", a.nodes}};
  j["samples"] = a.samples;
  j["traces"] = nlohmann::ordered_json::object();
  for (const MarketReport& m : reports) {
    auto& t = j["traces"][m.name];
    for (const sim::PolicyStats& s : m.stats) {
      t[s.policy] = {{"mean_cost", s.mean_cost},           {"p50_cost", s.p50_cost},
                     {"p95_cost", s.p95_cost},             {"deadline_misses", s.deadline_misses},
                     {"mean_spot_hours", s.mean_spot_hours}, {"mean_od_hours", s.mean_od_hours},
                     {"seconds", s.seconds}};
    }
  }
  return j.dump(2) + "\n";
}

std::string EvalTable(const std::vector<MarketReport>& reports) {
  std::string out;
  for (const MarketReport& m : reports) {
    double od = 0;
    for (const auto& s : m.stats) {
      if (s.policy == "od") od = s.mean_cost;
    }
    out += fmt::format("{}\n{:<12} {:>10} {:>7} {:>10} {:>10} {:>7} {:>8} {:>8} {:>8}\n", m.name,
                       "policy", "mean $", "vs od", "p50 $", "p95 $", "misses", "spot h",
                       "od h", "time s");
    for (const auto& s : m.stats) {
      std::string rel = od > 0 ? fmt::format("{:.3f}", s.mean_cost / od) : "";
      out += fmt::format("{:<12} {:>10.2f} {:>7} {:>10.2f} {:>10.2f} {:>7} {:>8.2f} {:>8.2f} "
                         "{:>8.3f}\n",
                         s.policy, s.mean_cost, rel, s.p50_cost, s.p95_cost, s.deadline_misses,
                         s.mean_spot_hours, s.mean_od_hours, s.seconds);
    }
    out += "\n";
  }
  return out;
}

std::string RunSummary(const std::string& market, const std::string& policy,
                       const sim::RunResult& r, const SimArgs& a) {
  if (a.format == "json") {
    nlohmann::ordered_json j = {
        {"market", market},          {"policy", policy},         {"start_tick", a.start_tick},
        {"cost", r.cost},            {"spot_hours", r.spot_hours}, {"od_hours", r.od_hours},
        {"finish_hours", r.finish_hours}, {"met_deadline", r.met_deadline},
        {"changeovers", r.changeovers},   {"preemptions", r.preemptions}};
    return j.dump(2) + "\n";
  }
  return fmt::format(
      "{} on {} from tick {}: cost ${:.2f} (spot {:.2f} h, on-demand {:.2f} h), finished at "
      "{:.2f} h of {:.2f} h: deadline {}; {} changeovers, {} preemptions\n",
      policy, market, a.start_tick, r.cost, r.spot_hours, r.od_hours, r.finish_hours,
      a.deadline_hours, r.met_deadline ? "met" : "MISSED", r.changeovers, r.preemptions);
}

}  // namespace spot::cli
