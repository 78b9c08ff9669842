#include "control/job_runner.h"

#include <fmt/format.h>
#include <signal.h>
#include <spdlog/spdlog.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <thread>

#include "cloud/provider_registry.h"
#include "control/api_server.h"
#include "control/job_monitor.h"
#include "control/worker_report.h"
#include "core/file_io.h"
#include "core/job_files.h"
#include "core/logging.h"
#include "core/net.h"
#include "core/number_text.h"
#include "monitor/dashboard.h"
#include "policy/registry.h"

namespace spot::control {
namespace {

namespace fs = std::filesystem;

sigset_t StopSignals() {
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGTERM);
  sigaddset(&set, SIGINT);
  return set;
}

// The last error a worker's log reports ("" when none; JSON lines give
// their message, see ErrorMessageOf).
std::string LastErrorLine(const std::string& log_path) {
  std::ifstream in(log_path);
  std::string line, last;
  while (std::getline(in, line)) {
    if (std::string error = ErrorMessageOf(line); !error.empty()) last = std::move(error);
  }
  return last;
}

int64_t SteadyMs() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

// `dashboard_read_ms`: when a dashboard last began to read the job's data.
ApiPages MonitorPages(JobMonitor& monitor, std::atomic<int64_t>* dashboard_read_ms) {
  return {.metrics = [&monitor] { return monitor.MetricsText(); },
          .targets = [&monitor] { return monitor.TargetsJson(); },
          .dashboard_data =
              [&monitor, dashboard_read_ms](const std::string&) {
                dashboard_read_ms->store(SteadyMs());
                return monitor.DashboardJson(true);
              },
          .dashboard_html =
              [](const std::string& id) {
                return monitor::DashboardHtml({.title = id + " · SpotTrain",
                                               .data_url = "/api/v1/jobs/" + id + "/dashboard"});
              }};
}

}  // namespace

Status ValidateJob(const RunSpec& spec) {
  policy::PolicyRegistry policies;
  policy::RegisterBuiltinPolicies(policies);
  auto p = policies.Create(spec.policy);
  if (!p.ok())
    return InvalidArgumentError(spec.source + ": policy: " + std::string(p.status().message()));
  if ((*p)->needs_future()) {
    return InvalidArgumentError(fmt::format(
        "{}: policy '{}' needs to know the future; it is a bound for `spot sim`, not a live policy",
        spec.source, (*p)->name()));
  }
  cloud::ProviderRegistry providers;
  cloud::RegisterBuiltinProviders(providers);
  if (Status st = providers.Validate(spec.provider); !st.ok()) {
    return InvalidArgumentError(spec.source + ": provider: " + std::string(st.message()));
  }
  return Status::Ok();
}

void BlockStopSignals() {
  sigset_t set = StopSignals();
  pthread_sigmask(SIG_BLOCK, &set, nullptr);
}

struct JobRunner::Impl {
  JobRunnerOptions o;
  JobFiles files;
  std::unique_ptr<JobStore> store;
  std::unique_ptr<cloud::Provider> provider;
  std::unique_ptr<JobMonitor> monitor;
  std::unique_ptr<Controller> controller;
  // When a dashboard last began to read the job's data (steady ms; -1:
  // never); before the APIs, whose handlers write it, so it outlives them.
  std::atomic<int64_t> dashboard_read_ms{-1};
  std::unique_ptr<ApiServer> api;
  // The API at controller.advertise_host, for instances on another network
  // (null when it is loopback: they use `api`).
  std::unique_ptr<ApiServer> instance_api;
  std::unique_ptr<ReportSink> reports;  // a command workload's reports

  Result<double> PrepareRecords();
  Status MakeProvider(double epoch, double compression);
  Status MakeController(double epoch);
  std::function<TrainingProgress()> ProgressReader() const;
  Status StartApi();
  Result<std::unique_ptr<ApiServer>> StartApiOn(const std::string& host, int port);
  void LogStart() const;
  void LetTheDashboardSeeTheEnd() const;
};

// A fresh job starts with empty training records; a resumed one keeps its
// epoch and time compression. Returns the job's epoch.
Result<double> JobRunner::Impl::PrepareRecords() {
  SPOT_ASSIGN_OR_RETURN(std::optional<JobRecord> job, store->GetJob(o.spec.name));
  if (job) return job->wall_epoch_unix_s;
  std::error_code ec;
  fs::remove(files.step_log(), ec);
  fs::remove(files.summary(), ec);
  fs::remove_all(files.tensorboard(), ec);  // one run directory per job
  return o.clock->NowUnixS();
}

Status JobRunner::Impl::MakeProvider(double epoch, double compression) {
  cloud::ProviderRegistry providers;
  cloud::RegisterBuiltinProviders(providers);
  JobStore* s = store.get();
  auto made = providers.Create(
      o.spec.provider,
      {.zones = o.zones,
       .job = policy::ToFleetJob(ToPolicyJob(o.spec)),
       .start_tick = o.spec.market.start_tick,
       .notice_s = o.spec.market.notice_seconds,
       .wall_epoch_unix_s = epoch,
       .time_compression = compression,
       .instances_dir = files.instances(),
       .terminate_grace_wall_s = o.spec.controller.terminate_grace_s,
       .command =
           [this, s](const cloud::InstanceSpec& spec, const std::string& local_dir) {
             // Each worker serves /metrics on a port of its own; the monitor
             // finds it in the store (and Prometheus through /api/v1/targets).
             auto port = PickListenPort();
             if (port.ok()) {
               (void)s->PutValue(o.spec.name, MetricsPortKey(spec.id), std::to_string(*port));
             }
             return o.worker_command({.spec = spec,
                                      .local_dir = local_dir,
                                      .metrics_port = port.ok() ? *port : 0,
                                      .api_url = instance_api ? instance_api->url()
                                                 : api        ? api->url()
                                                              : ""});
           },
       .metadata_flavor = o.spec.market.metadata,
       .clock = o.clock,
       .instance_type = o.spec.resources.instance_type,
       .job_name = o.spec.name,
       .job_dir = o.job_dir,
       .rendezvous_url = o.rendezvous_url,
       .checkpoint_location = o.checkpoint_location});
  SPOT_RETURN_IF_ERROR(made.status());
  provider = std::move(made).value();
  return Status::Ok();
}

// The training's progress: its progress file; for a command workload whose
// program sends no reports, the step of its newest checkpoint manifest.
std::function<TrainingProgress()> JobRunner::Impl::ProgressReader() const {
  const std::string path = files.progress();
  if (!o.spec.command.enabled()) return [path] { return ReadTrainingProgress(path); };
  const std::string dir = o.spec.command.checkpoint_dir.empty()
                              ? (fs::path(o.job_dir) / "checkpoints").string()
                              : o.spec.command.checkpoint_dir;
  const std::string job = o.spec.name;
  return [path, dir, job] {
    TrainingProgress p = ReadTrainingProgress(path);
    if (p.known) return p;
    std::optional<int64_t> step = NewestManifestStep(dir);
    if (!step) return p;
    ProgressReport r;
    r.job = job;
    r.step = *step;
    return KnownProgress(r);
  };
}

Status JobRunner::Impl::MakeController(double epoch) {
  policy::PolicyRegistry policies;
  policy::RegisterBuiltinPolicies(policies);
  SPOT_ASSIGN_OR_RETURN(std::unique_ptr<policy::Policy> policy, policies.Create(o.spec.policy));
  const std::string instances_dir = files.instances();
  JobMonitor* m = monitor.get();
  controller = std::make_unique<Controller>(
      o.spec,
      ControllerDeps{.store = store.get(),
                     .provider = provider.get(),
                     .zones = o.zones,
                     .feed = provider->feed(),  // a cloud's live market, or the replay
                     .policy = std::move(policy),
                     .clock = o.clock,
                     .new_job_epoch_unix_s = epoch,
                     .progress_path = files.progress(),
                     .read_progress = ProgressReader(),
                     .decision_log_path =
                         o.decision_log_path.empty() ? files.decisions() : o.decision_log_path,
                     .on_instance_gone = o.on_instance_gone,
                     .is_alive = o.is_alive,
                     .unreachable_after_s = o.spec.controller.unreachable_after_s,
                     .group_members = o.group_members,
                     .last_report_unix_s = [r = reports.get()] { return r->last_report_unix_s(); },
                     .last_error =
                         [instances_dir](const std::string& id) {
                           return LastErrorLine((fs::path(instances_dir) / (id + ".log")).string());
                         },
                     .status_line = [](const std::string& line) { spdlog::info("{}", line); },
                     .status_interval_s = o.status_interval_s,
                     .on_reconcile = [m](double seconds) { m->ObserveReconcile(seconds); }});

  return Status::Ok();
}

Status JobRunner::Impl::StartApi() {
  // A resumed controller takes the port it had when it can: the programs of
  // a command workload were told that URL (SPOT_CONTROLLER_URL).
  const std::string port_file = (fs::path(o.state_dir) / "api.port").string();
  const int configured = static_cast<int>(o.spec.controller.api_port);
  int port = configured;
  if (port == 0) {
    if (auto text = ReadFile(port_file); text.ok()) {
      auto last = ParseInteger(text->substr(0, text->find('\n')));
      if (last.ok() && *last > 0 && *last <= 65535) port = static_cast<int>(*last);
    }
  }
  auto started = StartApiOn("127.0.0.1", port);
  if (!started.ok() && port != configured) {
    spdlog::warn("API: port {} of the job's earlier controller: {}; taking another", port,
                 started.status().message());
    started = StartApiOn("127.0.0.1", configured);
  }
  SPOT_ASSIGN_OR_RETURN(api, std::move(started));
  // Instances on another network report at the address they are told for
  // the rendezvous, on the same port when it is free there; only that one
  // address is opened.
  const std::string& advertised = o.spec.controller.advertise_host;
  if (!IsLoopbackHost(advertised)) {
    auto there = StartApiOn(advertised, api->port());
    if (!there.ok()) there = StartApiOn(advertised, 0);
    if (!there.ok()) return there.status().WithContext("controller.advertise_host");
    instance_api = std::move(there).value();
  }
  return WriteFileAtomically(port_file, std::to_string(api->port()) + "\n");
}

Result<std::unique_ptr<ApiServer>> JobRunner::Impl::StartApiOn(const std::string& host, int port) {
  const std::string name = o.spec.name;
  Controller* c = controller.get();
  return ApiServer::Start(store.get(),
                          {.host = host,
                           .reachable_from_network = !IsLoopbackHost(host),
                           .port = port,
                           .token_path = (fs::path(o.state_dir) / "api.token").string(),
                           .pages = MonitorPages(*monitor, &dashboard_read_ms),
                           .report =
                               [this](const std::string& job, const std::string& body) {
                                 if (job != o.spec.name) {
                                   return NotFoundError("this controller runs job " + o.spec.name);
                                 }
                                 return reports->Take(body);
                               }},
                          [c, name](const std::string& id) {
                            return id == name ? c->RequestCancel()
                                              : NotFoundError("this controller runs job " + name);
                          });
}

void JobRunner::Impl::LogStart() const {
  const RunSpec& s = o.spec;
  spdlog::info(
      "job {}: policy {}, provider {}, {} x {} (min {}), deadline {:.1f} h, market: {}; "
      "time x{:.0f}",
      s.name, s.policy.name, s.provider.name, s.resources.nodes, s.resources.instance_type,
      s.resources.min_nodes, s.deadline_hours, o.market_description, s.market.time_compression);
  spdlog::info("API {}{} (token in {}); rendezvous {}", api->url(),
               instance_api ? ", for instances " + instance_api->url() : "",
               (fs::path(o.state_dir) / "api.token").string(), o.rendezvous_url);
  spdlog::info("dashboard {}/jobs/{}; metrics {}/metrics", api->url(), s.name, api->url());
}

Result<std::unique_ptr<JobRunner>> JobRunner::Create(JobRunnerOptions options) {
  auto impl = std::make_unique<Impl>();
  impl->o = std::move(options);
  impl->files = JobFiles{impl->o.job_dir};
  for (const std::string& dir : {impl->o.job_dir, impl->o.state_dir, impl->files.instances()}) {
    SPOT_RETURN_IF_ERROR(CreateDirectories(dir));
  }
  if (!impl->o.clock) impl->o.clock = RealClock();
  SPOT_ASSIGN_OR_RETURN(impl->store, JobStore::Open(StateDbPath(impl->o.state_dir), impl->o.clock));
  return std::unique_ptr<JobRunner>(new JobRunner(std::move(impl)));
}

JobRunner::JobRunner(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
JobRunner::~JobRunner() = default;

JobStore& JobRunner::store() { return *impl_->store; }

Result<JobOutcome> JobRunner::Run() {
  Impl& m = *impl_;
  BlockStopSignals();
  SPOT_ASSIGN_OR_RETURN(std::optional<JobRecord> record, m.store->GetJob(m.o.spec.name));
  const double compression = record ? record->time_compression : m.o.spec.market.time_compression;
  SPOT_ASSIGN_OR_RETURN(const double epoch, m.PrepareRecords());
  SPOT_RETURN_IF_ERROR(m.MakeProvider(epoch, compression));
  m.monitor =
      std::make_unique<JobMonitor>(JobMonitorOptions{.spec = m.o.spec,
                                                     .store = m.store.get(),
                                                     .zones = m.o.zones,
                                                     .job_dir = m.o.job_dir,
                                                     .progress_path = m.files.progress(),
                                                     .epochs = m.o.epochs,
                                                     .tensorboard_dir = m.files.tensorboard(),
                                                     .clock = m.o.clock,
                                                     .metrics_address = m.o.metrics_address});
  m.reports = std::make_unique<ReportSink>(m.o.spec.name, m.files, m.o.clock);
  SPOT_RETURN_IF_ERROR(m.MakeController(epoch));
  SPOT_RETURN_IF_ERROR(m.StartApi());
  m.LogStart();
  std::atomic<bool> done{false};
  std::thread signals([&] {
    sigset_t set = StopSignals();
    timespec tick{0, 100 * 1000 * 1000};
    while (!done.load()) {
      int sig = sigtimedwait(&set, nullptr, &tick);
      if (sig == SIGINT || sig == SIGTERM) {
        spdlog::warn("{}: cancelling the job", strsignal(sig));
        (void)m.controller->RequestCancel();
      }
    }
  });
  std::thread refresher([&] {
    while (!done.load()) {
      if (Status st = m.monitor->Refresh(); !st.ok()) spdlog::warn("monitor: {}", st.message());
      for (int i = 0; i < 10 && !done.load(); ++i) m.o.clock->SleepFor(0.1);
    }
  });
  auto outcome = m.controller->Run(m.o.spec_hash);
  done.store(true);
  signals.join();
  refresher.join();
  (void)m.monitor->Refresh();  // the final state, for the last scrape and event files
  m.LetTheDashboardSeeTheEnd();
  return outcome;
}

// The API ends with the process. A dashboard open on the job (it read the
// job's data within the last 5 s; it polls every second) is given up to 3 s
// to read the final state first, so that it shows how the job ended instead
// of its last poll before; with none open, nothing is waited for.
void JobRunner::Impl::LetTheDashboardSeeTheEnd() const {
  const int64_t ended = SteadyMs();
  const int64_t last = dashboard_read_ms.load();
  if (last < 0 || ended - last > 5000) return;
  while (dashboard_read_ms.load() < ended && SteadyMs() - ended < 3000) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
}

}  // namespace spot::control
