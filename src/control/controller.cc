#include "control/controller.h"

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <map>
#include <nlohmann/json.hpp>
#include <set>

#include "control/controller_impl.h"
#include "core/file_io.h"

namespace spot::control {
namespace {

using policy::InstanceKind;
using policy::Placement;

using controller_internal::kEps;
using controller_internal::PoolOf;

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
    // The market as it was at that tick: a live feed (a cloud's prices) knows
    // only what it was asked for, and an unknown tick has no capacity.
    if (Status st = d.feed->Advance(r.abs_tick); !st.ok()) {
      spdlog::warn("job {}: market feed at replayed tick {}: {}", id, r.abs_tick, st.message());
    }
    ticks = d.feed->known_ticks();
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
    // A command workload's program: what it did under the earlier controller.
    if (e.kind == "program-failed" || e.kind == "program-silent") ++out.program_failures;
    if (e.kind == "program-recover") ++out.program_recoveries;
    if (e.kind == "program-finished") program_finished = true;
    if (e.kind == "killed-at-reclaim") ++out.killed_at_reclaim;
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

void Controller::Impl::ProviderOutage(const Status& error) {
  const double mono = d.clock->MonotonicS();
  const double limit = spec.controller.provider_outage_s;
  if (provider_down_since < 0) {
    provider_down_since = mono;
    spdlog::warn("job {}: the provider cannot see the fleet: {}; waiting up to {:.0f} s", id,
                 error.message(), limit);
  }
  const double down = mono - provider_down_since;
  if (down < limit || !provider_failed.empty()) return;
  provider_failed = fmt::format(
      "the provider could not see the fleet for {:.0f} s (controller.provider_outage_s {:.0f}): {}",
      down, limit, error.message());
}

void Controller::Impl::InstanceGone(const std::string& instance_id) {
  gone_after_wall.erase(instance_id);
  if (d.on_instance_gone) d.on_instance_gone(instance_id);
}

void Controller::Impl::TellGoneAfterGrace() {
  const double wall = WallNow();
  for (auto it = gone_after_wall.begin(); it != gone_after_wall.end();) {
    if (wall < it->second) {
      ++it;
      continue;
    }
    const std::string iid = it->first;
    it = gone_after_wall.erase(it);
    if (d.on_instance_gone) d.on_instance_gone(iid);
  }
}

Status Controller::Impl::PollProvider(double now) {
  Result<std::vector<cloud::ProviderEvent>> polled = d.provider->Poll(now);
  if (!polled.ok()) {
    ProviderOutage(polled.status());
    return Status::Ok();
  }
  if (provider_down_since >= 0) {
    const std::string what = fmt::format("the provider saw the fleet again after {:.0f} s",
                                         d.clock->MonotonicS() - provider_down_since);
    spdlog::info("job {}: {}", id, what);
    provider_down_since = -1;
    SPOT_RETURN_IF_ERROR(Event(now, "provider-outage", "", what));
  }
  for (const cloud::ProviderEvent& e : *polled) {
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
        for (const cloud::InstanceView& v : d.provider->List()) {
          if (v.spec.id != r.id || !v.process_running) continue;
          // Its program had not stopped by the reclaim (a notice ignored, a
          // save too slow): the machine took it down.
          ++out.killed_at_reclaim;
          SPOT_RETURN_IF_ERROR(Event(at, "killed-at-reclaim", r.id,
                                     "the worker still ran when the instance was reclaimed"));
        }
        SPOT_RETURN_IF_ERROR(Durably([&] { return d.store->EndInstance(r.id, at, "preempted"); }));
        r.ended_s = at;
        r.end_reason = "preempted";
        InstanceGone(r.id);
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
        InstanceGone(r.id);
        if (r.ended_s || notice >= 0) break;
        if (!spec.command.enabled() && code == 0 && progress.done) break;
        if (spec.command.enabled()) {
          SPOT_RETURN_IF_ERROR(ProgramExited(r, code, e));
          break;
        }
        // Neither a notice nor the end of training: the worker failed. Give
        // the instance back; the next pass launches a replacement.
        ++failures_since_progress;
        NoteWorkerError(r.id);
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

Controller::Impl::Running Controller::Impl::RunningCost(double now) {
  Running run;
  const auto tick = static_cast<int64_t>(std::floor(now / gap_s + kEps));
  for (const auto& [iid, r] : instances) {
    if (r.ended_s) continue;
    const double price = model->Price(PoolOf(r), start_tick + tick);
    run.usd_per_hour += price;
    run.unbilled_usd += std::max(0.0, now - r.billed_until_s) / 3600.0 * price;
  }
  return run;
}

bool Controller::Impl::BudgetRunsOut(double now, std::string* why) {
  if (last_pass_s >= 0) pass_gap_s = std::max(now - last_pass_s, 0.9 * pass_gap_s);
  last_pass_s = now;
  if (spec.budget_usd <= 0) return false;
  const Running run = RunningCost(now);
  const double spent = billed_usd + run.unbilled_usd;
  const double ahead = run.usd_per_hour * 2 * pass_gap_s / 3600.0;
  if (spent + ahead < spec.budget_usd) return false;
  *why = spent >= spec.budget_usd
             ? fmt::format("budget of ${:.2f} reached (${:.2f} spent) before the job finished",
                           spec.budget_usd, spent)
             : fmt::format(
                   "budget of ${:.2f} would be spent before the next check (${:.2f} spent, "
                   "${:.2f}/h running); stopped before the job finished",
                   spec.budget_usd, spent, run.usd_per_hour);
  return true;
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
    FinishedEverywhere();
    if (program_finished) progress.done = true;
    // A command workload that reported its last step still runs what comes
    // after (a final save, its last output): the job ends when the program
    // exits, or controller.terminate_grace_s after the report (an exit is
    // not seen on every provider), not at the report.
    if (spec.command.enabled() && progress.done && !program_finished) {
      if (done_reported_wall < 0) done_reported_wall = WallNow();
      if (WallNow() - done_reported_wall < spec.controller.terminate_grace_s) progress.done = false;
    }
    SPOT_RETURN_IF_ERROR(PollProvider(now));
    TellGoneAfterGrace();
    if (!program_failed.empty() || !provider_failed.empty()) {
      SPOT_RETURN_IF_ERROR(Finish(JobState::kFailed,
                                  program_failed.empty() ? provider_failed : program_failed, now));
      break;
    }
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
    SPOT_RETURN_IF_ERROR(CheckSilence(now));
    if (Status st = EnsureFleet(now); !st.ok()) {
      SPOT_RETURN_IF_ERROR(Finish(JobState::kFailed, std::string(st.message()), now));
      break;
    }
    SPOT_RETURN_IF_ERROR(Bill(now));
    if (std::string why; BudgetRunsOut(now, &why)) {
      SPOT_RETURN_IF_ERROR(Finish(JobState::kFailed, why, now));
      break;
    }
    if ((state == JobState::kProvisioning || state == JobState::kRecovering) && HoldsAny() &&
        progress.step > step_at_placement &&
        (progress.world > 0 || spec.command.enabled())) {  // a program's reports name no world
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
  for (const InstanceRecord& r : all) {
    end_s = std::max(end_s, r.ended_s.value_or(r.billed_until_s));
    out.instances_reclaimed += r.end_reason == "preempted";
  }
  out.sim_hours = end_s / 3600;
  out.wall_seconds = m.WallNow() - m.start_wall;
  out.reconcile_us_mean = m.reconcile_passes ? m.reconcile_us_sum / m.reconcile_passes : 0;
  return out;
}

}  // namespace spot::control
