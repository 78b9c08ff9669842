// Subcommands of the `spot` CLI. Each adds itself to the app and runs from a
// plain struct of parsed arguments, returning the process exit code.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/status.h"

namespace CLI {
class App;
}
namespace spot::dist {
class KvStore;
}

namespace spot::cli {

inline constexpr int kExitOk = 0;
inline constexpr int kExitFailure = 1;
inline constexpr int kExitBadInput = 2;

struct TrainArgs {
  std::string job_path;
  std::string step_log;
  bool plain_progress = false;
  double log_interval_s = 10;
  int nproc = 0;        // --nproc N: launch N elastic workers on this machine (launch.cc)
  int rdzv_port = 0;    // --rdzv-port: the launcher's rendezvous store port (0: any free)
  std::string log_dir;  // --log-dir: per-worker step/sample/event logs
};

CLI::App* AddTrainCommand(CLI::App& app, TrainArgs* args);
int RunTrain(const TrainArgs& args);

// `spot worker JOB.yaml --rendezvous URL`: one elastic data-parallel worker
// (worker_command.cc).
struct WorkerArgs {
  std::string job_path;
  std::string rendezvous;  // tcp://HOST:PORT | etcd://HOST:PORT[,HOST:PORT...]
  std::string id;
  std::string host;  // "" = this machine's address toward the rendezvous host
  int threads = 0;   // overrides the job's threads when > 0
  std::string step_log, sample_log, event_log;
  double slowdown = 0;
  bool plain_progress = false;
  double log_interval_s = 10;
  std::string progress_file;   // rank 0's progress JSON
  std::string checkpoint_dir;  // overrides checkpoint.dir (this machine's local tier)
  std::string watch = "auto";  // termination notices: none | auto | aws | gcp | azure
  double notice_poll_s = 1;    // seconds between metadata polls
  int metrics_port = -1;       // -1: no /metrics; 0: any free port
  std::string tensorboard;     // run directory for TensorBoard event files (rank 0)
};

CLI::App* AddWorkerCommand(CLI::App& app, WorkerArgs* args);

// `spot agent AGENT.json`: a command workload's program on one instance
// (agent_command.cc), started by `spot run` for a job with `run:`.
struct AgentArgs {
  std::string spec_path;
  std::string rendezvous;
  std::string id;
  std::string local_dir;
  std::string controller_url;
  std::string watch = "auto";
  double notice_poll_s = 1;
  int metrics_port = 0;  // --metrics-port: 0 = none
  int cpus = 0;          // --cpus: 0 = this instance's share of the CPUs
  // --machine-shared-by: instances of the job on this machine (the local
  // provider runs them all on one: max_nodes); 1 where each instance is a
  // machine of its own (EC2, a Slurm allocation). 0 = the job's max_nodes.
  int machine_shared_by = 0;
};

CLI::App* AddAgentCommand(CLI::App& app, AgentArgs* args);
int RunAgentCommand(const AgentArgs& args);
int RunWorkerCommand(const WorkerArgs& args);

// The address of this machine the rendezvous host (tcp://HOST:PORT) is
// reached from (127.0.0.1 for a rendezvous on loopback): where a worker or
// agent is reached from the controller's network. A UDP connect only picks
// the route; nothing is sent. Unavailable when no route leads there.
Result<std::string> AddressTowardRendezvous(const std::string& url);

// Publishes where this instance serves /metrics ("HOST:PORT") in the job's
// rendezvous (control::MetricsAddressKey), so the controller scrapes it
// there; a failure is logged (the controller then tries 127.0.0.1).
void PublishMetricsAddress(dist::KvStore& kv, const std::string& job, const std::string& instance,
                           const std::string& host, int port);

// `spot profile RUN`: the run's step profiles as one Chrome trace, and a
// table of time per phase (profile_command.cc).
struct ProfileArgs {
  std::string run;     // run directory or job file
  std::string output;  // the merged trace ("": <run dir>/profile.trace.json)
};

CLI::App* AddProfileCommand(CLI::App& app, ProfileArgs* args);
int RunProfile(const ProfileArgs& args);

// `spot logs JOB`: a `spot run` job's log files merged in time order
// (logs_command.cc; docs/monitor.md).
struct LogsArgs {
  std::string job;       // its directory, its job file, or its name under runs/
  bool follow = false;   // --follow: until SIGINT/SIGTERM or the job ends
  std::string instance;  // --instance: only its lines
  std::string level;     // --level: this level or above ("": all)
  std::string since;     // --since: a duration back from now or a UTC time
  bool json = false;     // --json: JSON lines instead of text
};

CLI::App* AddLogsCommand(CLI::App& app, LogsArgs* args);
int RunLogs(const LogsArgs& args);

// `spot run JOB.yaml`: the controller (run_command.cc).
struct RunArgs {
  std::string job_path;
  std::string decision_log;
  double status_interval_s = 5;
};

CLI::App* AddRunCommand(CLI::App& app, RunArgs* args);
int RunRunCommand(const RunArgs& args);

// `spot monitor JOB.yaml` and `spot report JOB.yaml` (monitor_command.cc).
struct MonitorArgs {
  std::string job_path;
  int port = 0;
};
struct ReportArgs {
  std::string job_path;
  std::string output;
};

CLI::App* AddMonitorCommand(CLI::App& app, MonitorArgs* args);
int RunMonitorCommand(const MonitorArgs& args);
CLI::App* AddReportCommand(CLI::App& app, ReportArgs* args);
int RunReportCommand(const ReportArgs& args);

// `spot rendezvous --port P`: hosts a rendezvous store for workers on other
// machines until stopped (worker_command.cc).
struct RendezvousArgs {
  std::string host = "127.0.0.1";
  int port = 29400;
  // Where the port it listens on is written (atomically, once listening):
  // how a starter that asked for port 0 learns which one it got.
  std::string port_file;
};

CLI::App* AddRendezvousCommand(CLI::App& app, RendezvousArgs* args);
int RunRendezvous(const RendezvousArgs& args);

// `spot train --nproc N`: hosts the store and runs N workers (launch.cc).
int RunLaunch(const TrainArgs& args);

// `spot sim policies | run | eval` (sim_command.cc; flags in docs/spotsim.md).
struct SimArgs {
  std::string action;                     // "policies", "run" or "eval"
  bool params = false;                    // policies: --params, each policy's parameters (Markdown)
  std::vector<std::string> traces;        // --trace, repeatable; none: synthetic zones
  std::string prices;                     // --prices F.csv
  std::string trace_convention = "auto";  // --trace-convention auto|available|preempted
  bool multi_zone = false;                // --multi-zone: all traces are zones of one market
  std::string policies = "od,greedy,up,hazard-up,omniscient";  // eval: --policies
  std::string policy = "up";                                   // run: --policy
  double compute_hours = 48;
  double deadline_hours = 60;
  double changeover_hours = 0.2;
  double ondemand_price = 0;  // --ondemand-price; 0: the traces' own, else 3
  // Resolved from the traces when --ondemand-price is not given: each
  // market priced at the on-demand price its traces record.
  bool ondemand_per_market = false;
  int nodes = 1;
  int min_nodes = 0;  // --min-nodes: 0 = nodes (a gang)
  int samples = 300;
  int64_t start_tick = 0;        // run: --start-tick
  std::string format = "table";  // json | table
  std::string svg;               // run: --svg FILE; eval: with --protocol, the intervals
  bool runs = false;             // eval --protocol --format json: every scored start's run
  std::string decision_log;      // run: --decision-log FILE (JSON lines)
  uint64_t seed = 1;             // synthetic market seed
  // eval --protocol (docs/spotsim.md, Evaluation protocol):
  std::string protocol;         // in-sample | loo | time-split; "" = per trace, no fitting
  int64_t start_every = 0;      // --start-every K ticks (0: --samples S evenly spaced)
  double train_fraction = 0.5;  // --train-fraction (time-split)
  int threads = 0;              // --threads (with --protocol; 0: one per core)
  int bootstrap = 2000;         // --bootstrap resamples
  uint64_t bootstrap_seed = 1;  // --bootstrap-seed
};

CLI::App* AddSimCommand(CLI::App& app, SimArgs* args);
int RunSim(const SimArgs& args);

// `spot forecast models | fit | predict | backtest` (forecast_command.cc; docs/forecast.md).
struct ForecastArgs {
  std::string action;               // "models", "fit", "predict" or "backtest"
  bool params = false;              // models: --params, each model's parameters (Markdown)
  std::vector<std::string> traces;  // --trace, repeatable: zones of one market
  std::string prices;               // --prices F.csv
  double tick_seconds = 0;          // --tick-seconds of a price CSV
  std::string all;                  // --all DIR: every record of a data directory
  int min_count = 1;                // --min-count: a tick is up with >= this many instances
  uint64_t seed = 1;                // synthetic market seed
  std::string price_models = "last,seasonal-day,seasonal-week,moving-average,holt-winters,xgb";
  std::string preemption_models = "climatology,hourly-climatology,km,xgb-hazard";
  std::string price_horizons = "1,6,24";    // hours
  std::string preemption_horizons = "1,6";  // hours
  double step_hours = 1;                    // backtest: hours between origins
  double refit_hours = 72;                  // backtest: refit interval
  std::string format = "table";             // json | table
  std::string out;                          // --out FILE: write the output there (atomically)
  std::string svg;                          // backtest: --svg FILE, the calibration plot
  int xgb_threads = 1;                      // --threads of XGBoost
};

CLI::App* AddForecastCommand(CLI::App& app, ForecastArgs* args);
int RunForecast(const ForecastArgs& args);

// `spot ckpt list | show | verify | diff | rollback | gc | export` (ckpt_command.cc).
struct CkptArgs {
  std::string action;
  std::string job;          // --job: take directories and retention from a job file
  std::string dir;          // --dir
  std::string durable_dir;  // --durable-dir
  int64_t id = -1;
  int64_t other = -1;  // diff: the second version
  std::string format = "table";
  bool all = false;
  bool dry_run = false;
  int keep = 0;     // gc: override keep_last
  std::string out;  // export: output file
};

CLI::App* AddCkptCommand(CLI::App& app, CkptArgs* args);
int RunCkpt(const CkptArgs& args);

// `spot prepare-text` and `spot generate` (text_command.cc): language models.
struct PrepareTextArgs {
  std::string input;  // a text file, or "-" for standard input
  std::string out;    // directory for train.bin, val.bin, vocab.json
  double val_fraction = 0.1;
  std::string vocab;  // --vocab: another corpus's vocab.json
};
struct GenerateArgs {
  std::string job_path;
  std::string prompt;
  int64_t tokens = 200;
  double temperature = 0.8;
  int64_t top_k = 0;
  int64_t seed = 0;
};

CLI::App* AddPrepareTextCommand(CLI::App& app, PrepareTextArgs* args);
int RunPrepareText(const PrepareTextArgs& args);
CLI::App* AddGenerateCommand(CLI::App& app, GenerateArgs* args);
int RunGenerate(const GenerateArgs& args);

}  // namespace spot::cli
