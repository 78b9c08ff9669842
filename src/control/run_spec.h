// The job file of `spot run` (docs/job-spec.md, "spot run"): what to train
// (the `train:` section, the fields of a `spot train` job), on what capacity
// (resources), by when and for how much (deadline, budget), decided by which
// policy, over which market. This file reads everything but `train:`, which
// the caller reads with train::ReadTrainSpecFields on the same reader so that
// every error names the file, line and field.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/config_fields.h"
#include "core/spec_reader.h"
#include "policy/observation.h"

namespace spot::control {

struct ResourcesSpec {
  std::string instance_type = "p3.2xlarge";  // what the instances are called
  std::string region = "us-east-1";
  std::vector<std::string> zones;  // candidate zones by name; empty: every zone of the market
  int64_t nodes = 2;               // workers, held as one gang (>= 1)
  int64_t min_nodes = 1;           // training goes on with at least this many (<= nodes)
  // $ per instance-hour on demand (> 0). A job file that does not give it is
  // priced at what the market's traces record (LoadRunMarket), else 3.06.
  double ondemand_price = 3.06;
  bool ondemand_price_given = false;  // the job file gives ondemand_price
  double changeover_hours = 0.05;     // what the policy assumes entering an instance costs
};

struct MarketSpec {
  // Availability JSON or probe CSV files, one per zone, each named "<zone>_<kind>.json"
  // or "<zone>.json"; none: the default synthetic market.
  std::vector<std::string> traces;
  // How the traces' `data` read (market/loaders.h): auto | available (counts
  // of instances a probe got) | preempted (1 = no spot, SkyNomad's flags).
  std::string trace_convention = "auto";
  std::string prices;  // spot price change points (CSV); "" = none
  // A named trace or price file that does not exist: "error", or
  // "synthetic": synthetic data stands in for that file alone (a trace for
  // its zone, or prices for the zones), with a warning and a note in the
  // run's summary; the zones stay those the job names.
  std::string when_missing = "synthetic";
  int64_t synthetic_seed = 1;
  int64_t start_tick = 0;        // tick of the traces at which the job starts
  double time_compression = 60;  // simulated seconds per wall second (> 0)
  double notice_seconds = 120;   // interruption notice ahead of a reclaim (>= 0)
  // The metadata service the instances see: aws | gcp | azure | none (the
  // workers watch none: a Slurm preemption's SIGTERM is the notice).
  std::string metadata = "aws";
  // Capacity of a trace tick for the gang: "auto" (0 here) multiplies
  // single-instance probe traces (counts 0/1) by `nodes`, so a probe that got
  // one instance stands for the gang; a number in [1, kMaxCapacityScale]
  // multiplies every count by it.
  int capacity_scale = 0;
};

// The largest market.capacity_scale: a trace's counts (at most
// market::kMaxAvailableCount) times it stay within int32.
inline constexpr int kMaxCapacityScale = 1000;

struct ControllerSpec {
  std::string state_dir;  // default: <train.output_dir>/controller
  int64_t api_port = 0;   // loopback port of the HTTP API; 0 = any free one
  // The address instances reach the controller's rendezvous at (it listens
  // there): loopback for the local provider; the controller's address on
  // the instances' network for providers whose instances run elsewhere.
  std::string advertise_host = "127.0.0.1";
  // The rendezvous the instances join, when the job names one: an etcd
  // cluster ("etcd://HOST:PORT[,HOST:PORT...]", every member the instances
  // may reach) or a `spot rendezvous` kept elsewhere ("tcp://HOST:PORT").
  // "" = the controller hosts a `spot rendezvous` at advertise_host.
  std::string rendezvous;
  double reconcile_interval_s = 0.05;  // wall seconds between reconcile passes
  double terminate_grace_s = 10;       // wall seconds from SIGTERM to SIGKILL
  double unreachable_after_s = 20;     // wall seconds without a worker's heartbeat before
                                       // its instance is replaced
  // Wall seconds the provider may fail to see the fleet (Provider::Poll: a
  // cloud's describe API, the scheduler's squeue) before the job fails,
  // naming the provider's error; a shorter outage is waited out.
  double provider_outage_s = 3600;
  // Wall seconds a handover may keep the instances the policy let go while
  // the ones it counts ready join the training (ControllerDeps::group_members:
  // an instance that boots slower than changeover_hours); 0: never kept.
  double handover_timeout_s = 600;
  // Terminate an instance whose worker rank 0 flags as a straggler (its
  // progress file's `stragglers`: train.distributed.straggler_factor and
  // straggler_seconds), so the fleet target launches a replacement.
  bool replace_stragglers = false;
};

// A command workload (docs/job-spec.md, "Command workloads"): instead of a
// `train:` section the job names a program to run on every instance, as
// SkyPilot's task YAML does (`run`, `setup`, `workdir`, `envs`). The agent
// on each instance (`spot agent`) starts `nproc_per_node` copies of it with
// torchrun's variables and SpotTrain's, signals it on a notice, and restarts
// the ranks when the gang changes.
struct CommandSpec {
  std::string run;      // the program, a shell command line (sh -c); "" = a `train:` job
  std::string setup;    // run once per instance before `run` ("" = none)
  std::string workdir;  // where both run; relative to where `spot run` starts (default: there)
  std::vector<std::pair<std::string, std::string>> envs;  // added to the program's environment
  std::string output_dir;  // the job's directory (default runs/<name>)
  // Where the program saves and finds its checkpoints (SPOT_CHECKPOINT_DIR);
  // default <output_dir>/checkpoints.
  std::string checkpoint_dir;
  int64_t nproc_per_node = 1;             // ranks per instance (resources.nproc_per_node)
  std::string notice_signal = "SIGTERM";  // sent to the program at a notice
  // Exit codes that mean "recover on a new instance" (not counted as errors).
  std::vector<int64_t> recover_on_exit_codes;
  // Restarts allowed after the program fails (any other non-zero exit);
  // one more failure fails the job.
  int64_t max_restarts_on_errors = 0;
  // Wall seconds without a report (spottrain.report) after which a running
  // program counts as hung: its instances are replaced, as a failure; 0 = off.
  double silence_seconds = 0;
  bool enabled() const { return !run.empty(); }
};

// Signal numbers by name: SIGTERM, SIGINT, SIGUSR1, SIGUSR2, SIGHUP, SIGQUIT
// (the signals a program can catch to save); 0 for any other name.
int NoticeSignalNumber(const std::string& name);

struct RunSpec {
  std::string source;  // the file
  std::string name;    // the job's name (train.name is set to it): one path component
  // A registered policy, with its parameters: `policy: up` or
  // `policy: {name: hazard-up, min_runs: 8}` (docs/job-spec.md).
  ComponentConfig policy{.name = "greedy", .field = "policy"};
  // Where instances come from: a registered provider (`local` today), with
  // its parameters.
  ComponentConfig provider{.name = "local", .field = "provider"};
  double compute_hours = 2;   // C: work on one gang, the policy's estimate (> 0)
  double deadline_hours = 6;  // D: hours after the job's start (>= compute_hours)
  double budget_usd = 0;      // the job fails rather than spend more; 0 = no budget
  ResourcesSpec resources;
  MarketSpec market;
  ControllerSpec controller;
  CommandSpec command;  // enabled(): a command workload, no `train:` section
};

// Reads every section but `train:` from `top`; errors go to the reader. The
// command workload's fields are read too (`run:` and the rest); whether a
// `train:` section must come with the job is the caller's to say.
void ReadRunSpecFields(SpecReader& top, RunSpec* out);

// The policy's view of the job.
policy::JobSpec ToPolicyJob(const RunSpec& spec);

}  // namespace spot::control
