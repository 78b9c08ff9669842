// JobRunner: one `spot run` job assembled and run to its end: the durable
// store, the provider chosen by name (cloud::ProviderRegistry), the policy
// with its parameters (policy::PolicyRegistry), the monitor, the HTTP API,
// the controller, and SIGINT/SIGTERM as a cancel. The CLI reads the job file
// and the market, hosts the rendezvous and says how a worker starts; the
// runner does the rest, so the command itself stays a few lines.
//
// Not thread-safe: one Run() per runner.
#pragma once

#include <functional>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "cloud/provider.h"
#include "control/controller.h"
#include "control/job_store.h"
#include "control/run_spec.h"
#include "core/clock.h"
#include "core/status.h"
#include "market/trace.h"

namespace spot::control {

// What a worker's command line is made from.
struct WorkerLaunch {
  cloud::InstanceSpec spec;  // the instance
  std::string local_dir;     // its local disk
  int metrics_port = 0;      // the port it serves /metrics on (0: none could be had)
  // The controller's API as the instance reaches it: "http://127.0.0.1:PORT",
  // or at controller.advertise_host when that is not loopback.
  std::string api_url;
};

struct JobRunnerOptions {
  RunSpec spec;           // the job file's, validated (see ValidateJob)
  std::string spec_hash;  // of the job file (a store of another file's job is refused)
  std::string job_dir;    // train.output_dir: the files of core/job_files.h
  std::string state_dir;  // the controller's state (SQLite store, API token)
  std::vector<const market::Trace*> zones;  // the job's market
  std::string market_description;           // for the log
  int64_t epochs = 0;                       // of the training, for the monitor
  std::string decision_log_path;            // "" = <job dir>/decisions.jsonl
  double status_interval_s = 5;             // between status lines in the log
  // The command line of an instance's worker (see WorkerLaunch).
  std::function<std::vector<std::string>(const WorkerLaunch& launch)> worker_command;
  // The rendezvous: whether an instance's worker is heard from, and that an
  // instance has gone (so the next generation forms without it).
  std::function<bool(const std::string& instance_id)> is_alive;
  std::function<void(const std::string& instance_id)> on_instance_gone;
  // The workers with the training group (ControllerDeps::group_members: a
  // make-before-break handover waits for them); unset: not waited for.
  std::function<std::optional<GroupMembers>()> group_members;
  std::string rendezvous_url;  // as instances reach it (controller.advertise_host)
  // Where an instance's worker serves /metrics, "HOST:PORT" as it published
  // it in the rendezvous (JobMonitorOptions::metrics_address); unset: none.
  std::function<std::string(const std::string& instance_id)> metrics_address;
  // The durable tier the workers' checkpoints go to (a provider's bootstrap
  // names it); "" = none.
  std::string checkpoint_location;
  // The time of the store, the provider, the monitor and the controller;
  // nullptr: the real clock.
  Clock* clock = nullptr;
};

// InvalidArgument naming the job file and field, before anything is written:
// an unknown policy or provider, bad parameters, a policy that needs the
// future (a bound for `spot sim`, not a live policy).
Status ValidateJob(const RunSpec& spec);

// Blocks SIGINT and SIGTERM in the calling thread, so that threads started
// after it leave them to the runner's signal thread. Call before any thread.
void BlockStopSignals();

class JobRunner {
 public:
  // Creates the job's directories and opens its store.
  static Result<std::unique_ptr<JobRunner>> Create(JobRunnerOptions options);
  ~JobRunner();

  // Runs the job (or resumes it) to a terminal state, or until cancelled.
  Result<JobOutcome> Run();
  JobStore& store();

 private:
  struct Impl;
  explicit JobRunner(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace spot::control
