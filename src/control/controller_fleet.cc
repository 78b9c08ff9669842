// The controller's fleet: launching, adopting and terminating instances, and
// replacing the unreachable and the stragglers (controller_impl.h).
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <random>
#include <set>

#include "control/controller_impl.h"

namespace spot::control {
namespace {

using controller_internal::PoolOf;
using fleet::PoolRef;

std::string NewInstanceId() {
  static thread_local std::mt19937_64 rng(std::random_device{}());
  return fmt::format("i-0{:016x}", rng());
}

}  // namespace

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
  // Its worker saves and leaves the rendezvous on the SIGTERM; telling the
  // rendezvous it is gone before that would let a newcomer waiting for room
  // start from the checkpoint the worker is still writing. It is told once
  // the process has ended (the provider's exit), or after the grace.
  gone_after_wall.emplace(r.id, WallNow() + spec.controller.terminate_grace_s + 1);
  return Event(now, "terminate", r.id, why);
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
  std::vector<InstanceRecord*> leaving;
  for (auto& [iid, r] : instances) {
    if (r.ended_s) continue;
    auto it = want.find(PoolOf(r));
    if (it == want.end() || it->second == 0) {
      leaving.push_back(&r);
    } else {
      --it->second;
    }
  }
  // A handover only while the job goes on (an ending job lets all go).
  std::optional<GroupMembers> members;
  if (!leaving.empty() && d.group_members && !want.empty() && first_finish_wall < 0 &&
      spec.controller.handover_timeout_s > 0) {
    members = d.group_members();
  }
  // The model's ready instances, per pool (one whose startup ends with the
  // tick just run, a rounding residue short, is ready from the next).
  std::map<PoolRef, int> ready;
  if (members) {
    for (const fleet::Instance& i : model->instances()) {
      if (i.state == fleet::InstanceState::kRunning || i.state == fleet::InstanceState::kNoticed ||
          (i.state == fleet::InstanceState::kStarting && i.startup_left_hours <= 1e-9)) {
        ++ready[i.pool];
      }
    }
  }
  for (InstanceRecord* r : leaving) {
    if (members) {
      SPOT_ASSIGN_OR_RETURN(bool keep, KeepForHandover(*r, ready, *members, now));
      if (keep) continue;
    }
    SPOT_RETURN_IF_ERROR(TerminateInstance(*r, now, "not in the fleet of " + HeldName()));
  }
  for (auto it = handover_held_since_wall.begin(); it != handover_held_since_wall.end();) {
    auto r = instances.find(it->first);
    it = r == instances.end() || r->second.ended_s ? handover_held_since_wall.erase(it)
                                                   : std::next(it);
  }
  // A program that finished on some node is ending: no replacement for the
  // instances it left (one would change the gang under the ranks finishing).
  if (want.empty() || first_finish_wall >= 0) return Status::Ok();
  if (failures_since_progress > 3 * job.nodes + 3) {
    std::string why = last_failure.empty() ? "" : "; the last one: " + last_failure;
    if (!last_worker_error.empty() && last_worker_error != last_failure) {
      why += "; the last error a worker wrote: " + last_worker_error;
    }
    return UnavailableError(
        fmt::format("{} instance launches or workers failed without training progress{}",
                    failures_since_progress, why));
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

Result<bool> Controller::Impl::KeepForHandover(const InstanceRecord& r,
                                               const std::map<PoolRef, int>& ready,
                                               const GroupMembers& members, double now) {
  auto held = handover_held_since_wall.find(r.id);
  // A kept instance that goes says why and after how long (its "handover").
  auto handed_over = [&](const char* why) -> Result<bool> {
    if (held != handover_held_since_wall.end()) {
      SPOT_RETURN_IF_ERROR(Event(now, "handover", r.id,
                                 fmt::format("{} {:.1f} wall s after the model had the newcomers "
                                             "ready; letting it go",
                                             why, WallNow() - held->second)));
    }
    return false;
  };
  // Only a leaving instance that trains is worth keeping. One kept that the
  // group has re-formed without (the newcomers in its place, their first
  // step not yet reported) has nothing left to hand over.
  if (r.provider_data.empty() || !members.formed.count(r.id)) {
    return handed_over("the group re-formed without it");
  }
  std::vector<std::string> late;
  for (const auto& [pool, n] : ready) {
    int with_group = 0;
    std::vector<std::string> pending;
    for (const auto& [iid, o] : instances) {
      if (o.ended_s || PoolOf(o) != pool) continue;
      if (members.With(iid, progress.generation)) {
        ++with_group;
      } else {
        pending.push_back(iid);
      }
    }
    if (with_group < n) late.insert(late.end(), pending.begin(), pending.end());
  }
  if (late.empty()) return handed_over("the newcomers joined the group");
  if (held == handover_held_since_wall.end()) {
    held = handover_held_since_wall.emplace(r.id, WallNow()).first;
    SPOT_RETURN_IF_ERROR(Event(
        now, "handover-wait", r.id,
        fmt::format("kept until {} join the group (at most {:.0f} wall s): the model has them "
                    "ready, the training does not yet",
                    fmt::join(late, ", "), spec.controller.handover_timeout_s)));
  }
  if (WallNow() - held->second < spec.controller.handover_timeout_s) return true;
  SPOT_RETURN_IF_ERROR(
      Event(now, "handover-timeout", r.id,
            fmt::format("{} did not join the group within {:.0f} wall s; letting it go",
                        fmt::join(late, ", "), spec.controller.handover_timeout_s)));
  return false;
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

void Controller::Impl::NoteWorkerError(const std::string& instance_id) {
  if (!d.last_error) return;
  last_failure = d.last_error(instance_id);
  if (!last_failure.empty()) last_worker_error = last_failure;
}

void Controller::Impl::CountProgramFailure(const std::string& what) {
  ++out.program_failures;
  const int64_t allowed = spec.command.max_restarts_on_errors;
  if (out.program_failures > allowed && program_failed.empty()) {
    program_failed = fmt::format(
        "the program failed: {} (failure {}; job_recovery.max_restarts_on_errors is {}){}", what,
        out.program_failures, allowed,
        last_failure.empty() ? "" : "; its last error: " + last_failure);
  }
}

void Controller::Impl::FinishedEverywhere() {
  if (program_finished || first_finish_wall < 0) return;
  bool running_elsewhere = false;
  for (const auto& [iid, r] : instances) {
    running_elsewhere |= !r.ended_s && !r.provider_data.empty() && !program_finished_on.count(iid);
  }
  if (!running_elsewhere || WallNow() - first_finish_wall >= spec.controller.terminate_grace_s) {
    program_finished = true;
    progress.done = true;
  }
}

// A command workload's program ended on its own (no notice, no termination of
// ours). 0 (or an unknown code after its report of the last step): the
// training finished (a program that never reports says so by ending). A recover_on_exit_codes code:
// the instance is replaced and the program resumes elsewhere, not counted against the restarts.
// Anything else is a failure: replaced while job_recovery.max_restarts_on_errors allows, the job's
// end after that.
Status Controller::Impl::ProgramExited(InstanceRecord& r, int code, const cloud::ProviderEvent& e) {
  // An exit whose code is unknown (a process adopted after a restart) after
  // the program reported its last step is its end too.
  // The job's program has finished when it has on every node: another
  // node's ranks may still be running what comes after the last step (rank
  // 0's evaluation and final output). Those get controller.terminate_grace_s
  // from the first node's exit (the loop's FinishedEverywhere).
  if (code == 0 || (code < 0 && done_reported_wall >= 0)) {
    program_finished_on.insert(r.id);
    if (first_finish_wall < 0) first_finish_wall = WallNow();
    spdlog::info("instance {}: the program finished", r.id);
    SPOT_RETURN_IF_ERROR(Event(e.sim_s, "program-finished", r.id, e.detail));
    FinishedEverywhere();
    return Status::Ok();
  }
  const auto& recover = spec.command.recover_on_exit_codes;
  if (code > 0 && std::find(recover.begin(), recover.end(), code) != recover.end()) {
    ++out.program_recoveries;
    // A recovery that never gets anywhere still ends (as a worker failing
    // without progress does).
    ++failures_since_progress;
    const std::string why = fmt::format("program {} (recover_on_exit_codes)", e.detail);
    spdlog::warn("instance {}: {}; recovering on a new instance", r.id, why);
    SPOT_RETURN_IF_ERROR(Event(e.sim_s, "program-recover", r.id, why));
    return TerminateInstance(r, e.sim_s, why);
  }
  NoteWorkerError(r.id);
  const std::string why = fmt::format("program {} on instance {}", e.detail, r.id);
  SPOT_RETURN_IF_ERROR(Event(e.sim_s, "program-failed", r.id, why));
  CountProgramFailure(why);
  if (program_failed.empty()) spdlog::warn("{}; restarting it on a new instance", why);
  return TerminateInstance(r, e.sim_s, "program " + e.detail);
}

// A command workload whose program has not reported for silence_seconds
// (since the later of its last report and the newest launch) is hung: the
// fleet is replaced, as a failure of the program.
Status Controller::Impl::CheckSilence(double now) {
  const double limit = spec.command.silence_seconds;
  if (limit <= 0 || !spec.command.enabled() || IsTerminal(state)) return Status::Ok();
  double since = d.last_report_unix_s ? d.last_report_unix_s() : 0;
  std::vector<InstanceRecord*> live;
  for (auto& [iid, r] : instances) {
    if (r.ended_s || r.provider_data.empty()) continue;
    live.push_back(&r);
    since = std::max(since, wall_epoch + r.launched_s / compression);
  }
  const double wall = WallNow();
  if (live.empty() || wall - since < limit) return Status::Ok();
  const std::string why = fmt::format("the program sent no report for {:.0f} s", wall - since);
  spdlog::warn("job {}: {}; replacing its instances", id, why);
  SPOT_RETURN_IF_ERROR(Event(now, "program-silent", "", why));
  CountProgramFailure(why);
  for (InstanceRecord* r : live) SPOT_RETURN_IF_ERROR(TerminateInstance(*r, now, "silent"));
  return Status::Ok();
}

}  // namespace spot::control
