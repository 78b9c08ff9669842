#include "apps/spot/run_summary.h"

#include <fmt/format.h>

#include <filesystem>
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

// SpotSim's run of `policy` on the job's market segment (-1 cost on failure).
sim::RunResult Predict(const ComponentConfig& policy, const control::RunSpec& spec,
                       const std::vector<market::Trace>& zones) {
  policy::PolicyRegistry registry;
  policy::RegisterBuiltinPolicies(registry);
  auto p = registry.Create(policy);
  std::vector<const market::Trace*> z;
  for (const market::Trace& t : zones) z.push_back(&t);
  sim::RunResult r;
  r.cost = -1;
  if (!p.ok() || !sim::ValidateMarket(z, control::ToPolicyJob(spec)).ok()) return r;
  return sim::SimulateJob(**p, z, spec.market.start_tick, control::ToPolicyJob(spec));
}

}  // namespace

int PrintRunSummary(control::JobStore& store, const control::RunSpec& spec,
                    const std::vector<market::Trace>& zones, const std::string& job_dir,
                    const control::JobOutcome& o, int64_t step_log_lines) {
  double spot_usd = 0, od_usd = 0;
  auto ledger = store.Ledger(spec.name);
  auto instances = store.Instances(spec.name, false);
  if (ledger.ok() && instances.ok()) {
    for (const control::LedgerEntry& e : *ledger) {
      for (const control::InstanceRecord& r : *instances) {
        if (r.id == e.instance_id) (r.spot ? spot_usd : od_usd) += e.usd;
      }
    }
  }
  double accuracy = -1;
  int64_t steps = 0;
  auto summary = ReadFile(JobFiles{job_dir}.summary());
  if (summary.ok()) {
    auto j = nlohmann::json::parse(*summary, nullptr, false);
    if (!j.is_discarded()) {
      accuracy = j.value("test_accuracy", -1.0);
      steps = j.value("steps", int64_t{0});
    }
  }
  const sim::RunResult od = Predict(ComponentConfig{.name = "od"}, spec, zones);
  const sim::RunResult predicted = Predict(spec.policy, spec, zones);
  const int64_t redone = steps > 0 ? std::max<int64_t>(0, step_log_lines - steps) : -1;
  const double saving = od.cost > 0 ? 1 - o.cost_usd / od.cost : 0;

  fmt::print("\njob {} {}: {}\n", spec.name, control::JobStateName(o.state), o.message);
  if (accuracy >= 0) fmt::print("  test accuracy         {:.2f}%\n", accuracy * 100);
  fmt::print("  wall time             {}{}\n", Duration(o.wall_seconds),
             o.resumed ? " (this controller process; the job was resumed)" : "");
  fmt::print("  simulated time        {:.2f} h (market time x{:.0f}; deadline {:.1f} h)\n",
             o.sim_hours, spec.market.time_compression, spec.deadline_hours);
  fmt::print("  cost                  ${:.2f} (spot ${:.2f}, on-demand ${:.2f})\n", o.cost_usd,
             spot_usd, od_usd);
  if (od.cost > 0) {
    fmt::print("  on demand only        ${:.2f} (SpotSim, policy od, same job): {:.0f}% saved\n",
               od.cost, saving * 100);
  }
  if (predicted.cost >= 0) {
    fmt::print(
        "  SpotSim predicted     ${:.2f} for {} on this market segment ({} preemptions, "
        "{:.2f} h)\n",
        predicted.cost, spec.policy.name, predicted.preemptions, predicted.finish_hours);
  }
  fmt::print("  preemptions survived  {} ({} interruption notices to instances)\n", o.preemptions,
             o.notices);
  if (redone >= 0) fmt::print("  work lost             {} steps redone of {}\n", redone, steps);
  fmt::print(
      "  decisions             {} ticks, {} launches; reconcile {:.0f} us mean, {:.0f} us max\n",
      o.decisions, o.launches, o.reconcile_us_mean, o.reconcile_us_max);
  fmt::print("  records               {}/tensorboard (TensorBoard); `spot report {}` (dashboard)\n",
             job_dir, spec.source);

  nlohmann::json j = {{"job", spec.name},
                      {"state", control::JobStateName(o.state)},
                      {"message", o.message},
                      {"test_accuracy", accuracy},
                      {"steps", steps},
                      {"wall_seconds", o.wall_seconds},
                      {"sim_hours", o.sim_hours},
                      {"cost_usd", o.cost_usd},
                      {"spot_usd", spot_usd},
                      {"ondemand_usd", od_usd},
                      {"ondemand_only_usd", od.cost},
                      {"saving", saving},
                      {"predicted_usd", predicted.cost},
                      {"predicted_preemptions", predicted.preemptions},
                      {"preemptions", o.preemptions},
                      {"notices", o.notices},
                      {"launches", o.launches},
                      {"decisions", o.decisions},
                      {"steps_redone", redone},
                      {"resumed", o.resumed},
                      {"reconcile_us_mean", o.reconcile_us_mean},
                      {"reconcile_us_max", o.reconcile_us_max}};
  (void)WriteFileAtomically((fs::path(job_dir) / "run-summary.json").string(), j.dump(2) + "\n");
  return o.state == control::JobState::kSucceeded ? kExitOk : kExitFailure;
}

}  // namespace spot::cli
