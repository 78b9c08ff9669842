#include "fleet_workload.h"

#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <random>

#include "cloud/fake_provider.h"
#include "control/controller.h"
#include "control/job_store.h"
#include "core/clock.h"
#include "policy/registry.h"
#include "report.h"
#include "sim/evaluate.h"

namespace spot::bench {
namespace {

constexpr double kGap = 195;      // seconds per tick, as the shared records
constexpr double kInterval = 65;  // virtual seconds between reconcile passes: three a tick
constexpr double kOnDemand = 3.06;
constexpr double kChangeover = 0.2;

double Seconds(std::chrono::steady_clock::time_point since) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - since).count();
}

// One spot pool: up runs (mean 40 ticks) whose capacity is N x [0.5, 1.5]
// (at least 1), redrawn at 5% a tick (partial reclaims); down runs (mean 10
// ticks) with none; a price that moves at 5% a tick in [0.6, 1.4] $/h.
market::Trace PoolTrace(uint64_t seed, int z, int64_t ticks, int nodes) {
  std::mt19937_64 rng(seed * 1000 + z);
  std::uniform_real_distribution<double> u(0, 1);
  market::Trace t;
  t.name = fmt::format("pool-{:02d}", z);
  t.pool = {.cloud = "aws", .region = "us-east-1", .zone = t.name, .instance_type = "p3.2xlarge"};
  t.gap_seconds = kGap;
  auto draw = [&] { return std::max(1, static_cast<int>(std::lround(nodes * (0.5 + u(rng))))); };
  bool up = u(rng) < 0.8;
  int capacity = draw();
  double price = 0.6 + 0.8 * u(rng);
  for (int64_t i = 0; i < ticks; ++i) {
    if (u(rng) < 1.0 / (up ? 40 : 10)) up = !up;
    if (u(rng) < 0.05) capacity = draw();
    if (u(rng) < 0.05) price = 0.6 + 0.8 * u(rng);
    t.available.push_back(up ? capacity : 0);
    t.price.push_back(price);
  }
  return t;
}

struct Market {
  std::vector<market::Trace> traces;
  std::vector<const market::Trace*> zones;
};

Market MakeMarket(int pools, int64_t ticks, int nodes) {
  Market m;
  for (int z = 0; z < pools; ++z) m.traces.push_back(PoolTrace(17, z, ticks, nodes));
  for (const market::Trace& t : m.traces) m.zones.push_back(&t);
  return m;
}

// Where an arm's store lives and how much work its job has.
struct ArmSetup {
  std::string store;  // "tmpfs" | "disk"
  std::string dir;
  int nodes = 0;
  double compute_hours = 0;
};

struct ControllerArm {
  control::JobOutcome out;
  int64_t passes = 0;
  int64_t api_calls = 0;
  double wall_s = 0;
};

control::RunSpec ArmSpec(const ArmSetup& a) {
  control::RunSpec spec;
  spec.source = "fleet-bench.yaml";
  spec.name = fmt::format("fleet-{}", a.nodes);
  spec.compute_hours = a.compute_hours;
  spec.deadline_hours = 1.5 * a.compute_hours + 1;
  spec.resources.nodes = a.nodes;
  spec.resources.min_nodes = 1;
  spec.resources.ondemand_price = kOnDemand;
  spec.resources.changeover_hours = kChangeover;
  spec.market.time_compression = 1;  // virtual time is market time
  spec.controller.reconcile_interval_s = kInterval;
  spec.controller.terminate_grace_s = 0;
  return spec;
}

// Removes a SQLite database and its WAL files.
void RemoveDb(const std::filesystem::path& db) {
  std::error_code ec;
  for (const char* suffix : {"", "-wal", "-shm"}) {
    std::filesystem::remove(db.string() + suffix, ec);
  }
}

// One job through the real controller in virtual time.
Result<ControllerArm> RunControllerArm(const FleetBenchOptions& o,
                                       const policy::PolicyRegistry& registry, const ArmSetup& a) {
  const control::RunSpec spec = ArmSpec(a);
  if (control::ToPolicyJob(spec).min_nodes != 1) {
    return FailedPreconditionError("fleet: the controller's job does not carry min_nodes");
  }
  const auto ticks = static_cast<int64_t>(std::ceil(spec.deadline_hours * 3600 / kGap)) + 50;
  const Market market = MakeMarket(o.pools, ticks, a.nodes);
  const std::vector<fleet::TypeFacts> types = fleet::UniformTypes(market.zones, kOnDemand);
  const std::filesystem::path db =
      std::filesystem::path(a.dir) / fmt::format("spot-bench-fleet-{}-{}.db", ::getpid(), a.nodes);
  RemoveDb(db);
  SPOT_ASSIGN_OR_RETURN(std::unique_ptr<control::JobStore> store,
                        control::JobStore::Open(db.string()));
  cloud::FakeProvider world({.zones = market.zones,
                             .types = types,
                             .job = policy::ToFleetJob(control::ToPolicyJob(spec)),
                             .start_tick = spec.market.start_tick});
  SPOT_ASSIGN_OR_RETURN(std::unique_ptr<policy::Policy> policy, registry.Create("fleet-up"));
  ManualClock clock(1.7e9);
  const double epoch = clock.NowUnixS();
  ControllerArm arm;
  control::ControllerDeps deps{.store = store.get(),
                               .provider = &world,
                               .zones = market.zones,
                               .types = types,
                               .policy = std::move(policy),
                               .clock = &clock,
                               .new_job_epoch_unix_s = epoch};
  deps.read_progress = [&world, &clock, epoch] {
    return control::KnownProgress(world.Progress(clock.NowUnixS() - epoch));
  };
  deps.on_reconcile = [&arm](double) { ++arm.passes; };
  const auto t0 = std::chrono::steady_clock::now();
  Result<control::JobOutcome> out = control::Controller(spec, std::move(deps)).Run("fleet-bench");
  arm.wall_s = Seconds(t0);
  store.reset();
  RemoveDb(db);
  SPOT_RETURN_IF_ERROR(out.status());
  arm.out = *out;
  arm.api_calls = world.api_calls();
  if (arm.out.state != control::JobState::kSucceeded) {
    return InternalError(fmt::format("fleet: the job of {} nodes ended {}: {}", a.nodes,
                                     control::JobStateName(arm.out.state), arm.out.message));
  }
  return arm;
}

// The arms: with the store on tmpfs (when there is one), then on the scratch
// directory's disk.
std::vector<ArmSetup> Arms(const FleetBenchOptions& o) {
  std::vector<ArmSetup> arms;
  std::error_code ec;
  const bool tmpfs = !o.tmpfs_dir.empty() && std::filesystem::is_directory(o.tmpfs_dir, ec);
  auto add = [&](const std::string& store, const std::string& dir, int n, double instance_hours) {
    arms.push_back({store, dir, n, std::min(o.controller_max_hours, instance_hours / n)});
  };
  for (int n : o.controller_nodes) {
    if (tmpfs) add("tmpfs", o.tmpfs_dir, n, o.controller_instance_hours);
  }
  for (int n : o.disk_nodes) add("disk", o.work_dir, n, o.controller_instance_hours);
  return arms;
}

Result<std::string> ControllerTable(const FleetBenchOptions& o,
                                    const policy::PolicyRegistry& registry) {
  Table table({"N", "store", "compute h", "simulated h", "passes", "decisions", "launches",
               "reclaim ticks", "us/pass mean", "us/pass max", "us/pass/instance", "API calls/pass",
               "cost $", "cost / od-only", "wall s"});
  for (const ArmSetup& a : Arms(o)) {
    Progress(fmt::format("fleet: controller, N = {} over {} pools, store on {}", a.nodes, o.pools,
                         a.store));
    SPOT_ASSIGN_OR_RETURN(ControllerArm r, RunControllerArm(o, registry, a));
    const double passes = std::max<double>(1, static_cast<double>(r.passes));
    const double od_only = kOnDemand * a.nodes * (a.compute_hours + kChangeover);
    table.AddRow({std::to_string(a.nodes), a.store, fmt::format("{:.2f}", a.compute_hours),
                  fmt::format("{:.2f}", r.out.sim_hours), std::to_string(r.passes),
                  std::to_string(r.out.decisions), std::to_string(r.out.launches),
                  std::to_string(r.out.preemptions), fmt::format("{:.0f}", r.out.reconcile_us_mean),
                  fmt::format("{:.0f}", r.out.reconcile_us_max),
                  fmt::format("{:.1f}", r.out.reconcile_us_mean / a.nodes),
                  fmt::format("{:.1f}", static_cast<double>(r.api_calls) / passes),
                  fmt::format("{:.2f}", r.out.cost_usd),
                  fmt::format("{:.2f}", r.out.cost_usd / od_only),
                  fmt::format("{:.2f}", r.wall_s)});
  }
  return table.ToMarkdown();
}

// SpotSim: fleet-up against up on the same pools and job, per N.
Result<std::string> SimTable(const FleetBenchOptions& o, const policy::PolicyRegistry& registry) {
  Table table({"N", "policy", "runs", "seconds", "runs/s", "mean $", "misses", "runs/s vs up"});
  for (int n : o.sim_nodes) {
    const sim::JobSpec job{.compute_hours = 12,
                           .deadline_hours = 18,
                           .changeover_hours = kChangeover,
                           .nodes = n,
                           .ondemand_price = kOnDemand,
                           .min_nodes = 1};
    const Market market = MakeMarket(o.pools, static_cast<int64_t>(18 * 3600 / kGap) + 400, n);
    Progress(fmt::format("fleet: SpotSim, N = {}, up and fleet-up x {} samples", n, o.sim_samples));
    SPOT_ASSIGN_OR_RETURN(sim::PolicyStats up,
                          sim::EvaluatePolicy(registry, "up", market.zones, job, o.sim_samples));
    SPOT_ASSIGN_OR_RETURN(
        sim::PolicyStats fleet,
        sim::EvaluatePolicy(registry, "fleet-up", market.zones, job, o.sim_samples));
    for (const sim::PolicyStats* s : {&up, &fleet}) {
      table.AddRow({std::to_string(n), s->policy, std::to_string(s->samples),
                    fmt::format("{:.3f}", s->seconds),
                    fmt::format("{:.0f}", s->samples / s->seconds),
                    fmt::format("{:.2f}", s->mean_cost), std::to_string(s->deadline_misses),
                    fmt::format("{:.2f}", up.seconds / s->seconds)});
    }
  }
  return table.ToMarkdown();
}

}  // namespace

Result<std::string> RunFleetWorkload(const FleetBenchOptions& o) {
  if (o.pools < 1) return InvalidArgumentError("fleet: --fleet-pools must be >= 1");
  policy::PolicyRegistry registry;
  policy::RegisterBuiltinPolicies(registry);
  SPOT_ASSIGN_OR_RETURN(std::string controller, ControllerTable(o, registry));
  SPOT_ASSIGN_OR_RETURN(std::string simulated, SimTable(o, registry));
  return fmt::format(
      "## fleet: the controller and SpotSim with a fleet (fleet-up over {} pools)\n\n"
      "Market: {} synthetic spot pools (g = {:.0f} s; up runs of mean 40 ticks holding N x "
      "[0.5, 1.5] instances, redrawn at 5% a tick; down runs of mean 10 ticks; prices in "
      "[0.6, 1.4] $/h), k = {} $/h, d = {} h, elastic (min_nodes 1), policy fleet-up "
      "(spread 4).\n\n"
      "### 1. Controller time per reconcile pass (real Controller, ManualClock, FakeProvider, "
      "SQLite JobStore)\n\nA job of min({} h, {} instance-hours / N) compute-hours, deadline "
      "1.5 x that + 1 h, three passes a tick. A pass: read "
      "progress, provider poll, the policy at a new tick, fleet changes, billing and the "
      "SQLite writes (synchronous=FULL; on tmpfs a commit's fsync is free). cost / od-only: "
      "against k x N x (C + d).\n\n{}\n"
      "### 2. SpotSim runs/s, fleet-up against up on the same pools\n\nC = 12 h, D = 18 h, "
      "{} starts per policy and N (sim::EvaluatePolicy), one thread; at N = 1 fleet-up is up "
      "(a gang).\n\n{}",
      o.pools, o.pools, kGap, kOnDemand, kChangeover, o.controller_max_hours,
      o.controller_instance_hours, controller, o.sim_samples, simulated);
}

}  // namespace spot::bench
