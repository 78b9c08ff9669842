// `spot sim`: runs policies over recorded or synthetic markets.
//   spot sim policies              registered policy names, one a line
//   spot sim run  [flags]          one job from one start tick; --svg draws it
//   spot sim eval [flags]          S sampled starts per trace, per policy
//   spot sim eval --protocol P     the evaluation protocols of sim/protocol.h
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <filesystem>
#include <map>

#include "apps/spot/commands.h"
#include "apps/spot/name_list.h"
#include "apps/spot/sim_market.h"
#include "apps/spot/sim_report.h"
#include "control/controller.h"
#include "core/file_io.h"
#include "core/progress.h"
#include "fleet/migration.h"
#include "market/synthetic.h"
#include "policy/registry.h"
#include "sim/evaluate.h"
#include "sim/protocol.h"
#include "sim/svg_protocol.h"
#include "sim/svg_timeline.h"

namespace spot::cli {
namespace {

// The migration flags of `spot sim run|eval` (SimArgs, in commands.h, holds
// the rest) and the egress table they load. One set per process: `spot`
// parses one command line.
struct MigrationFlags {
  double checkpoint_gb = 0;  // --checkpoint-gb: the job's state moved across regions
  std::string egress;        // --egress F.csv: $/GB between regions
  fleet::EgressPrices prices;
  bool synthetic_fit =
      false;  // --synthetic-fit: each trace replaced by a synthetic one fitted to it
};
MigrationFlags& Migration() {
  static MigrationFlags flags;
  return flags;
}
// The run as `spot run` logs its decisions: per tick, where the job was after
// any preemption, where the policy put it, and the progress it saw.
std::string DecisionLog(const sim::RunResult& r, int64_t start_tick) {
  std::string out;
  double progress = 0;
  for (size_t t = 0; t < r.timeline.size(); ++t) {
    const sim::TickRecord& rec = r.timeline[t];
    control::DecisionRecord d{.tick = static_cast<int64_t>(t),
                              .abs_tick = start_tick + static_cast<int64_t>(t),
                              .progress_hours = progress,
                              .current = rec.current,
                              .preempted = rec.preempted,
                              .target = rec.fleet};
    progress = rec.progress;
    out += control::DecisionLogLine(d) + "\n";
  }
  return out;
}

void AddMarketAndJobFlags(CLI::App* cmd, SimArgs* a) {
  cmd->add_option("--trace", a->traces,
                  "Availability JSON, SkyNomad trace JSON or probe CSV (repeatable); default: the "
                  "built-in synthetic zones");
  cmd->add_option("--trace-convention", a->trace_convention,
                  "How a trace JSON's data read: available (instances obtainable, the shared "
                  "records'), preempted (1 = no spot, SkyNomad's), or auto (preempted where "
                  "metadata.price_info marks SkyNomad's format)")
      ->check(CLI::IsMember({"auto", "available", "preempted"}))
      ->capture_default_str();
  cmd->add_option("--prices", a->prices, "Spot price change-point CSV (zones by name)");
  cmd->add_flag("--multi-zone", a->multi_zone, "All traces are zones of one market");
  cmd->add_option("--compute-hours", a->compute_hours, "C: compute hours of the job")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  cmd->add_option("--deadline-hours", a->deadline_hours, "D: deadline, hours after the start")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  cmd->add_option("--changeover-hours", a->changeover_hours, "d: hours lost entering an instance")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  cmd->add_option("--ondemand-price", a->ondemand_price,
                  "k: on-demand $ per hour (default: the traces' own where they record one, "
                  "as SkyNomad's do, else 3)")
      ->check(CLI::PositiveNumber);
  cmd->add_option("--nodes", a->nodes, "N: reference instances of the job")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  cmd->add_option("--min-nodes", a->min_nodes,
                  "Ready instances below which the job makes no progress (0: N, a gang)")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  cmd->add_option("--seed", a->seed, "Seed of the synthetic market")->capture_default_str();
  cmd->add_option("--checkpoint-gb", Migration().checkpoint_gb,
                  "GB of state the job moves when it changes region (billed at --egress "
                  "prices; zones' regions from their names: us-east-1a is in us-east-1)")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  cmd->add_option("--egress", Migration().egress,
                  "Egress $/GB between regions (CSV: from_region,to_region,price_usd_per_gb)");
  cmd->add_flag("--synthetic-fit", Migration().synthetic_fit,
                "Replace every trace by a synthetic one fitted to it (its up and down runs for "
                "the gang of N, its prices), drawn with --seed on the same tick grid");
}

policy::JobSpec JobOf(const SimArgs& a) {
  return {.compute_hours = a.compute_hours,
          .deadline_hours = a.deadline_hours,
          .changeover_hours = a.changeover_hours,
          .nodes = a.nodes,
          .ondemand_price = a.ondemand_price,
          .min_nodes = a.min_nodes,
          .checkpoint_gb = Migration().checkpoint_gb,
          .egress = Migration().egress.empty() ? nullptr : &Migration().prices};
}

// --synthetic-fit: each trace becomes a draw of the synthetic model fitted
// to it (market/synthetic.h), named and placed as the trace.
Status FitSynthetic(std::vector<market::Trace>& traces, const SimArgs& a) {
  for (size_t i = 0; i < traces.size(); ++i) {
    market::Trace& t = traces[i];
    auto model = market::FitSyntheticModel(t, {.min_count = std::max(1, a.nodes)});
    if (!model.ok()) {
      return InvalidArgumentError("--synthetic-fit: " + t.name + ": " + model.status().message());
    }
    model->capacity = std::max(1, *std::max_element(t.available.begin(), t.available.end()));
    market::Trace s = market::GenerateSyntheticTrace(*model, t.ticks(), a.seed * 1000003 + i);
    s.name = t.name;
    s.source = "synthetic fit of " + t.name;
    s.pool = t.pool;
    s.ondemand_price = t.ondemand_price;
    t = std::move(s);
  }
  return Status::Ok();
}

// Loads --egress; a --checkpoint-gb without it is caught by the market's
// validation only when the zones span regions.
Status LoadEgress() {
  MigrationFlags& m = Migration();
  if (m.egress.empty()) return Status::Ok();
  auto prices = fleet::LoadEgressCsv(m.egress);
  if (!prices.ok()) {
    return InvalidArgumentError("--egress " + m.egress + ": " + prices.status().message());
  }
  m.prices = std::move(prices).value();
  return Status::Ok();
}

// Where the runs' on-demand price comes from.
struct OnDemandPricing {
  double k = 3;             // the job's k
  bool per_market = false;  // each market at its zones' recorded price instead
};

// How files not in the shared records' format were read (stderr).
void NoteHowTracesWereRead(const std::vector<market::Trace>& traces) {
  std::map<std::string, std::vector<std::string>> read_as;
  for (const auto& t : traces) {
    if (!t.read_as.empty()) read_as[t.read_as].push_back(t.name);
  }
  for (const auto& [how, names] : read_as) {
    fmt::print(stderr, "note: read as {}: {}\n", how, fmt::join(names, ", "));
  }
}

// --ondemand-price when given; else the traces' own (each market's, when
// they differ: `per_market`); else 3 (the setting of "Can't Be Late", spot
// at 1.0/h) when no trace records one. A multi-zone market whose zones record
// different prices, or traces of which only some record one, need the flag:
// SpotSim prices on-demand once per market. A note (stderr) says where the
// price came from.
Result<OnDemandPricing> ResolveOnDemandPrice(const std::vector<market::Trace>& traces, double flag,
                                             bool multi_zone) {
  constexpr double kDefaultOnDemandPrice = 3;
  const RecordedOnDemand r = RecordedOnDemandPrices(traces);
  if (flag > 0) {
    if (r.with > 0) {
      fmt::print(stderr, "note: on-demand at --ondemand-price ${:.4g}/h; the traces record {}\n",
                 flag, fmt::join(r.labels, ", "));
    }
    return OnDemandPricing{.k = flag};
  }
  if (r.with == 0) return OnDemandPricing{.k = kDefaultOnDemandPrice};
  if (r.with < traces.size() || (r.differ && multi_zone)) {
    return InvalidArgumentError(fmt::format(
        "--ondemand-price: not given, and the traces record {} on-demand prices ({}); {}: name "
        "the price",
        r.with < traces.size() ? "not all" : "different", fmt::join(r.labels, ", "),
        multi_zone ? "a multi-zone market prices on-demand once" : "a market needs one"));
  }
  if (r.differ) {
    fmt::print(stderr, "note: each zone's on-demand at the price its trace records: {}\n",
               fmt::join(r.labels, ", "));
    return OnDemandPricing{.k = r.price, .per_market = true};
  }
  fmt::print(stderr, "note: on-demand at ${:.4g}/h, the price the traces record\n", r.price);
  return OnDemandPricing{.k = r.price};
}

// The job on market `zones`: JobOf(a), at their recorded on-demand price
// when each market has its own.
policy::JobSpec JobOn(const SimArgs& a, std::span<const market::Trace* const> zones) {
  return a.ondemand_per_market ? sim::WithRecordedOnDemandPrice(JobOf(a), zones) : JobOf(a);
}

int Fail(const Status& s) {
  fmt::print(stderr, "error: {}\n", s.message());
  return s.code() == StatusCode::kInvalidArgument || s.code() == StatusCode::kNotFound
             ? kExitBadInput
             : kExitFailure;
}

// The markets to evaluate: one per trace, or one multi-zone market.
std::vector<SimMarket> Markets(const std::vector<market::Trace>& traces, bool multi_zone) {
  std::vector<SimMarket> out;
  if (multi_zone) {
    SimMarket m{"multi-zone", {}};
    for (const auto& t : traces) m.zones.push_back(&t);
    out.push_back(std::move(m));
    return out;
  }
  for (const auto& t : traces) out.push_back({t.name, {&t}});
  return out;
}

Result<std::vector<sim::PolicyStats>> EvalMarket(const policy::PolicyRegistry& reg,
                                                 const SimMarket& m, const SimArgs& a) {
  std::vector<sim::PolicyStats> out;
  for (const std::string& name : SplitNames(a.policies)) {
    Progress bar({.label = m.name + " " + name, .total = a.samples});
    auto st = sim::EvaluatePolicy(
        reg, name, m.zones, JobOn(a, m.zones), a.samples,
        [&bar](int done, int) { bar.Update(done, ""); }, a.threads);
    if (!st.ok()) return st.status().WithContext(m.name);
    bar.Finish(fmt::format("{:.3f} s", st->seconds));
    out.push_back(std::move(st).value());
  }
  return out;
}

int RunEval(const policy::PolicyRegistry& reg, const std::vector<market::Trace>& traces,
            const SimArgs& a) {
  if (SplitNames(a.policies).empty()) {
    return Fail(InvalidArgumentError("--policies: no policy named"));
  }
  std::vector<MarketReport> reports;
  for (const SimMarket& m : Markets(traces, a.multi_zone)) {
    auto st = EvalMarket(reg, m, a);
    if (!st.ok()) return Fail(st.status());
    reports.push_back({m.name, std::move(st).value()});
  }
  fmt::print("{}", a.format == "json" ? EvalJson(reports, a) : EvalTable(reports));
  return kExitOk;
}

// Which spot prices a trace was scored with, for the report.
std::string PricesOf(const market::Trace& t, const SimArgs& a) {
  const std::string od = a.ondemand_per_market
                             ? fmt::format("; on-demand ${:.4g}/h as recorded", t.ondemand_price)
                             : "";
  if (!a.prices.empty()) return std::filesystem::path(a.prices).filename().string() + od;
  if (t.has_prices()) return "the trace file's own series" + od;
  return "none recorded: spot at 1.0/h" + od;
}

int RunProtocolEval(const policy::PolicyRegistry& reg, const std::vector<market::Trace>& traces,
                    const SimArgs& a) {
  auto protocol = sim::ParseProtocol(a.protocol);
  if (!protocol.ok())
    return Fail(InvalidArgumentError("--protocol: " + protocol.status().message()));
  if (*protocol == sim::Protocol::kTimeSplit && !(a.train_fraction > 0 && a.train_fraction < 1)) {
    return Fail(InvalidArgumentError(
        fmt::format("--train-fraction: must be in (0, 1), got {}", a.train_fraction)));
  }
  if (a.runs && a.format != "json") {
    return Fail(InvalidArgumentError("--runs: lists runs in JSON only (--format json)"));
  }
  std::vector<std::string> policies = SplitNames(a.policies);
  if (policies.empty()) return Fail(InvalidArgumentError("--policies: no policy named"));
  for (const std::string& p : policies) {
    if (!reg.Has(p)) return Fail(InvalidArgumentError("--policies: unknown policy '" + p + "'"));
  }
  std::vector<sim::ProtocolMarket> markets;
  for (const SimMarket& m : Markets(traces, a.multi_zone)) {
    markets.push_back({m.name, m.zones, PricesOf(*m.zones[0], a)});
  }
  sim::ProtocolOptions opt{.protocol = *protocol,
                           .sampling = {.samples = a.samples, .every = a.start_every},
                           .train_fraction = a.train_fraction,
                           .bootstrap = {.resamples = a.bootstrap, .seed = a.bootstrap_seed},
                           .threads = a.threads,
                           .recorded_ondemand_price = a.ondemand_per_market};
  std::unique_ptr<Progress> bar;
  std::string stage;
  auto progress = [&](const std::string& s, int64_t done, int64_t total) {
    if (s != stage) {
      if (bar) bar->Finish("");
      bar = std::make_unique<Progress>(Progress::Options{.label = s, .total = total});
      stage = s;
    }
    bar->Update(done, "");
  };
  auto r = sim::RunProtocol(reg, markets, JobOf(a), policies, opt, progress);
  if (bar) bar->Finish("");
  if (!r.ok()) return Fail(r.status());
  if (!a.svg.empty()) {
    std::string title = fmt::format("{}: {}", sim::ProtocolName(*protocol), a.policies);
    Status w = WriteFileAtomically(a.svg, sim::RenderProtocolSvg(*r, title));
    if (!w.ok()) return Fail(InvalidArgumentError("--svg " + a.svg + ": " + w.message()));
    fmt::print(stderr, "picture: {}\n", a.svg);
  }
  fmt::print("{}", a.format == "json" ? ProtocolJson(*r, a.runs) : ProtocolTable(*r));
  return kExitOk;
}

int RunOne(const policy::PolicyRegistry& reg, const std::vector<market::Trace>& traces,
           const SimArgs& a) {
  auto p = reg.Create(a.policy);
  if (!p.ok()) return Fail(InvalidArgumentError("--policy: " + p.status().message()));
  SimMarket m = Markets(traces, a.multi_zone)[0];
  policy::JobSpec job = JobOn(a, m.zones);
  Status valid = sim::ValidateMarket(m.zones, job);
  if (!valid.ok()) return Fail(valid);
  if (a.start_tick < 0 || a.start_tick >= m.zones[0]->ticks()) {
    return Fail(InvalidArgumentError(fmt::format("--start-tick {} is outside the trace (0..{})",
                                                 a.start_tick, m.zones[0]->ticks() - 1)));
  }
  sim::RunResult r =
      sim::SimulateJob(**p, m.zones, a.start_tick, job,
                       {.record_timeline = !a.svg.empty() || !a.decision_log.empty()});
  fmt::print("{}", RunSummary(m.name, a.policy, r, a));
  if (!a.decision_log.empty()) {
    Status w = WriteFileAtomically(a.decision_log, DecisionLog(r, a.start_tick));
    if (!w.ok())
      return Fail(InvalidArgumentError("--decision-log " + a.decision_log + ": " + w.message()));
    fmt::print("decisions: {}\n", a.decision_log);
  }
  if (!a.svg.empty()) {
    std::string svg = sim::RenderTimelineSvg(r, m.zones, a.start_tick, job,
                                             fmt::format("{} on {}", a.policy, m.name));
    Status w = WriteFileAtomically(a.svg, svg);
    if (!w.ok()) return Fail(InvalidArgumentError("--svg " + a.svg + ": " + w.message()));
    fmt::print("timeline: {}\n", a.svg);
  }
  return kExitOk;
}

}  // namespace

CLI::App* AddSimCommand(CLI::App& app, SimArgs* a) {
  CLI::App* sim = app.add_subcommand("sim",
                                     "Simulate policies over recorded or synthetic "
                                     "spot markets (SpotSim); see docs/spotsim.md");
  sim->require_subcommand(1);
  CLI::App* policies = sim->add_subcommand("policies", "List the registered policies, one a line");
  policies->callback([a] { a->action = "policies"; });
  policies->add_flag("--params", a->params,
                     "Each policy with its help and its parameters (a Markdown table: name, "
                     "type, default, bounds, meaning)");
  CLI::App* run = sim->add_subcommand("run", "Run one job from one start tick");
  run->callback([a] { a->action = "run"; });
  AddMarketAndJobFlags(run, a);
  run->add_option("--policy", a->policy, "Policy name")->capture_default_str();
  run->add_option("--start-tick", a->start_tick, "Tick of the trace the job starts at")
      ->capture_default_str();
  run->add_option("--svg", a->svg, "Write a timeline picture (SVG) to this file");
  run->add_option("--decision-log", a->decision_log,
                  "Write one JSON line per tick (the format of `spot run`'s decision log)");
  CLI::App* eval = sim->add_subcommand("eval", "Evaluate policies over sampled job starts");
  eval->callback([a] { a->action = "eval"; });
  AddMarketAndJobFlags(eval, a);
  eval->add_option("--policies", a->policies, "Comma-separated policy names")
      ->capture_default_str();
  eval->add_option("--samples", a->samples,
                   "S: job starts per trace (with --protocol: per market part), evenly spaced")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  eval->add_option("--protocol", a->protocol,
                   "in-sample | loo | time-split: fit tunable parameters out of sample and "
                   "report intervals (docs/spotsim.md, Evaluation protocol)");
  eval->add_option("--start-every", a->start_every,
                   "With --protocol: a job start every K ticks instead of --samples")
      ->check(CLI::PositiveNumber);
  eval->add_option("--train-fraction", a->train_fraction,
                   "time-split: share of every trace the parameters are fitted on, in (0, 1)")
      ->capture_default_str();
  eval->add_option("--bootstrap", a->bootstrap, "Bootstrap resamples of the 95% intervals")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  eval->add_option("--bootstrap-seed", a->bootstrap_seed, "Seed of the bootstrap")
      ->capture_default_str();
  eval->add_option("--threads", a->threads,
                   "Simulation threads (0: one per core, at most 8); the figures do not depend "
                   "on it")
      ->check(CLI::Range(0, 256))
      ->capture_default_str();
  eval->add_flag("--runs", a->runs,
                 "With --protocol and --format json: list every scored start's run (start tick, "
                 "cost, on-demand and spot hours, deadline met, changeovers, preemptions)");
  eval->add_option("--svg", a->svg,
                   "With --protocol: write the ratio to up with its intervals (SVG) to this file");
  for (CLI::App* c : {run, eval}) {
    c->add_option("--format", a->format, "Output: table or json")
        ->check(CLI::IsMember({"table", "json"}))
        ->capture_default_str();
  }
  return sim;
}

int RunSim(const SimArgs& args) {
  SimArgs a = args;
  policy::PolicyRegistry reg;
  policy::RegisterBuiltinPolicies(reg);
  if (a.action == "policies") {
    for (const std::string& n : reg.Names()) {
      if (!a.params) {
        fmt::print("{}\n", n);
        continue;
      }
      fmt::print("### `{}`\n\n{}\n\n{}\n", n, reg.Help(n), FieldsMarkdown(reg.Fields(n)));
      std::string tunables;
      for (const policy::TunableParam& t : reg.Tunables(n)) {
        tunables += fmt::format("{}`{}` {{{}}}", tunables.empty() ? "" : ", ", t.name,
                                fmt::join(t.values, ", "));
      }
      if (!tunables.empty()) {
        fmt::print("Fitted by `spot sim eval --protocol loo|time-split` over: {}\n\n", tunables);
      }
    }
    return kExitOk;
  }
  if (Status e = LoadEgress(); !e.ok()) return Fail(e);
  auto convention = market::ParseTraceConvention(a.trace_convention);
  if (!convention.ok()) {
    return Fail(InvalidArgumentError("--trace-convention: " + convention.status().message()));
  }
  auto traces = LoadSimMarket({.traces = a.traces,
                               .prices = a.prices,
                               .synthetic_seed = a.seed,
                               .convention = *convention});
  if (!traces.ok()) return Fail(traces.status());
  if (traces->empty()) return Fail(InvalidArgumentError("no traces"));
  NoteHowTracesWereRead(*traces);
  auto k = ResolveOnDemandPrice(*traces, a.ondemand_price, a.multi_zone);
  if (!k.ok()) return Fail(k.status());
  a.ondemand_price = k->k;
  a.ondemand_per_market = k->per_market;
  if (Migration().synthetic_fit) {
    if (Status f = FitSynthetic(*traces, a); !f.ok()) return Fail(f);
  }
  if (a.action == "run") return RunOne(reg, *traces, a);
  if (a.protocol.empty()) {
    if (a.start_every > 0 || !a.svg.empty() || a.runs) {
      return Fail(InvalidArgumentError("--start-every, --svg and --runs of eval need --protocol"));
    }
    return RunEval(reg, *traces, a);
  }
  return RunProtocolEval(reg, *traces, a);
}

}  // namespace spot::cli
