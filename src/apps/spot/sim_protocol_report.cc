// Output of `spot sim eval --protocol P` (declared in sim_report.h).
#include <fmt/format.h>

#include <nlohmann/json.hpp>

#include "apps/spot/sim_report.h"

namespace spot::cli {
namespace {

using nlohmann::ordered_json;

ordered_json DistJson(const sim::Distribution& d) {
  return {{"mean", d.mean}, {"p95", d.p95}, {"ci95", {d.ci.lo, d.ci.hi}}};
}

ordered_json StatsJson(const sim::ScoreStats& s) {
  return {{"samples", s.samples},
          {"cost", DistJson(s.cost)},
          {"ratio_to_up", DistJson(s.ratio_to_up)},
          {"deadline_misses", s.deadline_misses},
          {"misses_up_met", s.misses_up_met},
          {"mean_od_hours", s.mean_od_hours},
          {"mean_spot_hours", s.mean_spot_hours},
          {"share_above_od", s.share_above_od},
          {"od_mean_cost", s.od_mean_cost},
          {"savings_vs_od",
           [&] {
             ordered_json j = DistJson(s.savings_vs_od);
             j["max"] = s.max_savings_vs_od;
             return j;
           }()},
          {"restart_share", DistJson(s.restart_share)},
          {"mean_preemptions", s.mean_preemptions}};
}

ordered_json PolicyJson(const sim::PolicyScore& p) {
  ordered_json j = StatsJson(p.stats);
  j["params"] = p.params;
  j["fitted"] = p.fitted;
  if (p.fitted) {
    j["fit"] = {{"train_mean_cost", p.fit.train_mean_cost},
                {"candidates", p.fit.candidates},
                {"rejected", p.fit.rejected},
                {"constraint_met", p.fit.constraint_met},
                {"saving_vs_defaults", p.fit.saving_vs_defaults},
                {"saving_se", p.fit.saving_se},
                {"kept_defaults", p.fit.kept_defaults}};
  }
  return j;
}

std::string Header() {
  return fmt::format(
      "{:<12} {:<44} {:>9} {:>19} {:>9} {:>7} {:>15} {:>7} {:>6} {:>7} {:>5} {:>6} {:>6} {:>7}\n",
      "policy", "params", "mean $", "95% CI $", "p95 $", "vs up", "95% CI", "p95/od", "miss",
      "od h", ">od", "saved", "best", "restart");
}

std::string Row(const std::string& policy, const std::string& params, const sim::ScoreStats& s) {
  const sim::Distribution &c = s.cost, &r = s.ratio_to_up;
  return fmt::format(
      "{:<12} {:<44} {:>9.2f} {:>19} {:>9.2f} {:>7.4f} {:>15} {:>7.3f} {:>6} {:>7.2f} {:>4.0f}% "
      "{:>5.1f}% {:>5.1f}% {:>6.2f}%\n",
      policy, params, c.mean, fmt::format("[{:.2f}, {:.2f}]", c.ci.lo, c.ci.hi), c.p95, r.mean,
      fmt::format("[{:.4f}, {:.4f}]", r.ci.lo, r.ci.hi), c.p95 / s.od_mean_cost,
      fmt::format("{}({})", s.deadline_misses, s.misses_up_met), s.mean_od_hours,
      100 * s.share_above_od, 100 * s.savings_vs_od.mean, 100 * s.max_savings_vs_od,
      100 * s.restart_share.mean);
}

}  // namespace

std::string ProtocolDescription(sim::Protocol p) {
  switch (p) {
    case sim::Protocol::kInSample:
      return "in-sample: registered defaults, chosen on these traces (not out of sample)";
    case sim::Protocol::kLeaveOneOut:
      return "loo: parameters fitted on the other markets, scored on the one left out";
    case sim::Protocol::kTimeSplit:
      return "time-split: parameters fitted on the first part of every trace, scored on the rest";
  }
  return "";
}

std::string ProtocolJson(const sim::ProtocolResult& r, bool runs) {
  ordered_json j;
  j["protocol"] = sim::ProtocolName(r.options.protocol);
  j["description"] = ProtocolDescription(r.options.protocol);
  const sim::JobSpec& job = r.job;
  j["job"] = {{"compute_hours", job.compute_hours},
              {"deadline_hours", job.deadline_hours},
              {"changeover_hours", job.changeover_hours},
              {"ondemand_price", job.ondemand_price},
              {"ondemand_price_recorded_per_market", r.options.recorded_ondemand_price},
              {"nodes", job.nodes},
              {"min_nodes", job.min_nodes}};
  j["sampling"] = {{"samples", r.options.sampling.every > 0 ? 0 : r.options.sampling.samples},
                   {"every_ticks", r.options.sampling.every}};
  if (r.options.protocol == sim::Protocol::kTimeSplit) {
    j["train_fraction"] = r.options.train_fraction;
  }
  j["bootstrap"] = {{"resamples", r.options.bootstrap.resamples},
                    {"seed", r.options.bootstrap.seed},
                    {"level", r.options.bootstrap.level}};
  j["markets"] = ordered_json::array();
  for (const sim::MarketResult& m : r.markets) {
    ordered_json mj = {{"name", m.name},
                       {"prices", m.prices},
                       {"ticks", m.ticks},
                       {"score_window", {m.score_begin, m.score_end}},
                       {"starts", m.starts.size()},
                       {"trained_on", m.trained}};
    mj["policies"] = ordered_json::object();
    for (const sim::PolicyScore& p : m.policies) {
      ordered_json pj = PolicyJson(p);
      if (runs) {
        pj["runs"] = ordered_json::array();
        for (const sim::StartRun& s : p.runs) {
          pj["runs"].push_back({{"start", s.start},
                                {"cost", s.cost},
                                {"od_hours", s.od_hours},
                                {"spot_hours", s.spot_hours},
                                {"met_deadline", s.met_deadline},
                                {"changeovers", s.changeovers},
                                {"preemptions", s.preemptions}});
        }
      }
      mj["policies"][p.policy] = std::move(pj);
    }
    j["markets"].push_back(std::move(mj));
  }
  j["pooled"] = ordered_json::object();
  for (const sim::PolicyScore& p : r.pooled) j["pooled"][p.policy] = StatsJson(p.stats);
  j["simulated_runs"] = r.simulated;
  j["seconds"] = r.seconds;
  return j.dump(2) + "\n";
}

std::string ProtocolTable(const sim::ProtocolResult& r) {
  const sim::JobSpec& job = r.job;
  std::string out = fmt::format(
      "{}\njob: C {} h, D {} h, d {} h, k {}, N {}; starts: {}; bootstrap {} resamples\n"
      "vs up: mean of cost / up's cost on the same start; p95/od: p95 cost / od's mean cost; "
      "miss: deadline misses (of them where up met it); >od: starts costing more than od; "
      "saved: mean of 1 - cost / od's cost on the same start; best: its largest; restart: "
      "hours restarting (changeovers x d) / C\n\n",
      ProtocolDescription(r.options.protocol), job.compute_hours, job.deadline_hours,
      job.changeover_hours,
      r.options.recorded_ondemand_price ? std::string("each market's recorded on-demand price")
                                        : fmt::format("${}/h", job.ondemand_price),
      job.nodes,
      r.options.sampling.every > 0 ? fmt::format("one every {} ticks", r.options.sampling.every)
                                   : fmt::format("{} per market", r.options.sampling.samples),
      r.options.bootstrap.resamples);
  for (const sim::MarketResult& m : r.markets) {
    out +=
        fmt::format("{} ({} starts in ticks [{}, {}) of {}; prices: {}{})\n", m.name,
                    m.starts.size(), m.score_begin, m.score_end, m.ticks, m.prices,
                    r.options.protocol == sim::Protocol::kLeaveOneOut ? "; fitted without it" : "");
    out += Header();
    for (const sim::PolicyScore& p : m.policies) {
      out += Row(p.policy, policy::FormatParams(p.params), p.stats);
    }
    out += "\n";
  }
  out += fmt::format(
      "pooled over {} markets (each market's starts; intervals resample within "
      "each market)\n",
      r.markets.size());
  out += Header();
  for (const sim::PolicyScore& p : r.pooled) out += Row(p.policy, "", p.stats);
  out += fmt::format("\n{} runs simulated in {:.1f} s\n", r.simulated, r.seconds);
  return out;
}

}  // namespace spot::cli
