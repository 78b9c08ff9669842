// The controller's state and steps (control/controller.h), shared by its two
// files: controller.cc (start, resume, the reconcile loop, billing, the end)
// and controller_fleet.cc (the fleet's instances: launch, adopt, terminate,
// replace the unreachable and the stragglers). Private to control/.
#pragma once

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <map>
#include <nlohmann/json.hpp>
#include <set>

#include "control/controller.h"
#include "core/file_io.h"

namespace spot::control {
namespace controller_internal {

inline constexpr double kEps = 1e-9;

inline fleet::PoolRef PoolOf(const InstanceRecord& r) {
  return r.spot ? fleet::PoolRef::Spot(r.zone) : fleet::PoolRef::OnDemand(r.zone);
}

}  // namespace controller_internal

struct Controller::Impl {
  RunSpec spec;
  ControllerDeps d;
  policy::JobSpec job;
  double gap_s = 0;
  double h = 0;                                  // tick length in hours
  int64_t ticks = 0;                             // of the market the feed knows
  std::unique_ptr<market::MarketFeed> own_feed;  // the replay, when none was given
  std::string id;
  double wall_epoch = 0;
  double compression = 1;
  int64_t start_tick = 0;
  JobState state = JobState::kPending;
  std::unique_ptr<fleet::FleetModel> model;  // the policy's model of the fleet
  int64_t last_tick = -1;
  std::map<std::string, InstanceRecord> instances;  // every instance of the job
  std::atomic<bool> cancel{false};
  JobOutcome out;
  std::FILE* decision_log = nullptr;
  TrainingProgress progress;
  int64_t step_at_placement = -1;
  double billed_usd = 0;    // the ledger's total, kept as rows are written
  double last_pass_s = -1;  // the job's time at the previous budget check
  double pass_gap_s = 0;    // the longest recent time between passes (decays)
  int failures_since_progress = 0;
  int64_t max_step_seen = 0;
  std::string last_failure;
  // Wall time a command workload's program first reported its last step
  // (-1: not yet); the job ends when the program exits, or
  // controller.terminate_grace_s after this.
  double done_reported_wall = -1;
  // The last error a worker itself wrote (its own words, e.g. the disk's
  // error), kept when later failures say less (unreachable, launch refused).
  std::string last_worker_error;
  std::map<std::string, double> unheard_since_wall;  // instance -> first wall time not heard from
  std::set<std::string> heard_from;                  // instances whose worker sent a heartbeat
  double last_liveness_check_wall = 0;
  double last_status_wall = 0;
  double last_progress_put_wall = 0;
  double start_wall = 0;
  double reconcile_us_sum = 0;
  int64_t reconcile_passes = 0;
  double latest_s = 0;                 // the job's time never goes back (a wall clock stepped back)
  int launch_retries = 0;              // launches refused for now, on end
  double launches_failing_since = -1;  // simulated time of the first of them; -1: none
  double next_launch_s = 0;            // no launch before (backing off)
  std::set<std::string> terminate_failing;    // instances whose termination the provider refused
  int terminate_retries = 0;                  // refusals on end
  double next_terminate_s = 0;                // no retry of a refused termination before
  std::set<std::string> replaced_stragglers;  // instances terminated as stragglers
  std::map<std::string, double> handover_held_since_wall;  // leaving instances kept for a handover
  // Terminated instances the rendezvous is not yet told are gone, and the
  // wall time it is told at the latest (ControllerDeps::on_instance_gone).
  std::map<std::string, double> gone_after_wall;
  bool program_finished = false;              // a command workload's program exited 0 (not stopped)
                                              // on every node, or one did terminate_grace_s ago
  std::set<std::string> program_finished_on;  // instances whose program exited 0
  double first_finish_wall = -1;              // wall s of the first of those exits
  std::string program_failed;                 // why the job fails: its program's failures ran out
  double provider_down_since = -1;            // monotonic s of the first failed Poll of an outage
  std::string provider_failed;                // why the job fails: the provider's outage outlasted
                                              // controller.provider_outage_s

  double WallNow() const { return d.clock->NowUnixS(); }
  // Simulated now: the wall clock since the job's epoch, never before a time
  // this process has acted at (an NTP step back must not make a negative
  // duration or take a launch back in time).
  double NowS() {
    latest_s = std::max(latest_s, (WallNow() - wall_epoch) * compression);
    return latest_s;
  }
  double ProgressHours() const {
    if (progress.fraction >= 0)
      return std::min(job.compute_hours, job.compute_hours * progress.fraction);
    if (progress.total_steps <= 0) return 0;
    return std::min(job.compute_hours, job.compute_hours * static_cast<double>(progress.step) /
                                           static_cast<double>(progress.total_steps));
  }
  // The fleet the model holds, in the decision logs' spelling.
  std::string HeldName() const {
    return policy::FleetName(policy::FleetOf(model->instances(), job.nodes), job.nodes);
  }
  bool HoldsAny() const { return !policy::FleetOf(model->instances(), job.nodes).empty(); }
  policy::Observation Observe(int64_t t, int64_t abs, double progress_hours, bool preempted) const {
    return policy::ObserveFleet(t, job, progress_hours, preempted,
                                policy::MarketView(d.zones, abs, job.nodes), model->instances(),
                                model->types());
  }

  // Runs a store write; one the store refuses for now (Unavailable: a full
  // disk, a locked file) is tried again, waiting on the clock, until it
  // succeeds or `store_retry_limit_s` passes. Nothing is dropped and nothing
  // done twice (each write is one transaction, rolled back when refused);
  // the fleet runs on meanwhile, as under a controller that was down.
  template <typename Write>
  Status Durably(Write&& write) {
    Status st = write();
    if (st.ok() || st.code() != StatusCode::kUnavailable) return st;
    const double since = d.clock->MonotonicS();
    const double since_s = latest_s;
    const std::string first(st.message());
    spdlog::warn("job {}: {}; waiting for the store", id, first);
    double wait = std::max(spec.controller.reconcile_interval_s, 0.01);
    while (!st.ok()) {
      if (st.code() != StatusCode::kUnavailable) return st;
      const double waited = d.clock->MonotonicS() - since;
      if (waited >= d.store_retry_limit_s) {
        return UnavailableError(
            fmt::format("job {}: the job store refused writes for {:.0f} s; giving up: {}", id,
                        waited, st.message()));
      }
      d.clock->SleepFor(std::min(wait, d.store_retry_limit_s - waited));
      wait = std::min(2 * wait, std::max(spec.controller.reconcile_interval_s, 5.0));
      st = write();
    }
    const std::string what =
        fmt::format("writes refused for {:.0f} s: {}", d.clock->MonotonicS() - since, first);
    spdlog::info("job {}: the store takes writes again ({})", id, what);
    return Event(since_s, "store-unavailable", "", what);
  }
  // The wait in simulated seconds before retry `k` (from 0) of a call the
  // provider refused for now: one reconcile interval, doubling, at most
  // `launch_backoff_max_s`.
  double Backoff(int k) const {
    return std::min(
        d.launch_backoff_max_s,
        std::ldexp(spec.controller.reconcile_interval_s * compression, std::min(k, 30)));
  }
  Status Event(double sim_s, const std::string& kind, const std::string& instance,
               const std::string& detail) {
    return Durably([&] {
      return d.store->AppendEvent(id, {.sim_s = sim_s,
                                       .wall_unix_s = WallNow(),
                                       .kind = kind,
                                       .instance_id = instance,
                                       .detail = detail});
    });
  }
  Status SetState(JobState to, const std::string& message, double sim_s) {
    if (to == state) return Status::Ok();
    SPOT_RETURN_IF_ERROR(Durably([&] { return d.store->SetJobState(id, to, message, sim_s); }));
    spdlog::info("job {}: {} -> {}{}", id, JobStateName(state), JobStateName(to),
                 message.empty() ? "" : " (" + message + ")");
    state = to;
    return Status::Ok();
  }

  Status Start(const std::string& spec_hash, bool* resumed);
  Status Resume();
  Status AdoptInstance(const cloud::InstanceView& v, double* now);
  Status ReplayDecisions();
  Status PollProvider(double now);
  // A command workload: program_finished once its program exited 0 on every
  // live instance, or controller.terminate_grace_s after the first did.
  void FinishedEverywhere();
  // A Poll that failed: waited out up to controller.provider_outage_s of
  // wall time, then the job fails (provider_failed) naming `error`.
  void ProviderOutage(const Status& error);
  Status ReconcileTick(int64_t t);
  Status EnsureFleet(double now);
  // Tells the rendezvous an instance is gone (once), now or, for one we
  // terminated, whose worker leaves by itself, at the latest by its grace.
  void InstanceGone(const std::string& instance_id);
  void TellGoneAfterGrace();
  // Whether instance `r`, which the model no longer holds, is kept for a
  // handover (ControllerDeps::group_members): it is with the group and an
  // instance the model counts ready (`ready`, per pool) is not yet.
  Result<bool> KeepForHandover(const InstanceRecord& r, const std::map<fleet::PoolRef, int>& ready,
                               const GroupMembers& members, double now);
  Status Launch(const fleet::PoolRef& pool, double max_price, double now);
  Status TerminateInstance(InstanceRecord& r, double now, const std::string& why);
  Status Bill(double now);
  // What the live instances have cost since their last billed tick boundary
  // until `now`, and what they cost per hour at `now`'s tick.
  struct Running {
    double unbilled_usd = 0;
    double usd_per_hour = 0;
  };
  Running RunningCost(double now);
  // True when the budget would be spent before the pass after this one: the
  // ledger, what runs unbilled, and the running rate over twice the longest
  // recent time between passes (the job's time, so a compressed market's
  // slow pass counts for what it costs). Sets `why`.
  bool BudgetRunsOut(double now, std::string* why);
  Status CheckReachable(double now);
  Status ReplaceStragglers(double now);
  // A command workload's program ended on `r` without a notice or a
  // termination of ours: finished (0), to recover, or failed.
  Status ProgramExited(InstanceRecord& r, int code, const cloud::ProviderEvent& e);
  // Replaces the fleet of a command workload silent for silence_seconds.
  Status CheckSilence(double now);
  // One more failure of the program; past max_restarts_on_errors the job fails.
  void CountProgramFailure(const std::string& what);
  // Takes the instance's worker's last error (if it wrote one) as the last
  // failure.
  void NoteWorkerError(const std::string& instance_id);
  Status Finish(JobState to, const std::string& message, double now);
  void StatusLine(double now);
  Result<JobOutcome> Loop();
};

}  // namespace spot::control
