// spot: the SpotTrain command line.
//
// Exit codes: 0 success, 1 runtime failure, 2 bad input (job file, flags).
#include <fmt/format.h>

#include <CLI/CLI.hpp>
#include <cstdio>

#include "apps/spot/commands.h"
#include "core/logging.h"

int main(int argc, char** argv) {
  CLI::App app{"SpotTrain: train ML models on spot instances without losing progress."};
  app.require_subcommand(1);
  app.set_version_flag("--version", "spot 0.1.0");
  bool verbose = false;
  app.add_flag("-v,--verbose", verbose, "Log debug details");

  spot::cli::TrainArgs train_args;
  CLI::App* train = spot::cli::AddTrainCommand(app, &train_args);
  spot::cli::WorkerArgs worker_args;
  CLI::App* worker = spot::cli::AddWorkerCommand(app, &worker_args);
  spot::cli::AgentArgs agent_args;
  CLI::App* agent = spot::cli::AddAgentCommand(app, &agent_args);
  spot::cli::RendezvousArgs rdzv_args;
  CLI::App* rdzv = spot::cli::AddRendezvousCommand(app, &rdzv_args);
  spot::cli::RunArgs run_args;
  CLI::App* run = spot::cli::AddRunCommand(app, &run_args);
  spot::cli::MonitorArgs monitor_args;
  CLI::App* monitor = spot::cli::AddMonitorCommand(app, &monitor_args);
  spot::cli::ReportArgs report_args;
  CLI::App* report = spot::cli::AddReportCommand(app, &report_args);
  spot::cli::SimArgs sim_args;
  CLI::App* sim = spot::cli::AddSimCommand(app, &sim_args);
  spot::cli::ForecastArgs forecast_args;
  CLI::App* forecast = spot::cli::AddForecastCommand(app, &forecast_args);
  spot::cli::CkptArgs ckpt_args;
  CLI::App* ckpt = spot::cli::AddCkptCommand(app, &ckpt_args);
  spot::cli::PrepareTextArgs prepare_args;
  CLI::App* prepare = spot::cli::AddPrepareTextCommand(app, &prepare_args);
  spot::cli::GenerateArgs generate_args;
  CLI::App* generate = spot::cli::AddGenerateCommand(app, &generate_args);
  spot::cli::ProfileArgs profile_args;
  CLI::App* profile = spot::cli::AddProfileCommand(app, &profile_args);
  spot::cli::LogsArgs logs_args;
  CLI::App* logs = spot::cli::AddLogsCommand(app, &logs_args);

  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    int rc = app.exit(e);
    return rc == 0 ? 0 : spot::cli::kExitBadInput;
  }
  if (spot::Status s = spot::InitLogging(verbose ? spot::LogLevel::kDebug : spot::LogLevel::kInfo);
      !s.ok()) {
    fmt::print(stderr, "error: {}\n", s.message());
    return spot::cli::kExitBadInput;
  }
  if (train->parsed()) {
    return train_args.nproc > 0 ? spot::cli::RunLaunch(train_args)
                                : spot::cli::RunTrain(train_args);
  }
  if (worker->parsed()) return spot::cli::RunWorkerCommand(worker_args);
  if (agent->parsed()) return spot::cli::RunAgentCommand(agent_args);
  if (rdzv->parsed()) return spot::cli::RunRendezvous(rdzv_args);
  if (run->parsed()) return spot::cli::RunRunCommand(run_args);
  if (monitor->parsed()) return spot::cli::RunMonitorCommand(monitor_args);
  if (report->parsed()) return spot::cli::RunReportCommand(report_args);
  if (sim->parsed()) return spot::cli::RunSim(sim_args);
  if (forecast->parsed()) return spot::cli::RunForecast(forecast_args);
  if (ckpt->parsed()) return spot::cli::RunCkpt(ckpt_args);
  if (prepare->parsed()) return spot::cli::RunPrepareText(prepare_args);
  if (generate->parsed()) return spot::cli::RunGenerate(generate_args);
  if (profile->parsed()) return spot::cli::RunProfile(profile_args);
  if (logs->parsed()) return spot::cli::RunLogs(logs_args);
  return spot::cli::kExitBadInput;
}
