// `spot monitor JOB.yaml`: the dashboard of a job from its records (a finished
// job, or one whose controller runs elsewhere), served on loopback until
// stopped. `spot report JOB.yaml`: the same story as one static HTML file.
#include <fmt/format.h>
#include <signal.h>
#include <spdlog/spdlog.h>

#include <CLI/CLI.hpp>
#include <chrono>
#include <filesystem>

#include "apps/spot/commands.h"
#include "apps/spot/exit_code.h"
#include "apps/spot/run_job.h"
#include "apps/spot/run_market.h"
#include "control/api_server.h"
#include "control/dashboard_data.h"
#include "control/job_store.h"
#include "core/clock.h"
#include "core/file_io.h"
#include "core/job_files.h"
#include "monitor/dashboard.h"

namespace spot::cli {
namespace {

namespace fs = std::filesystem;

int Fail(const Status& s) {
  fmt::print(stderr, "error: {}\n", s.message());
  return ExitCodeFor(s);
}

// The job's records: its file, market and store (which must exist).
struct JobRecords {
  LoadedJob job;
  RunMarket market;
  std::unique_ptr<control::JobStore> store;
  std::vector<const market::Trace*> zones;

  control::DashboardInputs Inputs(bool live) const {
    return {.spec = &job.run,
            .store = store.get(),
            .zones = zones,
            .job_dir = job.job_dir,
            .epochs = job.train.epochs,
            .live = live,
            .wall_now_unix_s = RealClock()->NowUnixS()};
  }
};

Result<JobRecords> OpenRecords(const std::string& job_path) {
  JobRecords r;
  SPOT_ASSIGN_OR_RETURN(r.job, LoadJob(job_path));
  const std::string db = StateDbPath(JobStateDir(r.job));
  if (!fs::exists(db)) {
    return NotFoundError(
        fmt::format("{}: no records of job {} ({} does not exist); run `spot run "
                    "{}` first",
                    job_path, r.job.run.name, db, job_path));
  }
  SPOT_ASSIGN_OR_RETURN(r.market, LoadRunMarket(r.job.run));
  r.job.run.resources.ondemand_price = r.market.ondemand_price;
  SPOT_ASSIGN_OR_RETURN(r.store, control::JobStore::Open(db));
  SPOT_ASSIGN_OR_RETURN(std::optional<control::JobRecord> rec, r.store->GetJob(r.job.run.name));
  if (!rec) return NotFoundError(fmt::format("{}: {} has no job {}", job_path, db, r.job.run.name));
  for (const market::Trace& t : r.market.zones) r.zones.push_back(&t);
  return r;
}

}  // namespace

CLI::App* AddMonitorCommand(CLI::App& app, MonitorArgs* args) {
  CLI::App* cmd = app.add_subcommand(
      "monitor",
      "Serve the dashboard of a job from its records (fleet, market, progress, cost, "
      "utilization, training curves) on loopback until Ctrl-C.");
  cmd->add_option("job", args->job_path, "The job file given to `spot run`")->required();
  cmd->add_option("--port", args->port, "Loopback port (0: any free port)")
      ->check(CLI::Range(0, 65535))
      ->capture_default_str();
  return cmd;
}

CLI::App* AddReportCommand(CLI::App& app, ReportArgs* args) {
  CLI::App* cmd = app.add_subcommand(
      "report", "Write a job's dashboard as one static HTML file that needs no server.");
  cmd->add_option("job", args->job_path, "The job file given to `spot run`")->required();
  cmd->add_option("-o,--output", args->output, "HTML file (default: <job dir>/report.html)");
  return cmd;
}

int RunMonitorCommand(const MonitorArgs& args) {
  auto records = OpenRecords(args.job_path);
  if (!records.ok()) return Fail(records.status());
  JobRecords& r = *records;
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGTERM);
  sigaddset(&set, SIGINT);
  pthread_sigmask(SIG_BLOCK, &set, nullptr);
  control::ApiPages pages{
      .dashboard_data =
          [&r](const std::string&) { return control::DashboardData(r.Inputs(/*live=*/true)); },
      .dashboard_html =
          [](const std::string& id) {
            return monitor::DashboardHtml(
                {.title = id + " · SpotTrain", .data_url = "/api/v1/jobs/" + id + "/dashboard"});
          }};
  // The token file of the job's own API; this server takes no mutating call
  // that matters (cancel answers that no controller runs here).
  auto api = control::ApiServer::Start(
      r.store.get(),
      {.port = args.port,
       .token_path = (fs::path(JobStateDir(r.job)) / "api.token").string(),
       .pages = pages},
      [](const std::string&) {
        return FailedPreconditionError("`spot monitor` shows records; cancel through `spot run`");
      });
  if (!api.ok()) return Fail(api.status());
  fmt::print("dashboard of job {}: {}/jobs/{} (Ctrl-C to stop)\n", r.job.run.name, (*api)->url(),
             r.job.run.name);
  std::fflush(stdout);
  int sig = 0;
  sigwait(&set, &sig);
  return kExitOk;
}

int RunReportCommand(const ReportArgs& args) {
  auto records = OpenRecords(args.job_path);
  if (!records.ok()) return Fail(records.status());
  JobRecords& r = *records;
  auto data = control::DashboardData(r.Inputs(/*live=*/false));
  if (!data.ok()) return Fail(data.status());
  const std::string out =
      args.output.empty() ? (fs::path(r.job.job_dir) / "report.html").string() : args.output;
  std::string html = monitor::DashboardHtml(
      {.title = r.job.run.name + " · SpotTrain report", .snapshot_json = *data});
  if (Status s = WriteFileAtomically(out, html); !s.ok()) return Fail(s);
  fmt::print("report of job {}: {} ({} KB)\n", r.job.run.name, out, html.size() / 1024);
  return kExitOk;
}

}  // namespace spot::cli
