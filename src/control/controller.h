// The controller of `spot run`: one reconcile loop that, at every tick of the
// replayed market, observes the market and the fleet, asks the job's Policy
// (the same objects SpotSim drives) where to run, and makes the provider's
// fleet match: launch the gang, terminate what is no longer wanted. Between
// ticks it follows the fleet (notices, reclaims, exits), bills every
// instance-second at that second's price, and reads the training's progress.
//
// Durable: decisions, instances, ledger rows and state changes go to the
// JobStore before they are acted on, so a controller killed at any point and
// started again with the same job file adopts the running instances, replays
// the decisions into a fresh policy (checking that it answers the same), and
// goes on without a gap or a double count in the ledger.
//
// The policy's model of the job is the fleet model SpotSim runs
// (fleet/fleet.h), kept tick for tick: the market takes spot instances back
// where their pool's capacity falls below what the fleet holds, a launched
// instance costs `changeover_hours` of the policy's time, the fleet holds what
// the market gives. The provider's instances are made to match the model's
// pool by pool. Progress is measured: committed steps / total steps x
// compute_hours (or the fraction the training reports).
//
// Time comes from the injected Clock: with a ManualClock the loop runs in
// virtual time (each pass's sleep advances it), so a test can drive a job of
// days through the real store and ledger in seconds.
#pragma once

#include <atomic>
#include <cstdint>
#include <cstdio>
#include <functional>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "cloud/provider.h"
#include "control/job_store.h"
#include "control/run_spec.h"
#include "core/clock.h"
#include "core/job_files.h"
#include "fleet/fleet.h"
#include "market/feed.h"
#include "market/trace.h"
#include "policy/policy.h"

namespace spot::control {

// What the training reported (rank 0 writes it: core/job_files.h), and
// whether a report was read at all.
struct TrainingProgress : ProgressReport {
  bool known = false;
  std::string json;  // as read, for the API
};
// Parses the progress JSON; `known` false when it is not a JSON object.
TrainingProgress ParseTrainingProgress(const std::string& text);
// A report as read (known, its JSON kept).
TrainingProgress KnownProgress(const ProgressReport& report);
// Reads the progress file; `known` false when absent or unreadable.
TrainingProgress ReadTrainingProgress(const std::string& path);

// The workers of a training group (ids are instance ids).
struct GroupMembers {
  int64_t generation = 0;         // the last formed
  std::set<std::string> formed;   // its members
  std::set<std::string> waiting;  // newcomers waiting for room in a full group
  // Whether worker `id` is with the group: waiting for room (booted; its
  // program starts from the checkpoint once there is room), or a member of
  // the formed generation once the training reports a step in it
  // (`progress_generation`: the state has reached it, and its process group
  // is built; before, the old members' leaving would stall the formation).
  bool With(const std::string& id, int64_t progress_generation) const {
    return waiting.count(id) > 0 || (formed.count(id) > 0 && progress_generation >= generation);
  }
};

struct ControllerDeps {
  JobStore* store = nullptr;
  cloud::Provider* provider = nullptr;
  std::vector<const market::Trace*> zones;  // the job's market (the provider's too)
  // Where the market's news comes from (a provider's live prices and
  // capacity); null: a replay of `zones`. Its zones replace `zones`.
  market::MarketFeed* feed = nullptr;
  // Catalog facts per zone, then the job's reference type (fleet::FleetModel);
  // empty: every zone is the reference type at the job's on-demand price.
  std::vector<fleet::TypeFacts> types;
  std::unique_ptr<policy::Policy> policy;
  // Time (wall and monotonic) and waiting; null: the real clock.
  Clock* clock = nullptr;
  // Wall time of simulated time 0 for a job this controller creates (the
  // provider's clock must be the same); 0: now. A resumed job keeps its own.
  double new_job_epoch_unix_s = 0;
  std::string progress_path;  // the training's progress JSON
  // Reads the training's progress; unset: ReadTrainingProgress(progress_path).
  std::function<TrainingProgress()> read_progress;
  std::string decision_log_path;  // JSON lines, one per tick ("" = none)
  // An instance ended (the launcher may tell the rendezvous at once): at a
  // reclaim or its process's exit; one this controller terminated once its
  // process has ended, or controller.terminate_grace_s + 1 wall seconds after
  // the termination (its worker saves and leaves by itself meanwhile).
  std::function<void(const std::string& instance_id)> on_instance_gone;
  // Whether the instance's worker is heard from (its rendezvous heartbeat).
  // A running instance whose worker was heard from and then not for
  // `unreachable_after_s` wall seconds, or never within `startup_grace_s` of
  // its launch, is replaced. Unset: not checked.
  std::function<bool(const std::string& instance_id)> is_alive;
  double unreachable_after_s = 20;
  double startup_grace_s = 120;
  // The training group as the rendezvous has it (dist::ReadMembership);
  // nullopt when it cannot be read. Make before break: the model lets the
  // old instances go in the tick the new ones are ready by
  // `changeover_hours`, and an instance that boots slower would find the
  // group gone and resume from the last checkpoint. While an instance the
  // model counts ready is not with the group (GroupMembers::With), the
  // leaving instances that are in it are kept (and billed), for at most
  // controller.handover_timeout_s wall seconds. Unset: they go when the
  // model says.
  std::function<std::optional<GroupMembers>()> group_members;
  // Wall time (unix s) of a command workload's last report (its silence is
  // measured from the later of it and the newest launch); unset: none.
  std::function<double()> last_report_unix_s;
  // The last error an instance's worker reported (its log), for messages.
  std::function<std::string(const std::string& instance_id)> last_error;
  // Called about every `status_interval_s` of wall time with a one-line status.
  std::function<void(const std::string&)> status_line;
  double status_interval_s = 5;
  // Called after every reconcile pass with its duration in seconds (metrics).
  std::function<void(double)> on_reconcile;
  // A write the store refuses for now (Unavailable: a full disk, a locked
  // file) is tried again, waiting on the clock, for up to this many seconds
  // (the fleet runs on meanwhile); then Run() fails with the store's error
  // and the instances run on, for a controller started again to adopt.
  double store_retry_limit_s = 3600;
  // Launches and terminations the provider refuses for now (Unavailable: no
  // capacity, throttling) are retried after a backoff doubling from one
  // reconcile interval up to `launch_backoff_max_s` simulated seconds.
  // The job fails, naming the provider's answer, when launches have been
  // refused for `launch_retry_limit_s` simulated seconds on end. Other
  // launch errors count as worker failures (3 x nodes + 3 without progress
  // fail the job). A refused termination leaves the instance running and
  // billed, and is asked again with the same backoff, at most 5 simulated
  // minutes.
  double launch_backoff_max_s = 1800;
  double launch_retry_limit_s = 12 * 3600;
  // Calls the provider refuses for now that the controller cannot go on
  // without (terminating the fleet at the job's end, adopting an instance
  // after a restart) are asked again, waiting on the clock, for up to this
  // many seconds; then Run() fails saying what still runs.
  double provider_retry_limit_s = 3600;
};

struct JobOutcome {
  JobState state = JobState::kPending;
  std::string message;
  double sim_hours = 0;     // simulated hours from start to end
  double wall_seconds = 0;  // of this controller process
  double cost_usd = 0;      // the ledger's total
  int preemptions = 0;      // gangs lost to the market, as the job's market model saw it
  // Instances the provider reported reclaimed (the store's records, every
  // controller of the job included): a cloud's or a cluster's own reclaims,
  // which a live market's model does not foresee.
  int instances_reclaimed = 0;
  int notices = 0;  // interruption notices given
  int launches = 0;
  int decisions = 0;
  bool resumed = false;  // this process took over an existing job
  // A command workload's program (RunSpec::command):
  int program_failures = 0;      // non-zero exits (and silences) counted against max_restarts
  int program_recoveries = 0;    // exits with a recover_on_exit_codes code
  int killed_at_reclaim = 0;     // instances whose program still ran when reclaimed
  double reconcile_us_mean = 0;  // controller time per reconcile pass
  double reconcile_us_max = 0;
};

class Controller {
 public:
  Controller(const RunSpec& spec, ControllerDeps deps);
  ~Controller();

  // Creates the job (or resumes it when the store has it and it has not
  // ended) and runs it to a terminal state. FailedPrecondition when the store
  // holds a job of that name made from a different job file.
  Result<JobOutcome> Run(const std::string& spec_hash);

  // Thread-safe: the API's cancel.
  Status RequestCancel();

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// One JSON line of a decision log (the same for `spot sim run --decision-log`).
std::string DecisionLogLine(const DecisionRecord& d);

}  // namespace spot::control
