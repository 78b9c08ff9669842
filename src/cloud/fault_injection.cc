#include "cloud/fault_injection.h"

#include <fmt/format.h>

#include <algorithm>
#include <utility>

namespace spot::cloud {

const char* ProviderCallName(ProviderCall c) {
  switch (c) {
    case ProviderCall::kLaunch:
      return "launch";
    case ProviderCall::kTerminate:
      return "terminate";
    case ProviderCall::kPoll:
      return "poll";
    case ProviderCall::kList:
      return "list";
    case ProviderCall::kAdopt:
      return "adopt";
  }
  return "?";
}

FaultyProvider::FaultyProvider(FaultyProviderOptions options) : o_(std::move(options)) {}

const CallFault* FaultyProvider::Active(ProviderCall call, double now_s) const {
  for (const CallFault& f : o_.faults) {
    if (f.call == call && Stretch{f.from_s, f.for_s}.Contains(now_s)) return &f;
  }
  return nullptr;
}

Status FaultyProvider::Apply(const CallFault* f) const {
  if (!f) return Status::Ok();
  if (f->delay_s > 0) {
    ++counts_.slow_calls;
    o_.clock->SleepFor(f->delay_s);
  }
  if (!f->error.ok()) ++counts_.failed_calls;
  return f->error;
}

Result<InstanceView> FaultyProvider::Launch(const InstanceSpec& spec, double now_s) {
  last_now_s_ = std::max(last_now_s_, now_s);
  SPOT_RETURN_IF_ERROR(Apply(Active(ProviderCall::kLaunch, now_s)));
  return o_.inner->Launch(spec, now_s);
}

Status FaultyProvider::Terminate(const std::string& id, double now_s) {
  last_now_s_ = std::max(last_now_s_, now_s);
  SPOT_RETURN_IF_ERROR(Apply(Active(ProviderCall::kTerminate, now_s)));
  SPOT_RETURN_IF_ERROR(o_.inner->Terminate(id, now_s));
  const bool raced = std::any_of(o_.notice_on_terminate.begin(), o_.notice_on_terminate.end(),
                                 [&](const Stretch& s) { return s.Contains(now_s); });
  if (raced && !notice_overlay_.count(id)) {
    ++counts_.raced_notices;
    notice_overlay_[id] = now_s;
    pending_.push_back({ProviderEvent::Kind::kNotice, id, now_s,
                        fmt::format("spot instance-action terminate at {:.0f} s", now_s)});
  }
  return Status::Ok();
}

void FaultyProvider::Overlay(InstanceView& v) const {
  if (auto it = notice_overlay_.find(v.spec.id); it != notice_overlay_.end() && v.notice_s < 0) {
    v.notice_s = it->second;
  }
  if (auto it = departed_.find(v.spec.id); it != departed_.end() && it->second <= last_now_s_) {
    v.process_running = false;
    v.exit_code = v.state == InstanceState::kRunning ? 0 : v.exit_code;
  }
}

std::vector<InstanceView> FaultyProvider::List() const {
  const CallFault* f = Active(ProviderCall::kList, last_now_s_);
  if (!Apply(f).ok()) {
    ++counts_.stale_answers;
    return last_list_;
  }
  std::vector<InstanceView> views = o_.inner->List();
  for (InstanceView& v : views) Overlay(v);
  last_list_ = views;
  return views;
}

// Notices from the cloud whose workers leave on them: an exit `depart_after_s`
// later, delivered by the Poll that reaches that time while the instance runs.
std::vector<ProviderEvent> FaultyProvider::WithDepartures(std::vector<ProviderEvent> events,
                                                          double now_s) {
  for (const ProviderEvent& e : events) {
    if (e.kind != ProviderEvent::Kind::kNotice || departed_.count(e.instance_id)) continue;
    const bool departs = std::any_of(o_.depart_on_notice.begin(), o_.depart_on_notice.end(),
                                     [&](const Stretch& s) { return s.Contains(e.sim_s); });
    if (!departs) continue;
    const double at = e.sim_s + o_.depart_after_s;
    departed_[e.instance_id] = at;
    pending_.push_back({ProviderEvent::Kind::kExited, e.instance_id, at,
                        "exited with code 0 (left on its notice)"});
  }
  std::vector<ProviderEvent> due;
  std::vector<ProviderEvent> later;
  std::map<std::string, InstanceState> state;
  for (const InstanceView& v : o_.inner->List()) state[v.spec.id] = v.state;
  for (ProviderEvent& e : pending_) {
    if (e.sim_s > now_s) {
      later.push_back(std::move(e));
    } else if (e.kind != ProviderEvent::Kind::kExited ||
               state[e.instance_id] == InstanceState::kRunning) {
      counts_.departures += e.kind == ProviderEvent::Kind::kExited ? 1 : 0;
      due.push_back(std::move(e));
    }
  }
  pending_ = std::move(later);
  const auto notices = std::count_if(events.begin(), events.end(), [](const ProviderEvent& e) {
    return e.kind == ProviderEvent::Kind::kNotice;
  });
  counts_.most_notices_in_a_poll =
      std::max(counts_.most_notices_in_a_poll, static_cast<int>(notices));
  if (o_.exit_before_notice) {
    events.insert(events.begin(), due.begin(), due.end());
  } else {
    events.insert(events.end(), due.begin(), due.end());
  }
  return events;
}

Result<std::vector<ProviderEvent>> FaultyProvider::Poll(double now_s) {
  last_now_s_ = std::max(last_now_s_, now_s);
  if (Status st = Apply(Active(ProviderCall::kPoll, now_s)); !st.ok()) {
    ++counts_.stale_answers;
    return st;  // the events wait in the cloud for the next good Poll
  }
  SPOT_ASSIGN_OR_RETURN(std::vector<ProviderEvent> events, o_.inner->Poll(now_s));
  return WithDepartures(std::move(events), now_s);
}

Status FaultyProvider::Adopt(const InstanceView& recorded, double now_s) {
  last_now_s_ = std::max(last_now_s_, now_s);
  SPOT_RETURN_IF_ERROR(Apply(Active(ProviderCall::kAdopt, now_s)));
  return o_.inner->Adopt(recorded, now_s);
}

void ScriptedClock::StepWallAt(double at_s, double step_s) {
  std::lock_guard<std::mutex> l(mu_);
  steps_.emplace_back(at_s, step_s);
}

void ScriptedClock::At(double at_s, std::function<void()> action) {
  std::lock_guard<std::mutex> l(mu_);
  actions_.emplace(at_s, std::move(action));
}

double ScriptedClock::NowUnixS() const {
  const double elapsed = ElapsedS();
  double offset = 0;
  std::lock_guard<std::mutex> l(mu_);
  for (const auto& [at, step] : steps_) offset += at <= elapsed ? step : 0;
  return inner_->NowUnixS() + offset;
}

void ScriptedClock::SleepFor(double seconds) {
  inner_->SleepFor(seconds);
  std::vector<std::function<void()>> due;
  {
    std::lock_guard<std::mutex> l(mu_);
    const double elapsed = ElapsedS();
    while (!actions_.empty() && actions_.begin()->first <= elapsed) {
      due.push_back(std::move(actions_.begin()->second));
      actions_.erase(actions_.begin());
    }
  }
  for (auto& action : due) action();
}

}  // namespace spot::cloud
