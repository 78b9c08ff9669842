// `spot run JOB.yaml`: the controller. Reads the job, builds its market, hosts
// the rendezvous (a detached `spot rendezvous`, so a controller restart does
// not take it down), runs instances through the local provider, serves the
// HTTP API, and prints what the job cost against on demand and what SpotSim
// predicted for the same market segment.
#include <fmt/format.h>
#include <signal.h>
#include <spdlog/spdlog.h>
#include <xxhash.h>
#include <yaml-cpp/yaml.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <atomic>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <thread>

#include "apps/spot/commands.h"
#include "apps/spot/exit_code.h"
#include "apps/spot/run_job.h"
#include "apps/spot/run_market.h"
#include "apps/spot/run_summary.h"
#include "cloud/provider_registry.h"
#include "control/api_server.h"
#include "control/controller.h"
#include "control/job_monitor.h"
#include "control/job_store.h"
#include "core/file_io.h"
#include "core/job_files.h"
#include "core/net.h"
#include "core/process.h"
#include "dist/c10d_stores.h"
#include "monitor/dashboard.h"
#include "policy/registry.h"
#include "sim/spot_sim.h"
#include "train/train_spec.h"

namespace spot::cli {

namespace fs = std::filesystem;

Result<LoadedJob> LoadJob(const std::string& path) {
  auto text = ReadFile(path);
  if (!text.ok()) return InvalidArgumentError(path + ": " + std::string(text.status().message()));
  SPOT_ASSIGN_OR_RETURN(SpecReader top, SpecReader::FromString(*text, path));
  LoadedJob j;
  control::ReadRunSpecFields(top, &j.run);
  train::ReadTrainSpecFields(top.Section("train", /*required=*/true), &j.train);
  SPOT_RETURN_IF_ERROR(top.Finish());
  YAML::Node root = YAML::Load(*text);
  j.train_node = YAML::Clone(root["train"]);
  j.job_dir = j.train_node["output_dir"] ? j.train.output_dir : "runs/" + j.run.name;
  j.hash = fmt::format("{:016x}", XXH3_64bits(text->data(), text->size()));
  return j;
}

std::string JobStateDir(const LoadedJob& j) {
  return j.run.controller.state_dir.empty() ? JobFiles{j.job_dir}.state_dir()
                                            : j.run.controller.state_dir;
}

namespace {

// The workers' job file: the train section with the job's name, directories
// and gang size filled in.
Result<std::string> WriteWorkerJobFile(LoadedJob& j) {
  YAML::Node t = j.train_node;
  t["name"] = j.run.name;
  t["output_dir"] = j.job_dir;
  if (!t["checkpoint"] || !t["checkpoint"]["durable_dir"]) {
    t["checkpoint"]["durable_dir"] = (fs::path(j.job_dir) / "durable").string();
  }
  t["distributed"]["min_workers"] = j.run.resources.min_nodes;
  t["distributed"]["max_workers"] = j.run.resources.nodes;
  YAML::Emitter e;
  e << t;
  std::string path = JobFiles{j.job_dir}.worker_job();
  SPOT_RETURN_IF_ERROR(WriteFileAtomically(path, "# Written by `spot run " + j.run.source +
                                                     "`: the workers' job file.\n" +
                                                     std::string(e.c_str()) + "\n"));
  SPOT_ASSIGN_OR_RETURN(j.train, train::LoadTrainSpec(path));
  return path;
}

std::string SelfExe() {
  std::error_code ec;
  fs::path p = fs::read_symlink("/proc/self/exe", ec);
  return ec ? "/proc/self/exe" : p.string();
}

// The rendezvous store, reused across controller restarts while it runs
// (its pid and port are kept in <state dir>/rendezvous.json).
Result<std::string> EnsureRendezvous(const std::string& state_dir, const std::string& job_dir) {
  const std::string record = (fs::path(state_dir) / "rendezvous.json").string();
  if (auto text = ReadFile(record); text.ok()) {
    auto j = nlohmann::json::parse(*text, nullptr, false);
    if (!j.is_discarded() && ProcessMatches(j.value("pid", int64_t{0}), "rendezvous")) {
      return fmt::format("tcp://127.0.0.1:{}", j.value("port", 0));
    }
  }
  SPOT_ASSIGN_OR_RETURN(int port, PickFreePort());
  SPOT_ASSIGN_OR_RETURN(int64_t pid,
                        Spawn({.argv = {SelfExe(), "rendezvous", "--port", std::to_string(port)},
                               .log_path = (fs::path(job_dir) / "rendezvous.log").string()}));
  SPOT_RETURN_IF_ERROR(
      WriteFileAtomically(record, nlohmann::json{{"pid", pid}, {"port", port}}.dump() + "\n"));
  return fmt::format("tcp://127.0.0.1:{}", port);
}

void StopRendezvous(const std::string& state_dir) {
  auto text = ReadFile((fs::path(state_dir) / "rendezvous.json").string());
  if (!text.ok()) return;
  auto j = nlohmann::json::parse(*text, nullptr, false);
  if (j.is_discarded()) return;
  int64_t pid = j.value("pid", int64_t{0});
  if (ProcessMatches(pid, "rendezvous")) SignalProcess(pid, SIGTERM);
  for (int i = 0; i < 50 && CheckProcess(pid).running; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
}

// Steps redone after losses: the step log has one line per committed step,
// a redone step appears again.
int64_t StepLogLines(const std::string& path) {
  std::ifstream in(path);
  int64_t n = 0;
  for (std::string line; std::getline(in, line);) n += line.empty() ? 0 : 1;
  return n;
}

// The last line of a worker's log that reports an error ("" when none).
std::string LastErrorLine(const std::string& log_path) {
  std::ifstream in(log_path);
  std::string line, last;
  while (std::getline(in, line)) {
    if (line.find("error") != std::string::npos) last = line;
  }
  return last;
}

control::ApiPages MonitorPages(control::JobMonitor& monitor, const std::string& job) {
  return {.metrics = [&monitor] { return monitor.MetricsText(); },
          .targets = [&monitor] { return monitor.TargetsJson(); },
          .dashboard_data = [&monitor](const std::string&) { return monitor.DashboardJson(true); },
          .dashboard_html =
              [job](const std::string& id) {
                return monitor::DashboardHtml({.title = id + " · SpotTrain",
                                               .data_url = "/api/v1/jobs/" + id + "/dashboard"});
              }};
}

int Fail(const Status& s) {
  fmt::print(stderr, "error: {}\n", s.message());
  return ExitCodeFor(s);
}

}  // namespace

CLI::App* AddRunCommand(CLI::App& app, RunArgs* args) {
  CLI::App* cmd = app.add_subcommand(
      "run",
      "Run a job on a spot fleet: choose capacity by policy over the job's market, launch "
      "workers, survive preemptions, report cost against on demand. Run the same command again "
      "to resume a job whose controller died.");
  cmd->add_option("job", args->job_path, "Job file (YAML); see docs/job-spec.md")->required();
  cmd->add_option(
      "--decision-log", args->decision_log,
      "Also write the decisions as JSON lines here (default: <job dir>/decisions.jsonl)");
  cmd->add_option("--status-interval", args->status_interval_s, "Seconds between status lines")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  return cmd;
}

int RunRunCommand(const RunArgs& args) {
  auto job = LoadJob(args.job_path);
  if (!job.ok()) return Fail(job.status());
  LoadedJob& j = *job;
  auto market = LoadRunMarket(j.run);
  if (!market.ok()) return Fail(market.status());
  policy::PolicyRegistry registry;
  policy::RegisterBuiltinPolicies(registry);
  auto live_policy = registry.Create(j.run.policy);
  if (!live_policy.ok()) {
    return Fail(InvalidArgumentError(j.run.source +
                                     ": policy: " + std::string(live_policy.status().message())));
  }
  if ((*live_policy)->needs_future()) {  // refused before anything is written or started
    return Fail(InvalidArgumentError(fmt::format(
        "{}: policy '{}' needs to know the future; it is a bound for `spot sim`, not a live policy",
        j.run.source, (*live_policy)->name())));
  }
  cloud::ProviderRegistry providers;
  cloud::RegisterBuiltinProviders(providers);
  if (Status st = providers.Validate(j.run.provider); !st.ok()) {
    return Fail(InvalidArgumentError(j.run.source + ": provider: " + std::string(st.message())));
  }
  const std::string state_dir = JobStateDir(j);
  const JobFiles files{j.job_dir};
  const std::string instances_dir = files.instances();
  for (const std::string& dir : {j.job_dir, state_dir, instances_dir}) {
    if (Status st = CreateDirectories(dir); !st.ok()) return Fail(st);
  }
  auto train_yaml = WriteWorkerJobFile(j);
  if (!train_yaml.ok()) return Fail(train_yaml.status());
  auto store = control::JobStore::Open(StateDbPath(state_dir));
  if (!store.ok()) return Fail(store.status());

  // Signals are taken by one thread; block them before any thread starts.
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGTERM);
  sigaddset(&set, SIGINT);
  pthread_sigmask(SIG_BLOCK, &set, nullptr);

  std::vector<const market::Trace*> zones;
  for (const market::Trace& t : market->zones) zones.push_back(&t);
  auto rdzv_url = EnsureRendezvous(state_dir, j.job_dir);
  if (!rdzv_url.ok()) return Fail(rdzv_url.status());
  const auto ttl =
      std::chrono::milliseconds(static_cast<int64_t>(j.train.distributed.liveness_ttl_s * 1e3));
  auto rdzv = dist::OpenRendezvous(*rdzv_url, j.run.name, ttl, std::chrono::seconds(20));
  if (!rdzv.ok()) return Fail(rdzv.status());

  const int cores = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  const int threads = j.train.threads > 0
                          ? static_cast<int>(j.train.threads)
                          : std::max(1, cores / static_cast<int>(j.run.resources.nodes));
  const std::string exe = SelfExe();
  const std::string progress_path = files.progress();
  const std::string step_log = files.step_log();
  const std::string tensorboard_dir = files.tensorboard();
  auto job_record = (*store)->GetJob(j.run.name);
  if (!job_record.ok()) return Fail(job_record.status());
  const bool fresh = !*job_record;
  if (fresh) {
    std::error_code ec;
    fs::remove(step_log, ec);
    fs::remove(files.summary(), ec);
    fs::remove_all(tensorboard_dir, ec);  // one run directory per job
  }
  const double epoch =
      fresh ? std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch())
                  .count()
            : (*job_record)->wall_epoch_unix_s;
  auto provider = providers.Create(
      j.run.provider,
      {.zones = zones,
       .job = policy::ToFleetJob(control::ToPolicyJob(j.run)),
       .start_tick = j.run.market.start_tick,
       .notice_s = j.run.market.notice_seconds,
       .wall_epoch_unix_s = epoch,
       .time_compression = fresh ? j.run.market.time_compression : (*job_record)->time_compression,
       .instances_dir = instances_dir,
       .terminate_grace_wall_s = j.run.controller.terminate_grace_s,
       .command =
           [&](const cloud::InstanceSpec& s, const std::string& local_dir) {
             // Each worker serves /metrics on a port of its own; the monitor
             // finds it in the store (and Prometheus through /api/v1/targets).
             auto port = PickFreePort();
             const int metrics_port = port.ok() ? *port : 0;
             if (port.ok()) {
               (void)(*store)->PutValue(j.run.name, control::MetricsPortKey(s.id),
                                        std::to_string(metrics_port));
             }
             return std::vector<std::string>{exe,
                                             "worker",
                                             *train_yaml,
                                             "--rendezvous",
                                             *rdzv_url,
                                             "--id",
                                             s.id,
                                             "--threads",
                                             std::to_string(threads),
                                             "--checkpoint-dir",
                                             (fs::path(local_dir) / "checkpoints").string(),
                                             "--progress-file",
                                             progress_path,
                                             "--step-log",
                                             step_log,
                                             "--watch",
                                             j.run.market.metadata,
                                             "--notice-poll",
                                             "0.1",
                                             "--metrics-port",
                                             std::to_string(metrics_port),
                                             "--tensorboard",
                                             tensorboard_dir,
                                             "--plain",
                                             "--log-interval",
                                             "5"};
           },
       .metadata_flavor = j.run.market.metadata});
  if (!provider.ok()) return Fail(provider.status());

  control::JobMonitor monitor({.spec = j.run,
                               .store = store->get(),
                               .zones = zones,
                               .job_dir = j.job_dir,
                               .progress_path = progress_path,
                               .epochs = j.train.epochs,
                               .tensorboard_dir = tensorboard_dir});
  std::shared_ptr<dist::KvStore> kv = rdzv->kv;
  control::Controller controller(
      j.run,
      {.store = store->get(),
       .provider = provider->get(),
       .zones = zones,
       .policy = std::move(live_policy).value(),
       .new_job_epoch_unix_s = epoch,
       .progress_path = progress_path,
       .decision_log_path = args.decision_log.empty() ? files.decisions() : args.decision_log,
       .on_instance_gone = [kv](const std::string& id) { (void)kv->MarkDead(id); },
       .is_alive =
           [kv](const std::string& id) {
             auto alive = kv->IsAlive(id);
             return !alive.ok() || *alive;  // a store hiccup is not a verdict
           },
       .unreachable_after_s = j.run.controller.unreachable_after_s,
       .last_error =
           [&](const std::string& id) {
             return LastErrorLine((fs::path(instances_dir) / (id + ".log")).string());
           },
       .status_line = [](const std::string& line) { spdlog::info("{}", line); },
       .status_interval_s = args.status_interval_s,
       .on_reconcile = [&](double seconds) { monitor.ObserveReconcile(seconds); }});
  auto api = control::ApiServer::Start(
      store->get(),
      {.port = static_cast<int>(j.run.controller.api_port),
       .token_path = (fs::path(state_dir) / "api.token").string(),
       .pages = MonitorPages(monitor, j.run.name)},
      [&](const std::string& id) {
        return id == j.run.name ? controller.RequestCancel()
                                : NotFoundError("this controller runs job " + j.run.name);
      });
  if (!api.ok()) return Fail(api.status());
  std::atomic<bool> done{false};
  std::thread signals([&] {
    timespec tick{0, 100 * 1000 * 1000};
    while (!done.load()) {
      int sig = sigtimedwait(&set, nullptr, &tick);
      if (sig == SIGINT || sig == SIGTERM) {
        spdlog::warn("{}: cancelling the job", strsignal(sig));
        (void)controller.RequestCancel();
      }
    }
  });
  spdlog::info("job {}: policy {}, {} x {} (min {}), deadline {:.1f} h, market: {}; time x{:.0f}",
               j.run.name, j.run.policy.name, j.run.resources.nodes, j.run.resources.instance_type,
               j.run.resources.min_nodes, j.run.deadline_hours, market->description,
               j.run.market.time_compression);
  spdlog::info("API {} (token in {}); rendezvous {}", (*api)->url(),
               (fs::path(state_dir) / "api.token").string(), *rdzv_url);
  spdlog::info("dashboard {}/jobs/{}; metrics {}/metrics", (*api)->url(), j.run.name,
               (*api)->url());
  std::thread refresher([&] {
    while (!done.load()) {
      if (Status st = monitor.Refresh(); !st.ok()) spdlog::warn("monitor: {}", st.message());
      for (int i = 0; i < 10 && !done.load(); ++i) {
        std::this_thread::sleep_for(std::chrono::milliseconds(100));
      }
    }
  });
  auto outcome = controller.Run(j.hash);
  done.store(true);
  signals.join();
  refresher.join();
  (void)monitor.Refresh();  // the final state, for the last scrape and event files
  if (!outcome.ok()) return Fail(outcome.status());
  if (control::IsTerminal(outcome->state)) StopRendezvous(state_dir);
  return PrintRunSummary(**store, j.run, market->zones, j.job_dir, *outcome,
                         StepLogLines(step_log));
}

}  // namespace spot::cli
