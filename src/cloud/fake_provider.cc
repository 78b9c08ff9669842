#include "cloud/fake_provider.h"

#include <fmt/format.h>

#include <cmath>
#include <set>

namespace spot::cloud {
namespace {

constexpr double kEps = 1e-9;

}  // namespace

struct FakeProvider::Impl {
  explicit Impl(FakeProviderOptions opt)
      : o(std::move(opt)),
        model(o.zones, o.types.empty() ? fleet::UniformTypes(o.zones, 3) : o.types, o.job),
        gap_s(o.zones.empty() ? 1 : o.zones[0]->gap_seconds) {}

  int64_t TickOf(double s) const { return static_cast<int64_t>(std::floor(s / gap_s + kEps)); }

  // Runs every whole tick up to now_s: the training's progress on what was
  // held during the tick, then the market's reclaims at the next boundary.
  void Advance(double now_s) {
    const int64_t tick = TickOf(now_s);
    while (ticks_run < tick) {
      if (!done) {
        fleet::TickOutcome r = model.RunTick(o.start_tick + ticks_run, progress);
        progress = r.progress;
        done = r.done;
      }
      ++ticks_run;
      Reclaim();
    }
    Notices(now_s);
  }

  void Reclaim() {
    const double at = static_cast<double>(ticks_run) * gap_s;
    (void)model.Reclaim(o.start_tick + ticks_run);
    for (const fleet::Instance& i : model.instances()) {
      if (i.state != fleet::InstanceState::kPreempted) continue;
      auto it = by_model.find(i.id);
      if (it == by_model.end()) continue;
      InstanceView& v = views[it->second];
      v.state = InstanceState::kPreempted;
      v.process_running = false;
      v.ended_s = at;
      events.push_back({ProviderEvent::Kind::kPreempted, v.spec.id, at, "spot capacity reclaimed"});
      by_model.erase(it);
    }
  }

  // Notices for the reclaims the next boundary will bring, as the fleet
  // stands now.
  void Notices(double now_s) {
    if (o.notice_s <= 0) return;
    const double boundary = static_cast<double>(ticks_run + 1) * gap_s;
    if (boundary - now_s > o.notice_s) return;
    fleet::FleetModel next = model;
    (void)next.Reclaim(o.start_tick + ticks_run + 1);
    for (const fleet::Instance& i : next.instances()) {
      auto it = by_model.find(i.id);
      if (i.state != fleet::InstanceState::kPreempted || it == by_model.end()) continue;
      InstanceView& v = views[it->second];
      if (v.notice_s >= 0) continue;
      v.notice_s = std::max(now_s, boundary - o.notice_s);
      v.reclaim_s = boundary;
      events.push_back({ProviderEvent::Kind::kNotice, v.spec.id, v.notice_s,
                        fmt::format("spot instance-action terminate at {:.0f} s", boundary)});
    }
  }

  FakeProviderOptions o;
  fleet::FleetModel model;
  double gap_s;
  int64_t ticks_run = 0;  // ticks [0, ticks_run) have run
  double progress = 0;
  bool done = false;
  std::map<std::string, InstanceView> views;
  std::map<int64_t, std::string> by_model;  // live instances: model id -> instance id
  std::map<std::string, int64_t> model_id;
  std::vector<ProviderEvent> events;
};

FakeProvider::FakeProvider(FakeProviderOptions options)
    : impl_(std::make_unique<Impl>(std::move(options))) {}
FakeProvider::~FakeProvider() = default;

Result<InstanceView> FakeProvider::Launch(const InstanceSpec& spec, double now_s) {
  ++api_calls_;
  Impl& m = *impl_;
  m.Advance(now_s);
  if (m.views.count(spec.id)) return InvalidArgumentError("instance id " + spec.id + " in use");
  if (m.o.launch_fault) SPOT_RETURN_IF_ERROR(m.o.launch_fault(spec, now_s));
  const int zones = static_cast<int>(m.o.zones.size());
  if (spec.zone >= zones || (spec.spot && spec.zone < 0)) {
    return InvalidArgumentError(fmt::format("no zone {} in the market", spec.zone));
  }
  const fleet::PoolRef pool =
      spec.spot ? fleet::PoolRef::Spot(spec.zone) : fleet::PoolRef::OnDemand(spec.zone);
  const int64_t abs = m.o.start_tick + m.TickOf(now_s);
  if (spec.spot && m.model.Held(pool) >= m.model.Capacity(spec.zone, abs)) {
    return UnavailableError("InsufficientInstanceCapacity: no spot capacity in " + spec.zone_name);
  }
  if (spec.spot && spec.max_price > 0 && m.model.Price(pool, abs) > spec.max_price) {
    return UnavailableError(fmt::format("SpotMaxPriceTooLow: {} is below the spot price {}",
                                        spec.max_price, m.model.Price(pool, abs)));
  }
  const int64_t id = m.model.Add(pool, spec.max_price, abs);
  InstanceView v{.spec = spec, .provider_data = fmt::format("fake-{}", id), .launched_s = now_s};
  m.views[spec.id] = v;
  m.by_model[id] = spec.id;
  m.model_id[spec.id] = id;
  return v;
}

Status FakeProvider::Terminate(const std::string& id, double now_s) {
  ++api_calls_;
  Impl& m = *impl_;
  m.Advance(now_s);
  auto it = m.views.find(id);
  if (it == m.views.end()) return NotFoundError("no instance " + id);
  InstanceView& v = it->second;
  if (v.state != InstanceState::kRunning) return Status::Ok();
  (void)m.model.Remove(m.model_id[id]);
  m.by_model.erase(m.model_id[id]);
  v.state = InstanceState::kTerminated;
  v.process_running = false;
  v.ended_s = now_s;
  return Status::Ok();
}

std::vector<InstanceView> FakeProvider::List() const {
  ++api_calls_;
  std::vector<InstanceView> out;
  for (const auto& [id, v] : impl_->views) out.push_back(v);
  return out;
}

Result<std::vector<ProviderEvent>> FakeProvider::Poll(double now_s) {
  ++api_calls_;
  impl_->Advance(now_s);
  return std::exchange(impl_->events, {});
}

Status FakeProvider::Adopt(const InstanceView& recorded, double now_s) {
  ++api_calls_;
  impl_->Advance(now_s);
  auto it = impl_->views.find(recorded.spec.id);
  if (it == impl_->views.end() || it->second.state != InstanceState::kRunning) {
    return NotFoundError("instance " + recorded.spec.id + " is gone");
  }
  return Status::Ok();
}

ProgressReport FakeProvider::Progress(double now_s) {
  Impl& m = *impl_;
  m.Advance(now_s);
  if (!m.done) {
    // The job may complete inside the tick under way.
    fleet::FleetModel peek = m.model;
    fleet::TickOutcome r = peek.RunTick(m.o.start_tick + m.ticks_run, m.progress);
    if (r.done &&
        static_cast<double>(m.ticks_run) * m.gap_s + r.used_hours * 3600 <= now_s + kEps) {
      m.done = true;
      m.progress = m.o.job.compute_hours;
    }
  }
  int world = 0;
  for (const fleet::Instance& i : m.model.instances()) {
    world += i.state == fleet::InstanceState::kPreempted ? 0 : 1;
  }
  constexpr int64_t kSteps = 1000000;
  const double fraction = m.progress / m.o.job.compute_hours;
  return {.step = static_cast<int64_t>(fraction * kSteps),
          .total_steps = kSteps,
          .world = world,
          .done = m.done,
          .fraction = fraction};
}

}  // namespace spot::cloud
