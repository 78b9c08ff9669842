#include "sim/spot_sim.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <string>

namespace spot::sim {
namespace {

using policy::InstanceKind;

constexpr double kEps = 1e-9;

std::string FormatTicks(double ticks) {
  if (std::isfinite(ticks) && ticks < 1e15) return std::to_string(static_cast<int64_t>(ticks));
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%.3g", ticks);
  return buf;
}

class Runner {
 public:
  Runner(std::span<const market::Trace* const> zones, int64_t start, const JobSpec& job,
         const RunOptions& options, RunResult* out)
      : zones_(zones),
        start_(start),
        job_(job),
        out_(out),
        h_(zones[0]->gap_seconds / 3600.0),
        model_(
            zones,
            options.types.empty() ? fleet::UniformTypes(zones, job.ondemand_price) : options.types,
            policy::ToFleetJob(job)) {}

  // Runs tick t (relative) on the fleet held now.
  void RunTick(int64_t t) {
    fleet::TickOutcome o = model_.RunTick(start_ + t, progress_);
    progress_ = o.progress;
    out_->cost += o.cost;
    out_->spot_hours += o.spot_hours;
    out_->od_hours += o.od_hours;
    out_->migration_cost += o.migration_cost;
    if (o.done) {
      done_ = true;
      out_->finish_hours = t * h_ + o.used_hours;
    }
  }
  // The traces ended first: finish on N on-demand instances right after them.
  void FinishOnDemand(int64_t t) {
    const policy::Observation now =
        policy::ObserveFleet(t, job_, progress_, false, {}, model_.instances(), {});
    double c = now.current.kind == InstanceKind::kOnDemand ? now.changeover_left_hours
                                                           : job_.changeover_hours;
    double used = c + (job_.compute_hours - progress_);
    out_->cost += job_.ondemand_price * job_.nodes * used;
    out_->od_hours += used;
    out_->finish_hours = t * h_ + used;
    done_ = true;
    model_.Clear();
  }

  void Run(policy::Policy& policy, const RunOptions& options);

 private:
  std::span<const market::Trace* const> zones_;
  int64_t start_;
  JobSpec job_;
  RunResult* out_;
  double h_;
  fleet::FleetModel model_;
  double progress_ = 0;
  bool done_ = false;
};

void Runner::Run(policy::Policy& policy, const RunOptions& options) {
  policy::MarketView start_view(zones_, start_, job_.nodes);
  if (policy.needs_future()) policy.Prepare({zones_, start_});
  policy.Start({job_, start_view, start_});
  const int64_t ticks = zones_[0]->ticks();
  int64_t t = 0;
  for (; !done_ && start_ + t < ticks; ++t) {
    int64_t abs = start_ + t;
    const int taken = model_.Reclaim(abs);
    const bool preempted = taken > 0;
    if (preempted) {
      ++out_->preemptions;
      out_->instances_reclaimed += taken;
    }
    std::string held_before;
    if (options.record_timeline) {
      held_before = policy::FleetName(policy::FleetOf(model_.instances(), job_.nodes), job_.nodes);
    }
    const policy::Decision decision = policy.Decide(policy::ObserveFleet(
        t, job_, progress_, preempted, policy::MarketView(zones_, abs, job_.nodes),
        model_.instances(), model_.types()));
    if (model_.Apply(decision.fleet, abs) > 0) ++out_->changeovers;
    RunTick(t);
    if (options.record_timeline) {
      const auto held = policy::FleetOf(model_.instances(), job_.nodes);
      out_->timeline.push_back({policy::GangOf(model_.instances(), job_.nodes),
                                std::move(held_before), policy::FleetName(held, job_.nodes),
                                preempted, progress_, out_->cost});
    }
  }
  if (!done_) FinishOnDemand(t);
  out_->migrations = model_.migrations();
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
  if (job.min_nodes < 0 || job.min_nodes > job.nodes) {
    return InvalidArgumentError("min nodes must be in [0, nodes]");
  }
  if (!(job.ondemand_price > 0)) return InvalidArgumentError("on-demand price must be > 0");
  std::vector<std::string> regions;
  for (const market::Trace* t : zones) regions.push_back(fleet::RegionOf(t->pool));
  auto moves = fleet::MigrationMatrix(regions, job.checkpoint_gb, job.egress);
  if (!moves.ok()) return moves.status();
  return Status::Ok();
}

RunResult SimulateJob(policy::Policy& policy, std::span<const market::Trace* const> zones,
                      int64_t start_tick, const JobSpec& job, const RunOptions& options) {
  RunResult out;
  Runner(zones, start_tick, job, options, &out).Run(policy, options);
  return out;
}

JobSpec WithRecordedOnDemandPrice(JobSpec job, std::span<const market::Trace* const> zones) {
  if (zones.empty() || !(zones[0]->ondemand_price > 0)) return job;
  for (const market::Trace* z : zones) {
    if (z->ondemand_price != zones[0]->ondemand_price) return job;
  }
  job.ondemand_price = zones[0]->ondemand_price;
  return job;
}

Result<std::vector<int64_t>> SampleStarts(int64_t ticks, double gap_seconds, double deadline_hours,
                                          int samples) {
  if (samples < 1) return InvalidArgumentError("samples must be >= 1");
  if (!(gap_seconds > 0)) return InvalidArgumentError("gap_seconds must be > 0");
  // Compared as a double before it becomes an integer: a tiny gap or a huge
  // deadline would overflow int64 (and start a run at a tick far before 0).
  const double span_ticks = std::ceil(deadline_hours * 3600 / gap_seconds - kEps);
  if (!(span_ticks <= static_cast<double>(ticks))) {
    return InvalidArgumentError("the traces (" + std::to_string(ticks) +
                                " ticks) are shorter than the deadline (" +
                                FormatTicks(span_ticks) + " ticks)");
  }
  const int64_t span = std::max<int64_t>(0, static_cast<int64_t>(span_ticks));
  std::vector<int64_t> starts(samples);
  for (int i = 0; i < samples; ++i) starts[i] = i * (ticks - span) / samples;
  return starts;
}

}  // namespace spot::sim
