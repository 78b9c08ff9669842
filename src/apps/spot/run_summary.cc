#include "apps/spot/run_summary.h"

#include <fmt/format.h>

#include <algorithm>
#include <filesystem>
#include <map>
#include <nlohmann/json.hpp>

#include "apps/spot/exit_code.h"
#include "core/file_io.h"
#include "core/job_files.h"
#include "policy/registry.h"
#include "sim/spot_sim.h"

namespace spot::cli {
namespace {

namespace fs = std::filesystem;

std::string Duration(double s) {
  int64_t t = static_cast<int64_t>(s + 0.5);
  return t >= 60 ? fmt::format("{}m {:02d}s", t / 60, t % 60) : fmt::format("{}s", t);
}

// SpotSim's run of `policy` on the job's market segment, the job taking
// `compute_hours` on one gang (-1 cost on failure).
sim::RunResult Predict(const ComponentConfig& policy, control::RunSpec spec, double compute_hours,
                       const std::vector<market::Trace>& zones) {
  policy::PolicyRegistry registry;
  policy::RegisterBuiltinPolicies(registry);
  auto p = registry.Create(policy);
  std::vector<const market::Trace*> z;
  for (const market::Trace& t : zones) z.push_back(&t);
  spec.compute_hours = compute_hours;
  sim::RunResult r;
  r.cost = -1;
  if (!p.ok() || !sim::ValidateMarket(z, control::ToPolicyJob(spec)).ok()) return r;
  return sim::SimulateJob(**p, z, spec.market.start_tick, control::ToPolicyJob(spec));
}

// SpotSim's view of the job: at the speed the run measured where it is
// known (else at the job file's estimate), and at the estimate.
struct Prediction {
  double measured_hours = -1;  // the job's compute hours at the measured speed; -1 unknown
  double used_hours = 0;       // what `od` and `policy` were run with
  sim::RunResult od;           // on demand only
  sim::RunResult policy;       // the job's policy
  sim::RunResult at_estimate;  // the job's policy at the job file's compute_hours
};

Prediction PredictJob(control::JobStore& store, const control::RunSpec& spec,
                      const std::vector<market::Trace>& zones, const control::JobOutcome& o) {
  Prediction p;
  auto decisions = store.Decisions(spec.name);
  if (decisions.ok() && !zones.empty()) {
    p.measured_hours =
        MeasuredComputeHours(*decisions, zones[0].gap_seconds / 3600, spec.compute_hours,
                             spec.resources.changeover_hours,
                             o.state == control::JobState::kSucceeded ? o.sim_hours : -1);
  }
  p.used_hours = p.measured_hours > 0 ? p.measured_hours : spec.compute_hours;
  p.od = Predict(ComponentConfig{.name = "od"}, spec, p.used_hours, zones);
  p.policy = Predict(spec.policy, spec, p.used_hours, zones);
  p.at_estimate = Predict(spec.policy, spec, spec.compute_hours, zones);
  return p;
}

// What the store holds of a finished job, read once for the summary.
struct JobRecords {
  std::vector<control::LedgerEntry> ledger;
  std::vector<control::InstanceRecord> instances;
  std::vector<control::EventRecord> events;
};

// Empty lists where the store cannot be read: the summary then shows no spend.
JobRecords ReadRecords(control::JobStore& store, const std::string& job) {
  JobRecords r;
  auto ledger = store.Ledger(job);
  auto instances = store.Instances(job, false);
  auto events = store.Events(job);
  if (ledger.ok() && instances.ok()) {
    r.ledger = std::move(*ledger);
    r.instances = std::move(*instances);
  }
  if (events.ok()) r.events = std::move(*events);
  return r;
}

struct Spend {
  double spot_usd = 0;
  double od_usd = 0;
};

Spend Billed(const JobRecords& records) {
  std::map<std::string, bool> spot;  // instance id -> spot
  for (const control::InstanceRecord& r : records.instances) spot[r.id] = r.spot;
  Spend s;
  for (const control::LedgerEntry& e : records.ledger) {
    auto it = spot.find(e.instance_id);
    if (it != spot.end()) (it->second ? s.spot_usd : s.od_usd) += e.usd;
  }
  return s;
}

// The instances a make-before-break handover kept past the model's release
// (events `handover-wait`) while the new gang joined the training, and what
// that time cost (their ledger from the wait on).
struct Handovers {
  int kept = 0;
  int timed_out = 0;
  double hours = 0;  // instance-hours kept
  double usd = 0;
};

Handovers KeptForHandovers(const JobRecords& records) {
  Handovers h;
  std::map<std::string, double> waited_from;
  for (const control::EventRecord& e : records.events) {
    if (e.kind == "handover-wait" && waited_from.emplace(e.instance_id, e.sim_s).second) ++h.kept;
    h.timed_out += e.kind == "handover-timeout";
  }
  for (const control::InstanceRecord& r : records.instances) {
    auto w = waited_from.find(r.id);
    if (w != waited_from.end() && r.ended_s)
      h.hours += std::max(0.0, *r.ended_s - w->second) / 3600;
  }
  for (const control::LedgerEntry& e : records.ledger) {
    auto w = waited_from.find(e.instance_id);
    if (w == waited_from.end() || e.to_s <= w->second || e.to_s <= e.from_s) continue;
    h.usd += e.usd * (e.to_s - std::max(e.from_s, w->second)) / (e.to_s - e.from_s);
  }
  return h;
}

struct Trained {
  double accuracy = -1;
  int64_t steps = 0;
};

Trained ReadTrained(const std::string& job_dir) {
  Trained t;
  auto summary = ReadFile(JobFiles{job_dir}.summary());
  if (!summary.ok()) {
    // A command workload's program writes no summary: what it reported.
    auto progress = ReadFile(JobFiles{job_dir}.progress());
    auto p =
        progress.ok() ? ParseProgressReport(*progress) : Result<ProgressReport>(progress.status());
    if (p.ok() && p->done) {
      t.accuracy = p->test_accuracy;
      t.steps = p->step;
    }
    return t;
  }
  auto j = nlohmann::json::parse(*summary, nullptr, false);
  if (j.is_discarded()) return t;
  t.accuracy = j.value("test_accuracy", -1.0);
  t.steps = j.value("steps", int64_t{0});
  return t;
}

void PrintPrediction(const control::RunSpec& spec, const Prediction& p, double saving) {
  const std::string speed = p.measured_hours > 0 ? "at the measured speed" : "at the estimate";
  if (p.measured_hours > 0) {
    fmt::print(
        "  training speed        {:.2f} h of one gang's compute for the job, measured "
        "(the job file estimates {:.2f} h)\n",
        p.measured_hours, spec.compute_hours);
  } else {
    fmt::print(
        "  training speed        not measured (no progress recorded); predictions use the "
        "job file's {:.2f} h\n",
        spec.compute_hours);
  }
  if (p.od.cost > 0) {
    fmt::print("  on demand only        ${:.2f} (SpotSim, policy od, same job {}): {:.0f}% saved\n",
               p.od.cost, speed, saving * 100);
  }
  if (p.policy.cost >= 0) {
    fmt::print(
        "  SpotSim predicted     ${:.2f} for {} on this market segment {} ({} preemptions, "
        "{:.2f} h)",
        p.policy.cost, spec.policy.name, speed, p.policy.preemptions, p.policy.finish_hours);
    if (p.measured_hours > 0 && p.at_estimate.cost >= 0) {
      fmt::print("; ${:.2f} at the estimate", p.at_estimate.cost);
    }
    fmt::print("\n");
  }
}

}  // namespace

double MeasuredComputeHours(const std::vector<control::DecisionRecord>& decisions, double gap_hours,
                            double compute_hours, double changeover_hours, double finished_hours) {
  if (decisions.empty() || !(compute_hours > 0) || !(gap_hours > 0)) return -1;
  // Tick t's decision holds its `target` through the tick. Unfinished, the
  // last record's progress is what the ticks before it did; finished, the
  // job was done `finished_hours` after its start, within or after the last tick.
  const bool finished = finished_hours >= 0;
  const size_t counted = finished ? decisions.size() : decisions.size() - 1;
  double held = 0;
  int changes = 0;
  for (size_t t = 0; t < counted; ++t) {
    const control::DecisionRecord& d = decisions[t];
    if (d.target == "idle") continue;
    const double start = static_cast<double>(d.tick) * gap_hours;
    held += t + 1 < decisions.size() || !finished
                ? gap_hours
                : std::clamp(finished_hours - start, 0.0, gap_hours);
    changes += d.target != d.current;
  }
  const double done = finished ? 1 : decisions.back().progress_hours / compute_hours;
  const double working = held - changes * changeover_hours;
  return done > 0 && working > 0 ? working / done : -1;
}

int PrintRunSummary(control::JobStore& store, const control::RunSpec& spec, const RunMarket& market,
                    const std::string& job_dir, const control::JobOutcome& o,
                    int64_t step_log_lines) {
  const JobRecords records = ReadRecords(store, spec.name);
  const Spend spend = Billed(records);
  const Trained trained = ReadTrained(job_dir);
  const Prediction p = PredictJob(store, spec, market.zones, o);
  const int64_t redone =
      trained.steps > 0 ? std::max<int64_t>(0, step_log_lines - trained.steps) : -1;
  const double saving = p.od.cost > 0 ? 1 - o.cost_usd / p.od.cost : 0;

  fmt::print("\njob {} {}: {}\n", spec.name, control::JobStateName(o.state), o.message);
  if (trained.accuracy >= 0)
    fmt::print("  test accuracy         {:.2f}%\n", trained.accuracy * 100);
  fmt::print("  wall time             {}{}\n", Duration(o.wall_seconds),
             o.resumed ? " (this controller process; the job was resumed)" : "");
  fmt::print("  simulated time        {:.2f} h (market time x{:.0f}; deadline {:.1f} h)\n",
             o.sim_hours, spec.market.time_compression, spec.deadline_hours);
  fmt::print("  market                {}\n", market.description);
  for (const std::string& s : market.stand_ins) fmt::print("  SYNTHETIC stand-in    {}\n", s);
  fmt::print("  cost                  ${:.2f} (spot ${:.2f}, on-demand ${:.2f})\n", o.cost_usd,
             spend.spot_usd, spend.od_usd);
  PrintPrediction(spec, p, saving);
  fmt::print(
      "  preemptions survived  {} ({} interruption notices to instances, {} instances reclaimed)\n",
      o.preemptions, o.notices, o.instances_reclaimed);
  if (redone >= 0) {
    fmt::print("  work lost             {} steps redone of {}\n", redone, trained.steps);
  }
  const Handovers handovers = KeptForHandovers(records);
  if (handovers.kept > 0) {
    fmt::print(
        "  handovers             {} instances kept {:.3f} instance-hours (${:.2f}) past the "
        "policy's release until the new gang joined; {} timed out\n",
        handovers.kept, handovers.hours, handovers.usd, handovers.timed_out);
  }
  if (spec.command.enabled()) {
    fmt::print(
        "  program               {} failures (max_restarts_on_errors {}), {} recoveries, {} "
        "killed at the reclaim\n",
        o.program_failures, spec.command.max_restarts_on_errors, o.program_recoveries,
        o.killed_at_reclaim);
  }
  fmt::print(
      "  decisions             {} ticks, {} launches; reconcile {:.0f} us mean, {:.0f} us max\n",
      o.decisions, o.launches, o.reconcile_us_mean, o.reconcile_us_max);
  fmt::print("  records               {}/tensorboard (TensorBoard); `spot report {}` (dashboard)\n",
             job_dir, spec.source);

  nlohmann::json j = {{"job", spec.name},
                      {"state", control::JobStateName(o.state)},
                      {"message", o.message},
                      {"test_accuracy", trained.accuracy},
                      {"steps", trained.steps},
                      {"wall_seconds", o.wall_seconds},
                      {"sim_hours", o.sim_hours},
                      {"market", market.description},
                      {"market_stand_ins", market.stand_ins},
                      {"cost_usd", o.cost_usd},
                      {"spot_usd", spend.spot_usd},
                      {"ondemand_usd", spend.od_usd},
                      {"compute_hours_estimated", spec.compute_hours},
                      {"compute_hours_measured", p.measured_hours},
                      {"ondemand_only_usd", p.od.cost},
                      {"saving", saving},
                      {"predicted_usd", p.policy.cost},
                      {"predicted_preemptions", p.policy.preemptions},
                      {"predicted_usd_at_estimate", p.at_estimate.cost},
                      {"preemptions", o.preemptions},
                      {"instances_reclaimed", o.instances_reclaimed},
                      {"notices", o.notices},
                      {"launches", o.launches},
                      {"decisions", o.decisions},
                      {"steps_redone", redone},
                      {"resumed", o.resumed},
                      {"program_failures", o.program_failures},
                      {"program_recoveries", o.program_recoveries},
                      {"killed_at_reclaim", o.killed_at_reclaim},
                      {"handover_kept_instances", handovers.kept},
                      {"handover_kept_hours", handovers.hours},
                      {"handover_kept_usd", handovers.usd},
                      {"handover_timeouts", handovers.timed_out},
                      {"reconcile_us_mean", o.reconcile_us_mean},
                      {"reconcile_us_max", o.reconcile_us_max}};
  (void)WriteFileAtomically((fs::path(job_dir) / "run-summary.json").string(), j.dump(2) + "\n");
  return o.state == control::JobState::kSucceeded ? kExitOk : kExitFailure;
}

}  // namespace spot::cli
