#include "control/controller.h"

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <map>
#include <nlohmann/json.hpp>
#include <random>
#include <set>

#include "core/file_io.h"

namespace spot::control {
namespace {

using fleet::PoolRef;
using policy::InstanceKind;
using policy::Placement;

constexpr double kEps = 1e-9;

PoolRef PoolOf(const InstanceRecord& r) {
  return r.spot ? PoolRef::Spot(r.zone) : PoolRef::OnDemand(r.zone);
}

std::string NewInstanceId() {
  static thread_local std::mt19937_64 rng(std::random_device{}());
  return fmt::format("i-0{:016x}", rng());
}

}  // namespace

std::string DecisionLogLine(const DecisionRecord& d) {
  nlohmann::json j = {{"tick", d.tick},
                      {"abs_tick", d.abs_tick},
                      {"preempted", d.preempted},
                      {"current", d.current},
                      {"target", d.target},
                      {"progress_hours", d.progress_hours},
                      {"changeover_left_hours", d.changeover_left_hours}};
  return j.dump();
}

TrainingProgress ReadTrainingProgress(const std::string& path) {
  auto text = ReadFile(path);
  return text.ok() ? ParseTrainingProgress(*text) : TrainingProgress{};
}

TrainingProgress KnownProgress(const ProgressReport& report) {
  TrainingProgress p;
  static_cast<ProgressReport&>(p) = report;
  p.known = true;
  p.json = ProgressReportJson(report);
  return p;
}

TrainingProgress ParseTrainingProgress(const std::string& text) {
  TrainingProgress p;
  auto r = ParseProgressReport(text);
  if (!r.ok()) return p;
  static_cast<ProgressReport&>(p) = *r;
  p.known = true;
  p.json = text;
  return p;
}

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
  double billed_usd = 0;  // the ledger's total, kept as rows are written
  int failures_since_progress = 0;
  int64_t max_step_seen = 0;
  std::string last_failure;
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
  Status ReconcileTick(int64_t t);
  Status EnsureFleet(double now);
  Status Launch(const PoolRef& pool, double max_price, double now);
  Status TerminateInstance(InstanceRecord& r, double now, const std::string& why);
  Status Bill(double now);
  Status CheckReachable(double now);
  Status ReplaceStragglers(double now);
  Status Finish(JobState to, const std::string& message, double now);
  void StatusLine(double now);
  Result<JobOutcome> Loop();
};

Status Controller::Impl::Start(const std::string& spec_hash, bool* resumed) {
  SPOT_ASSIGN_OR_RETURN(std::optional<JobRecord> rec, d.store->GetJob(id));
  *resumed = false;
  if (!rec) {
    wall_epoch = d.new_job_epoch_unix_s > 0 ? d.new_job_epoch_unix_s : WallNow();
    JobRecord j{.id = id,
                .spec_path = spec.source,
                .spec_hash = spec_hash,
                .state = JobState::kPending,
                .message = "created",
                .wall_epoch_unix_s = wall_epoch,
                .time_compression = compression,
                .start_tick = start_tick,
                .created_unix_s = wall_epoch,
                .updated_unix_s = wall_epoch};
    SPOT_RETURN_IF_ERROR(d.store->CreateJob(j));
    std::error_code ec;
    std::filesystem::remove(d.progress_path, ec);  // a stale file of an older job of this name
    return Status::Ok();
  }
  if (rec->spec_hash != spec_hash) {
    return FailedPreconditionError(fmt::format(
        "{}: the state in {} belongs to job '{}' made from a different job file (hash {} vs {}); "
        "use another controller.state_dir or name",
        spec.source, d.store->path(), id, rec->spec_hash, spec_hash));
  }
  state = rec->state;
  wall_epoch = rec->wall_epoch_unix_s;
  compression = rec->time_compression;
  start_tick = rec->start_tick;
  if (IsTerminal(state)) return Status::Ok();
  *resumed = true;
  return Resume();
}

// Rebuilds the model tick by tick from the log, and asks a fresh policy each
// question again: a different answer is worth a warning (a policy that is not
// a function of what it saw), never a different fleet.
Status Controller::Impl::ReplayDecisions() {
  SPOT_ASSIGN_OR_RETURN(std::vector<DecisionRecord> log, d.store->Decisions(id));
  int mismatches = 0;
  for (const DecisionRecord& r : log) {
    (void)model->Reclaim(r.abs_tick);
    if (r.abs_tick < ticks) {
      fleet::FleetModel again = *model;
      (void)again.Apply(
          d.policy->Decide(Observe(r.tick, r.abs_tick, r.progress_hours, r.preempted)).fleet,
          r.abs_tick);
      if (policy::FleetName(policy::FleetOf(again.instances(), job.nodes), job.nodes) != r.target) {
        ++mismatches;
      }
    }
    (void)model->Apply(policy::ParseFleetName(r.target, job.nodes), r.abs_tick);
    (void)model->RunTick(r.abs_tick, 0);
    last_tick = r.tick;
    if (r.preempted) ++out.preemptions;
    ++out.decisions;
  }
  if (mismatches > 0) {
    spdlog::warn("job {}: replaying {} decisions into a fresh {} policy gave {} different answers",
                 id, log.size(), d.policy->name(), mismatches);
  }
  return Status::Ok();
}

Status Controller::Impl::Resume() {
  SPOT_RETURN_IF_ERROR(ReplayDecisions());
  SPOT_ASSIGN_OR_RETURN(billed_usd, d.store->TotalCost(id));
  double now = NowS();
  SPOT_ASSIGN_OR_RETURN(std::vector<InstanceRecord> all, d.store->Instances(id, false));
  // Notices already given are not given (nor counted) again.
  SPOT_ASSIGN_OR_RETURN(std::vector<EventRecord> events, d.store->Events(id));
  std::map<std::string, double> noticed;
  for (const EventRecord& e : events) {
    if (e.kind == "notice") {
      noticed[e.instance_id] = e.sim_s;
      ++out.notices;
    }
  }
  int adopted = 0;
  for (InstanceRecord& r : all) {
    instances[r.id] = r;
    if (r.ended_s) continue;
    cloud::InstanceView v{.spec = {.id = r.id,
                                   .zone = r.zone,
                                   .spot = r.spot,
                                   .zone_name = r.zone_name,
                                   .region = spec.resources.region,
                                   .instance_type = r.instance_type},
                          .provider_data = r.provider_data,
                          .launched_s = r.launched_s,
                          .notice_s = noticed.count(r.id) ? noticed[r.id] : -1.0};
    Status st = !r.provider_data.empty() ? AdoptInstance(v, &now) : NotFoundError("never started");
    if (st.ok()) {
      ++adopted;
      continue;
    }
    if (st.code() == StatusCode::kUnavailable) return st;
    // Gone while no controller watched: billed until now, as a cloud bills an
    // instance until someone terminates it.
    spdlog::warn("instance {}: {}", r.id, st.message());
    SPOT_RETURN_IF_ERROR(Durably(
        [&] { return d.store->EndInstance(r.id, std::max(now, r.billed_until_s), "lost"); }));
    instances[r.id].ended_s = std::max(now, r.billed_until_s);
    instances[r.id].end_reason = "lost";
    SPOT_RETURN_IF_ERROR(Event(now, "lost", r.id, std::string(st.message())));
  }
  spdlog::info(
      "job {}: resumed at {:.2f} simulated hours; {} decisions replayed, {} instances "
      "adopted",
      id, now / 3600, out.decisions, adopted);
  return Event(now, "resume", "", fmt::format("{} instances adopted", adopted));
}

// An instance taken for lost while it runs would run on, billed and
// unwatched: a provider that refuses for now is asked again (waiting on the
// clock, the same backoff as launches) for up to `provider_retry_limit_s`.
Status Controller::Impl::AdoptInstance(const cloud::InstanceView& v, double* now) {
  const double give_up = d.clock->MonotonicS() + d.provider_retry_limit_s;
  for (int k = 0;; ++k) {
    Status st = d.provider->Adopt(v, *now);
    if (st.code() != StatusCode::kUnavailable) return st;
    if (d.clock->MonotonicS() >= give_up) {
      return UnavailableError(fmt::format(
          "job {}: adopting instance {} after a restart: the provider refused for {:.0f} s ({}); "
          "start the controller again",
          id, v.spec.id, d.provider_retry_limit_s, st.message()));
    }
    if (k == 0) spdlog::warn("instance {}: adopting it: {}; trying again", v.spec.id, st.message());
    d.clock->SleepFor(Backoff(k) / compression);
    *now = NowS();
  }
}

// A termination the provider refuses for now (Unavailable: throttled, the
// API down) leaves the instance running and billed, as the cloud does; the
// next pass (or Finish) asks again.
Status Controller::Impl::TerminateInstance(InstanceRecord& r, double now, const std::string& why) {
  if (r.ended_s) {
    terminate_failing.erase(r.id);
    return Status::Ok();
  }
  now = std::max(now, r.billed_until_s);
  if (terminate_failing.count(r.id) && now < next_terminate_s) return Status::Ok();
  Status st = d.provider->Terminate(r.id, now);
  if (st.code() == StatusCode::kUnavailable) {
    // One backoff a round, at most 5 minutes: the fleet is billed meanwhile.
    if (now >= next_terminate_s) {
      next_terminate_s = now + std::min(Backoff(terminate_retries++), 300.0);
    }
    if (!terminate_failing.insert(r.id).second) return Status::Ok();
    spdlog::warn("instance {}: terminating it: {}; trying again", r.id, st.message());
    return Event(now, "terminate-failed", r.id, std::string(st.message()));
  }
  if (!st.ok() && st.code() != StatusCode::kNotFound) return st;
  terminate_failing.erase(r.id);
  if (terminate_failing.empty()) terminate_retries = 0;
  SPOT_RETURN_IF_ERROR(Durably([&] { return d.store->EndInstance(r.id, now, "terminated"); }));
  r.ended_s = now;
  r.end_reason = "terminated";
  if (d.on_instance_gone) d.on_instance_gone(r.id);
  return Event(now, "terminate", r.id, why);
}

Status Controller::Impl::PollProvider(double now) {
  for (const cloud::ProviderEvent& e : d.provider->Poll(now)) {
    auto it = instances.find(e.instance_id);
    if (it == instances.end()) continue;
    InstanceRecord& r = it->second;
    switch (e.kind) {
      case cloud::ProviderEvent::Kind::kNotice:
        // A notice racing our own termination is no interruption of the job
        // (nor one a restarted controller should count again).
        if (r.ended_s) {
          SPOT_RETURN_IF_ERROR(Event(e.sim_s, "notice-after-end", r.id, e.detail));
          break;
        }
        ++out.notices;
        SPOT_RETURN_IF_ERROR(Event(e.sim_s, "notice", r.id, e.detail));
        break;
      case cloud::ProviderEvent::Kind::kPreempted: {
        if (r.ended_s) break;  // already terminated by us
        const double at = std::max(e.sim_s, r.billed_until_s);
        SPOT_RETURN_IF_ERROR(Durably([&] { return d.store->EndInstance(r.id, at, "preempted"); }));
        r.ended_s = at;
        r.end_reason = "preempted";
        if (d.on_instance_gone) d.on_instance_gone(r.id);
        SPOT_RETURN_IF_ERROR(Event(at, "preempt", r.id, e.detail));
        break;
      }
      case cloud::ProviderEvent::Kind::kExited: {
        // The worker process ended; the instance is billed until it is
        // terminated or reclaimed, as a VM whose program ended still is.
        int code = -1;
        double notice = -1;
        for (const cloud::InstanceView& v : d.provider->List()) {
          if (v.spec.id == r.id) {
            code = v.exit_code;
            notice = v.notice_s;
          }
        }
        SPOT_RETURN_IF_ERROR(Event(e.sim_s, "exit", r.id, e.detail));
        if (d.on_instance_gone) d.on_instance_gone(r.id);
        if (r.ended_s || notice >= 0 || (code == 0 && progress.done)) break;
        // Neither a notice nor the end of training: the worker failed. Give
        // the instance back; the next pass launches a replacement.
        ++failures_since_progress;
        if (d.last_error) last_failure = d.last_error(r.id);
        spdlog::warn("instance {}: worker {}; replacing it{}", r.id, e.detail,
                     last_failure.empty() ? "" : " (" + last_failure + ")");
        SPOT_RETURN_IF_ERROR(TerminateInstance(r, e.sim_s, "worker " + e.detail));
        break;
      }
    }
  }
  return Status::Ok();
}

Status Controller::Impl::ReconcileTick(int64_t t) {
  const int64_t abs = start_tick + t;
  if (Status st = d.feed->Advance(abs); !st.ok()) {
    spdlog::warn("job {}: market feed at tick {}: {}; deciding on what is known", id, abs,
                 st.message());
  }
  ticks = d.feed->known_ticks();
  const bool preempted = model->Reclaim(abs) > 0;  // none past the traces' end: capacity 0
  if (preempted) ++out.preemptions;
  DecisionRecord rec{.tick = t,
                     .abs_tick = abs,
                     .progress_hours = ProgressHours(),
                     .current = HeldName(),
                     .preempted = preempted};
  std::vector<fleet::PoolTarget> target;
  if (abs < ticks) {
    const policy::Observation obs = Observe(t, abs, rec.progress_hours, preempted);
    rec.changeover_left_hours = obs.changeover_left_hours;
    target = d.policy->Decide(obs).fleet;
  } else {
    // The market's records ended: finish on demand, as SpotSim does.
    target = policy::GangDecision(Placement::OnDemand(), job.nodes).fleet;
  }
  const bool launched = model->Apply(target, abs) > 0;
  (void)model->RunTick(abs, 0);  // startup delays; progress and money are measured
  rec.target = HeldName();
  SPOT_RETURN_IF_ERROR(Durably([&] { return d.store->AppendDecision(id, rec); }));
  ++out.decisions;
  if (decision_log) {
    std::fprintf(decision_log, "%s\n", DecisionLogLine(rec).c_str());
    std::fflush(decision_log);
  }
  const double sim_s = static_cast<double>(t) * gap_s;
  if (preempted) {
    SPOT_RETURN_IF_ERROR(SetState(JobState::kRecovering, "spot capacity lost", sim_s));
  }
  if (launched) {
    step_at_placement = progress.step;
    if (state != JobState::kRecovering) {
      SPOT_RETURN_IF_ERROR(SetState(JobState::kProvisioning, "moving to " + rec.target, sim_s));
    }
  } else if (!HoldsAny() && (state == JobState::kRunning || state == JobState::kPending)) {
    SPOT_RETURN_IF_ERROR(SetState(JobState::kProvisioning, "waiting for capacity", sim_s));
  }
  return Status::Ok();
}

Status Controller::Impl::Launch(const PoolRef& pool, double max_price, double now) {
  const bool spot = pool.spot();
  const bool typed = !d.types.empty() && !model->Type(pool).instance_type.empty();
  InstanceRecord r{
      .id = NewInstanceId(),
      .job_id = id,
      .zone = pool.zone,
      .zone_name = pool.zone >= 0 ? d.zones[pool.zone]->pool.zone : "on-demand",
      .instance_type = typed ? model->Type(pool).instance_type : spec.resources.instance_type,
      .spot = spot,
      .launched_s = now,
      .billed_until_s = now};
  // Recorded before it exists: a controller killed during the launch finds it.
  SPOT_RETURN_IF_ERROR(Durably([&] { return d.store->PutInstance(r); }));
  instances[r.id] = r;
  auto v = d.provider->Launch({.id = r.id,
                               .zone = r.zone,
                               .spot = spot,
                               .zone_name = r.zone_name,
                               .region = spec.resources.region,
                               .instance_type = r.instance_type,
                               .max_price = max_price},
                              now);
  InstanceRecord& rec = instances[r.id];
  if (!v.ok()) {
    SPOT_RETURN_IF_ERROR(Durably([&] { return d.store->EndInstance(r.id, now, "failed"); }));
    rec.ended_s = now;
    rec.end_reason = "failed";
    last_failure = fmt::format("launching {} in {}: {}", spot ? "spot" : "on-demand", r.zone_name,
                               v.status().message());
    if (v.status().code() == StatusCode::kUnavailable) {
      // No capacity or throttled for now: back off (doubling from one
      // reconcile interval) rather than spend the failure budget in minutes.
      if (launches_failing_since < 0) launches_failing_since = now;
      next_launch_s = now + Backoff(launch_retries++);
    } else {
      ++failures_since_progress;
    }
    return Event(now, "launch-failed", r.id, std::string(v.status().message()));
  }
  launch_retries = 0;
  launches_failing_since = -1;
  next_launch_s = 0;
  rec.provider_data = v->provider_data;
  SPOT_RETURN_IF_ERROR(Durably([&] { return d.store->PutInstance(rec); }));
  ++out.launches;
  return Event(now, "launch", r.id,
               fmt::format("{} {} {}", spot ? "spot" : "on-demand", r.zone_name, v->provider_data));
}

// Makes the provider's instances match the model's fleet, pool by pool.
Status Controller::Impl::EnsureFleet(double now) {
  std::map<PoolRef, int> want;
  std::map<PoolRef, double> bid;
  for (const fleet::Instance& i : model->instances()) {
    if (i.state == fleet::InstanceState::kPreempted) continue;
    ++want[i.pool];
    bid[i.pool] = i.max_price;
  }
  for (auto& [iid, r] : instances) {
    if (r.ended_s) continue;
    auto it = want.find(PoolOf(r));
    if (it == want.end() || it->second == 0) {
      SPOT_RETURN_IF_ERROR(TerminateInstance(r, now, "not in the fleet of " + HeldName()));
    } else {
      --it->second;
    }
  }
  if (want.empty()) return Status::Ok();
  if (failures_since_progress > 3 * job.nodes + 3) {
    return UnavailableError(fmt::format(
        "{} instance launches or workers failed without training progress{}",
        failures_since_progress, last_failure.empty() ? "" : "; the last one: " + last_failure));
  }
  if (launches_failing_since >= 0 && now - launches_failing_since >= d.launch_retry_limit_s) {
    return UnavailableError(fmt::format("launches refused for {:.1f} simulated hours on end; {}",
                                        (now - launches_failing_since) / 3600, last_failure));
  }
  for (const auto& [pool, missing] : want) {
    for (int k = 0; k < missing && now >= next_launch_s; ++k) {
      SPOT_RETURN_IF_ERROR(Launch(pool, bid[pool], now));
    }
  }
  return Status::Ok();
}

// A worker whose process runs but is not heard from (stopped, hung, cut off)
// holds a billed instance and no share of the work: replace it.
Status Controller::Impl::CheckReachable(double now) {
  const double wall = WallNow();
  if (!d.is_alive || wall - last_liveness_check_wall < 1) return Status::Ok();
  last_liveness_check_wall = wall;
  std::map<std::string, bool> process_running;
  for (const cloud::InstanceView& v : d.provider->List())
    process_running[v.spec.id] = v.process_running;
  for (auto& [iid, r] : instances) {
    // An ended process is the provider's business (exit events), not a silence.
    if (r.ended_s || r.provider_data.empty() || !process_running[iid]) {
      unheard_since_wall.erase(iid);
      continue;
    }
    // A worker is judged once it has been heard from (booting takes what it
    // takes), or when it never is within the startup grace.
    const double launched_wall = wall_epoch + r.launched_s / compression;
    if (d.is_alive(iid)) {
      heard_from.insert(iid);
      unheard_since_wall.erase(iid);
      continue;
    }
    if (!heard_from.count(iid) && wall - launched_wall < d.startup_grace_s) continue;
    auto [it, fresh] = unheard_since_wall.emplace(iid, wall);
    if (fresh || wall - it->second < d.unreachable_after_s) continue;
    ++failures_since_progress;
    last_failure =
        fmt::format("instance {} unreachable: no heartbeat for {:.0f} s", iid, wall - it->second);
    spdlog::warn("{}; replacing it", last_failure);
    SPOT_RETURN_IF_ERROR(Event(now, "unreachable", iid, last_failure));
    SPOT_RETURN_IF_ERROR(TerminateInstance(r, now, "unreachable"));
    unheard_since_wall.erase(iid);
  }
  return Status::Ok();
}

// A worker the training's rank 0 flags as a straggler (slower than the
// group's median by the job's factor for its time) holds the whole group back
// in synchronous training: with controller.replace_stragglers, its instance
// is terminated (the worker saves and leaves on SIGTERM, as on a notice) and
// the fleet target launches a replacement. Once per instance.
Status Controller::Impl::ReplaceStragglers(double now) {
  if (!spec.controller.replace_stragglers || !progress.known) return Status::Ok();
  for (const std::string& iid : progress.stragglers) {
    auto it = instances.find(iid);
    if (it == instances.end() || it->second.ended_s || !replaced_stragglers.insert(iid).second) {
      continue;
    }
    const std::string why =
        fmt::format("straggler: flagged by rank 0 of generation {}", progress.generation);
    spdlog::warn("instance {}: {}; replacing it", iid, why);
    SPOT_RETURN_IF_ERROR(Event(now, "straggler", iid, why));
    SPOT_RETURN_IF_ERROR(TerminateInstance(it->second, now, "straggler"));
  }
  return Status::Ok();
}

// Bills every instance up to the last whole tick (an ended one up to its
// end), all in one transaction.
Status Controller::Impl::Bill(double now) {
  const double whole = std::floor(now / gap_s + kEps) * gap_s;
  std::vector<JobStore::InstanceBill> bills;
  std::vector<InstanceRecord*> billed;
  for (auto& [iid, r] : instances) {
    const double until = r.ended_s ? *r.ended_s : std::max(whole, r.billed_until_s);
    if (until <= r.billed_until_s + kEps) continue;
    std::vector<LedgerEntry> rows;
    for (double from = r.billed_until_s; from < until - kEps;) {
      const int64_t tick = static_cast<int64_t>(std::floor(from / gap_s + kEps));
      const double to = std::min(static_cast<double>(tick + 1) * gap_s, until);
      const double price = model->Price(PoolOf(r), start_tick + tick);
      rows.push_back({.instance_id = r.id,
                      .from_s = from,
                      .to_s = to,
                      .usd_per_hour = price,
                      .usd = (to - from) / 3600.0 * price});
      from = to;
    }
    if (rows.empty()) continue;
    bills.push_back({r.id, std::move(rows)});
    billed.push_back(&r);
  }
  if (bills.empty()) return Status::Ok();
  SPOT_RETURN_IF_ERROR(Durably([&] { return d.store->BillAll(bills); }));
  for (size_t k = 0; k < bills.size(); ++k) {
    billed[k]->billed_until_s = bills[k].rows.back().to_s;
    for (const LedgerEntry& e : bills[k].rows) billed_usd += e.usd;
  }
  return Status::Ok();
}

// Terminates the fleet (asking again while the provider refuses, billing
// meanwhile, for up to `provider_retry_limit_s`), bills it, then moves the
// job to its end. Instances that cannot be terminated leave the job as it
// is and fail Run(): a controller started again finishes it.
Status Controller::Impl::Finish(JobState to, const std::string& message, double now) {
  const double give_up = d.clock->MonotonicS() + d.provider_retry_limit_s;
  while (true) {
    for (auto& [iid, r] : instances) SPOT_RETURN_IF_ERROR(TerminateInstance(r, now, message));
    if (terminate_failing.empty()) break;
    if (d.clock->MonotonicS() >= give_up) {
      return UnavailableError(fmt::format(
          "job {}: ending it ({}): the provider refused to terminate {} instances for {:.0f} s "
          "(events 'terminate-failed'); they run on",
          id, message, terminate_failing.size(), d.provider_retry_limit_s));
    }
    SPOT_RETURN_IF_ERROR(Bill(now));
    d.clock->SleepFor(std::max(spec.controller.reconcile_interval_s, 0.01));
    now = NowS();
    SPOT_RETURN_IF_ERROR(PollProvider(now));
  }
  SPOT_RETURN_IF_ERROR(Bill(now));
  SPOT_RETURN_IF_ERROR(SetState(to, message, now));
  // Leave no process behind: the provider's Poll sends SIGKILL once a
  // terminated process outlives its grace.
  const double until = d.clock->MonotonicS() + spec.controller.terminate_grace_s + 2;
  while (d.clock->MonotonicS() < until) {
    (void)d.provider->Poll(now);
    bool running = false;
    for (const cloud::InstanceView& v : d.provider->List()) running |= v.process_running;
    if (!running) break;
    d.clock->SleepFor(0.02);
  }
  out.message = message;
  return Status::Ok();
}

void Controller::Impl::StatusLine(double now) {
  if (!d.status_line || WallNow() - last_status_wall < d.status_interval_s) return;
  last_status_wall = WallNow();
  int live = 0;
  for (const auto& [iid, r] : instances) live += r.ended_s ? 0 : 1;
  const Placement gang = policy::GangOf(model->instances(), job.nodes);
  std::string where = gang.kind == InstanceKind::kSpot ? "spot " + d.zones[gang.zone]->pool.zone
                      : gang.kind == InstanceKind::kOnDemand ? "on-demand"
                                                             : HeldName();
  d.status_line(fmt::format("{:6.2f} h | {} | {} x{} | step {}/{} | ${:.2f} | preemptions {}",
                            now / 3600, JobStateName(state), where, live, progress.step,
                            progress.total_steps, billed_usd, out.preemptions));
}

Result<JobOutcome> Controller::Impl::Loop() {
  while (true) {
    const auto pass_start = std::chrono::steady_clock::now();
    const double now = NowS();
    // Progress first: a worker that exits after finishing has written it.
    TrainingProgress p = d.read_progress();
    if (p.known) {
      // Progress is new steps, not a restart redoing old ones.
      if (p.step > max_step_seen) failures_since_progress = 0;
      max_step_seen = std::max(max_step_seen, p.step);
      progress = p;
    }
    SPOT_RETURN_IF_ERROR(PollProvider(now));
    if (cancel.load()) {
      SPOT_RETURN_IF_ERROR(Finish(JobState::kCancelled, "cancelled through the API", now));
      break;
    }
    if (progress.done) {
      // The training can end while a gang is still being (re)provisioned (an
      // elastic training finishes on the workers left); there is no way from
      // PROVISIONING or RECOVERING to SUCCEEDED but through RUNNING.
      if (state == JobState::kProvisioning || state == JobState::kRecovering) {
        SPOT_RETURN_IF_ERROR(SetState(JobState::kRunning, "the training ended", now));
      }
      SPOT_RETURN_IF_ERROR(
          Finish(JobState::kSucceeded, fmt::format("trained {} steps", progress.step), now));
      break;
    }
    const int64_t tick = static_cast<int64_t>(std::floor(now / gap_s + kEps));
    while (last_tick < tick) SPOT_RETURN_IF_ERROR(ReconcileTick(++last_tick));
    SPOT_RETURN_IF_ERROR(CheckReachable(now));
    SPOT_RETURN_IF_ERROR(ReplaceStragglers(now));
    if (Status st = EnsureFleet(now); !st.ok()) {
      SPOT_RETURN_IF_ERROR(Finish(JobState::kFailed, std::string(st.message()), now));
      break;
    }
    SPOT_RETURN_IF_ERROR(Bill(now));
    if (spec.budget_usd > 0) {
      const double cost = billed_usd;
      if (cost >= spec.budget_usd) {
        SPOT_RETURN_IF_ERROR(
            Finish(JobState::kFailed,
                   fmt::format("budget of ${:.2f} reached (${:.2f} spent) before the job finished",
                               spec.budget_usd, cost),
                   now));
        break;
      }
    }
    if ((state == JobState::kProvisioning || state == JobState::kRecovering) && HoldsAny() &&
        progress.step > step_at_placement && progress.world > 0) {
      SPOT_RETURN_IF_ERROR(SetState(JobState::kRunning,
                                    fmt::format("training at step {} on {} "
                                                "workers",
                                                progress.step, progress.world),
                                    now));
    }
    if (progress.known && WallNow() - last_progress_put_wall >= 1) {
      last_progress_put_wall = WallNow();
      SPOT_RETURN_IF_ERROR(
          Durably([&] { return d.store->PutValue(id, "progress", progress.json); }));
    }
    StatusLine(now);
    const double us =
        std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - pass_start)
            .count();
    reconcile_us_sum += us;
    if (d.on_reconcile) d.on_reconcile(us / 1e6);
    out.reconcile_us_max = std::max(out.reconcile_us_max, us);
    ++reconcile_passes;
    d.clock->SleepFor(spec.controller.reconcile_interval_s);
  }
  if (progress.known) (void)d.store->PutValue(id, "progress", progress.json);
  return out;
}

Controller::Controller(const RunSpec& spec, ControllerDeps deps) : impl_(std::make_unique<Impl>()) {
  Impl& m = *impl_;
  m.spec = spec;
  m.d = std::move(deps);
  if (!m.d.clock) m.d.clock = RealClock();
  if (!m.d.read_progress) {
    m.d.read_progress = [path = m.d.progress_path] { return ReadTrainingProgress(path); };
  }
  if (!m.d.feed) {
    m.own_feed = market::MakeReplayedFeed(m.d.zones);
    m.d.feed = m.own_feed.get();
  }
  m.d.zones.assign(m.d.feed->zones().begin(), m.d.feed->zones().end());
  m.job = ToPolicyJob(spec);
  m.gap_s = m.d.zones.empty() ? 1 : m.d.zones[0]->gap_seconds;
  m.h = m.gap_s / 3600.0;
  m.ticks = m.d.zones.empty() ? 0 : m.d.feed->known_ticks();
  m.id = spec.name;
  m.compression = spec.market.time_compression;
  m.start_tick = spec.market.start_tick;
}

Controller::~Controller() {
  if (impl_->decision_log) std::fclose(impl_->decision_log);
}

Status Controller::RequestCancel() {
  impl_->cancel.store(true);
  return Status::Ok();
}

Result<JobOutcome> Controller::Run(const std::string& spec_hash) {
  Impl& m = *impl_;
  m.start_wall = m.WallNow();
  if (m.d.zones.empty()) return InvalidArgumentError("the job has no market zones");
  if (!m.d.types.empty() && m.d.types.size() != m.d.zones.size() + 1) {
    return InvalidArgumentError(fmt::format(
        "{}: {} instance types for {} zones (one per zone and the reference type expected)",
        m.spec.source, m.d.types.size(), m.d.zones.size()));
  }
  m.model = std::make_unique<fleet::FleetModel>(
      m.d.zones,
      m.d.types.empty() ? fleet::UniformTypes(m.d.zones, m.job.ondemand_price) : m.d.types,
      policy::ToFleetJob(m.job));
  if (m.start_tick >= m.ticks) {
    return InvalidArgumentError(fmt::format("{}: market.start_tick {} is past the traces' {} ticks",
                                            m.spec.source, m.start_tick, m.ticks));
  }
  if (m.d.policy->needs_future()) {
    return InvalidArgumentError(fmt::format(
        "{}: policy '{}' needs to know the future; it is a bound for `spot sim`, not a live policy",
        m.spec.source, m.d.policy->name()));
  }
  m.d.policy->Start(
      {m.job, policy::MarketView(m.d.zones, m.start_tick, m.job.nodes), m.start_tick});
  SPOT_RETURN_IF_ERROR(m.Start(spec_hash, &m.out.resumed));
  if (!m.d.decision_log_path.empty()) {
    m.decision_log = std::fopen(m.d.decision_log_path.c_str(), m.out.resumed ? "a" : "w");
    if (!m.decision_log) return InternalError("cannot write " + m.d.decision_log_path);
  }
  JobOutcome out;
  if (!IsTerminal(m.state)) {
    SPOT_ASSIGN_OR_RETURN(out, m.Loop());
  } else {
    out = m.out;
  }
  SPOT_ASSIGN_OR_RETURN(std::optional<JobRecord> rec, m.d.store->GetJob(m.id));
  if (!rec) return InternalError("job " + m.id + " vanished from " + m.d.store->path());
  out.state = rec->state;
  out.message = rec->message;
  SPOT_ASSIGN_OR_RETURN(out.cost_usd, m.d.store->TotalCost(m.id));
  double end_s = 0;
  SPOT_ASSIGN_OR_RETURN(std::vector<InstanceRecord> all, m.d.store->Instances(m.id, false));
  for (const InstanceRecord& r : all) end_s = std::max(end_s, r.ended_s.value_or(r.billed_until_s));
  out.sim_hours = end_s / 3600;
  out.wall_seconds = m.WallNow() - m.start_wall;
  out.reconcile_us_mean = m.reconcile_passes ? m.reconcile_us_sum / m.reconcile_passes : 0;
  return out;
}

}  // namespace spot::control
