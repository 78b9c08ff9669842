#include "sim/spot_sim.h"

#include <algorithm>
#include <cmath>
#include <string>

namespace spot::sim {
namespace {

using policy::InstanceKind;

constexpr double kEps = 1e-9;

// The running state of one job.
struct JobState {
  Placement at;
  double changeover_left = 0;
  double progress = 0;
  bool done = false;
};

class Runner {
 public:
  Runner(std::span<const market::Trace* const> zones, int64_t start, const JobSpec& job,
         RunResult* out)
      : zones_(zones), start_(start), job_(job), out_(out),
        h_(zones[0]->gap_seconds / 3600.0) {}

  bool Up(int z, int64_t abs) const { return zones_[z]->available[abs] >= job_.nodes; }
  double Price(const Placement& p, int64_t abs) const {
    if (p.kind == InstanceKind::kOnDemand) return job_.ondemand_price * job_.nodes;
    const market::Trace* t = zones_[p.zone];
    return (t->has_prices() ? t->price[abs] : 1.0) * job_.nodes;
  }
  Placement Sanitize(Placement p, int64_t abs) const {
    if (p.kind == InstanceKind::kOnDemand) return Placement::OnDemand();
    if (p.kind == InstanceKind::kSpot && p.zone >= 0 && p.zone < static_cast<int>(zones_.size()) &&
        Up(p.zone, abs)) {
      return p;
    }
    return Placement::Idle();
  }
  // Switches to `target`, paying a changeover when entering an instance.
  void MoveTo(Placement target) {
    if (target == s_.at) return;
    s_.at = target;
    s_.changeover_left = 0;
    if (target.kind != InstanceKind::kIdle) {
      s_.changeover_left = job_.changeover_hours;
      ++out_->changeovers;
    }
  }
  // Runs tick t (relative) on the current placement.
  void RunTick(int64_t t) {
    if (s_.at.kind == InstanceKind::kIdle) return;
    double c = std::min(s_.changeover_left, h_);
    s_.changeover_left -= c;
    double w = h_ - c;
    double used = h_;
    if (s_.progress + w >= job_.compute_hours - kEps) {
      used = c + std::max(0.0, job_.compute_hours - s_.progress);
      s_.progress = job_.compute_hours;
      s_.done = true;
      out_->finish_hours = t * h_ + used;
    } else {
      s_.progress += w;
    }
    Bill(s_.at, used, start_ + t);
  }
  void Bill(const Placement& p, double hours, int64_t abs) {
    out_->cost += Price(p, abs) * hours;
    (p.kind == InstanceKind::kSpot ? out_->spot_hours : out_->od_hours) += hours;
  }
  // The traces ended first: finish on on-demand right after them.
  void FinishOnDemand(int64_t t) {
    double c = s_.at.kind == InstanceKind::kOnDemand ? s_.changeover_left : job_.changeover_hours;
    double used = c + (job_.compute_hours - s_.progress);
    out_->cost += job_.ondemand_price * job_.nodes * used;
    out_->od_hours += used;
    out_->finish_hours = t * h_ + used;
    s_.done = true;
  }

  void Run(policy::Policy& policy, const RunOptions& options);

 private:
  std::span<const market::Trace* const> zones_;
  int64_t start_;
  JobSpec job_;
  RunResult* out_;
  double h_;
  JobState s_;
};

void Runner::Run(policy::Policy& policy, const RunOptions& options) {
  policy::MarketView start_view(zones_, start_, job_.nodes);
  if (policy.needs_future()) policy.Prepare({zones_, start_});
  policy.Start({job_, start_view, start_});
  const int64_t ticks = zones_[0]->ticks();
  int64_t t = 0;
  for (; !s_.done && start_ + t < ticks; ++t) {
    int64_t abs = start_ + t;
    bool preempted = s_.at.kind == InstanceKind::kSpot && !Up(s_.at.zone, abs);
    if (preempted) {
      s_.at = Placement::Idle();
      s_.changeover_left = 0;
      ++out_->preemptions;
    }
    policy::Observation obs{.tick = t,
                            .time_hours = t * h_,
                            .job = job_,
                            .progress_hours = s_.progress,
                            .current = s_.at,
                            .changeover_left_hours = s_.changeover_left,
                            .preempted_now = preempted,
                            .market = policy::MarketView(zones_, abs, job_.nodes)};
    MoveTo(Sanitize(policy.Decide(obs).target, abs));
    RunTick(t);
    if (options.record_timeline) {
      out_->timeline.push_back({s_.at, preempted, s_.progress, out_->cost});
    }
  }
  if (!s_.done) FinishOnDemand(t);
  out_->met_deadline = out_->finish_hours <= job_.deadline_hours + kEps;
}

}  // namespace

Status ValidateMarket(std::span<const market::Trace* const> zones, const JobSpec& job) {
  if (zones.empty()) return InvalidArgumentError("no traces given");
  const market::Trace& first = *zones[0];
  for (const market::Trace* t : zones) {
    std::string name = t->name.empty() ? t->source : t->name;
    if (!(t->gap_seconds > 0)) return InvalidArgumentError(name + ": gap_seconds must be > 0");
    if (t->ticks() == 0) return InvalidArgumentError(name + ": no ticks");
    if (t->gap_seconds != first.gap_seconds || t->ticks() != first.ticks()) {
      return InvalidArgumentError(name + ": zones of one run must share the tick grid (gap " +
                                  std::to_string(t->gap_seconds) + " s, " +
                                  std::to_string(t->ticks()) + " ticks) with " + first.name);
    }
    if (t->has_prices() && t->price.size() != t->available.size()) {
      return InvalidArgumentError(name + ": price series length differs from availability");
    }
  }
  if (!(job.compute_hours > 0)) return InvalidArgumentError("compute hours must be > 0");
  if (!(job.deadline_hours > 0)) return InvalidArgumentError("deadline hours must be > 0");
  if (!(job.changeover_hours >= 0)) return InvalidArgumentError("changeover hours must be >= 0");
  if (job.nodes < 1) return InvalidArgumentError("nodes must be >= 1");
  if (!(job.ondemand_price > 0)) return InvalidArgumentError("on-demand price must be > 0");
  return Status::Ok();
}

RunResult SimulateJob(policy::Policy& policy, std::span<const market::Trace* const> zones,
                      int64_t start_tick, const JobSpec& job, const RunOptions& options) {
  RunResult out;
  Runner(zones, start_tick, job, &out).Run(policy, options);
  return out;
}

Result<std::vector<int64_t>> SampleStarts(int64_t ticks, double gap_seconds,
                                          double deadline_hours, int samples) {
  if (samples < 1) return InvalidArgumentError("samples must be >= 1");
  int64_t span = static_cast<int64_t>(std::ceil(deadline_hours * 3600 / gap_seconds - kEps));
  if (ticks < span) {
    return InvalidArgumentError("the traces (" + std::to_string(ticks) +
                                " ticks) are shorter than the deadline (" +
                                std::to_string(span) + " ticks)");
  }
  std::vector<int64_t> starts(samples);
  for (int i = 0; i < samples; ++i) starts[i] = i * (ticks - span) / samples;
  return starts;
}

}  // namespace spot::sim
