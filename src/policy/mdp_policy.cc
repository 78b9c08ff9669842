#include "policy/mdp_policy.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "policy/availability_chain.h"
#include "policy/mdp_solver.h"
#include "policy/uniform_progress.h"
#include "policy/zone_choice.h"

namespace spot::policy {
namespace {

// Zone z can run the gang on spot at tick t below on-demand price k.
bool Usable(const MarketView& m, int z, int64_t t, double k) {
  auto avail = m.AvailabilityHistory(z);
  auto price = m.PriceHistory(z);
  return avail[t] >= m.nodes() && (price.empty() ? 1.0 : price[t]) < k;
}

class MdpPolicy final : public Policy {
 public:
  explicit MdpPolicy(MdpOptions o) : opt_(o), up_(MakeUniformProgressPolicy()) {}
  std::string_view name() const override { return "mdp"; }

  void Start(const JobStart& s) override {
    net_.Reset();
    up_->Start(s);
    job_ = s.job;
    double gap = s.market.gap_hours();
    step_ticks_ = std::max<int64_t>(1, std::llround(opt_.step_hours / gap));
    // At most ~600 steps per job keeps a solution a few MB.
    int64_t job_ticks = static_cast<int64_t>(std::ceil(s.job.deadline_hours / gap));
    step_ticks_ = std::max<int64_t>(step_ticks_, (job_ticks + 599) / 600);
    refit_ticks_ = std::max<int64_t>(1, std::llround(opt_.refit_hours / gap));
    fitted_cut_ = -1;
    solution_.reset();
    last_now_ = -1;
    age_ = 0;
  }

  Decision Decide(const Observation& obs) override {
    (void)up_->Decide(obs);  // keeps UP's state (its latched net) current
    if (net_.Engaged(obs)) return obs.Gang(Placement::OnDemand());
    Refit(obs.market);
    bool up = UpdateAge(obs.market);
    if (solution_) {
      return PlanBeforeBreak(obs, [&](const Observation& o) { return Plan(o, up); });
    }
    // A young market: UP's placement, but on-demand is left for spot only
    // (as the plan does), and make before break.
    return PlanBeforeBreak(obs, [&](const Observation& o) {
      const Decision d = up_->Decide(o);
      Placement p = Capped(o, AsGang(d.fleet, o.job.nodes).value_or(Placement::Idle()));
      if (p.kind == InstanceKind::kIdle && o.current.kind == InstanceKind::kOnDemand) {
        return Placement::OnDemand();
      }
      return p;
    });
  }

 private:
  // Plan(), with spot entered from a ready on-demand make before break:
  // on-demand is kept while the spot gang starts and let go at the start of
  // the tick in which that gang becomes ready (never both ready at once: the job
  // never makes more than one gang's progress). A spot run that ends
  // inside its changeover then costs only its own ticks, not on-demand's
  // changeover again and the progress of both.
  template <typename Planner>
  Decision PlanBeforeBreak(const Observation& obs, const Planner& plan) const {
    const int n = obs.job.nodes;
    int od = 0, spot = 0, spot_zone = -1;
    double od_left = 0, spot_left = 0;
    for (const fleet::Instance& i : obs.fleet) {  // empty where the driver keeps no fleet
      if (i.state == fleet::InstanceState::kPreempted) continue;
      double& left = i.pool.spot() ? spot_left : od_left;
      left = std::max(left, i.startup_left_hours);
      if (i.pool.spot()) {
        ++spot;
        spot_zone = i.pool.zone;
      } else {
        ++od;
      }
    }
    if (od < n) return obs.Gang(plan(obs));  // not on on-demand: nothing to keep
    Placement p;
    if (spot < n) {
      p = plan(obs);
      // Spot starts beside on-demand only once on-demand is ready, and only
      // when spot's changeover spans more than a tick (within one, the two
      // would be ready together); otherwise spot is taken as a switch. The
      // omniscient bound with overlap entries covers every schedule this
      // makes. Keeping on-demand until ready and then starting spot beside
      // it cost more (aws-v100-2023-04 time-split 0.8598 of up against
      // 0.8521).
      const bool one_tick = obs.job.changeover_hours <= obs.market.gap_hours() + 1e-9;
      if (p.kind == InstanceKind::kSpot && (od_left > 0 || one_tick)) return obs.Gang(p);
    } else {  // a spot gang starting beside on-demand
      Observation view = obs;
      if (spot_left <= obs.market.gap_hours() + 1e-9) {
        // Ready within this tick: spot is what the job holds, on-demand goes.
        view.current = Placement::Spot(spot_zone);
        view.changeover_left_hours = spot_left;
        return obs.Gang(plan(view));
      }
      // Without history UP's rule plans: it leaves on-demand once ahead of
      // its line by 2d, and on spot it stays while spot is usable. A start
      // under way is kept likewise: asked again from on-demand, a progress
      // stall of a tick (an evaluation, a re-form in a real training) put
      // the job behind that line and dropped the start, to begin it anew
      // ticks later.
      if (!solution_ && Usable(obs.market, spot_zone, obs.market.now(), job_.ondemand_price)) {
        return OnDemandWhileSpotStarts(spot_zone, n);
      }
      view.current = Placement::OnDemand();
      view.changeover_left_hours = od_left;
      p = plan(view);
      if (p.kind == InstanceKind::kSpot &&
          Usable(obs.market, spot_zone, obs.market.now(), job_.ondemand_price)) {
        p.zone = spot_zone;  // the gang already starting
      }
    }
    if (p.kind != InstanceKind::kSpot) return obs.Gang(p);
    return OnDemandWhileSpotStarts(p.zone, n);
  }

  // UP's placement with spot priced at or above on-demand left out: another
  // usable zone, else what UP does without spot (on-demand when behind).
  Placement Capped(const Observation& obs, Placement p) const {
    if (p.kind != InstanceKind::kSpot ||
        Usable(obs.market, p.zone, obs.market.now(), job_.ondemand_price)) {
      return p;
    }
    int z = SpotZone(obs);
    if (z >= 0) return Placement::Spot(z);
    bool behind = obs.progress_hours < ExpectedProgress(obs.job, obs.time_hours);
    return behind ? Placement::OnDemand() : Placement::Idle();
  }

  Placement Plan(const Observation& obs, bool up) const {
    int state = ChainState(up, age_, static_cast<double>(step_ticks_));
    InstanceKind held = obs.current.kind;
    if (held == InstanceKind::kSpot &&
        !Usable(obs.market, obs.current.zone, obs.market.now(), job_.ondemand_price)) {
      held = InstanceKind::kIdle;  // leaving it: entering anew costs a changeover
    }
    double deficit = obs.time_hours - obs.progress_hours + obs.changeover_left_hours;
    switch (solution_->Act(obs.time_hours, deficit, held, state)) {
      case MdpAction::kSpot:
        return Placement::Spot(SpotZone(obs));
      case MdpAction::kOnDemand:
        return Placement::OnDemand();
      case MdpAction::kIdle:
        break;
    }
    // On-demand is left for spot only: leaving it to wait pays its
    // changeover again if spot does not come (the model's gamble; UP's
    // hysteresis, in its simplest form).
    return held == InstanceKind::kOnDemand ? Placement::OnDemand() : Placement::Idle();
  }

  bool AnyUsable(const MarketView& m, int64_t t) const {
    for (int z = 0; z < m.num_zones(); ++z) {
      if (Usable(m, z, t, job_.ondemand_price)) return true;
    }
    return false;
  }

  // The current spot zone while usable, else the cheapest usable one.
  int SpotZone(const Observation& obs) const {
    const MarketView& m = obs.market;
    if (obs.current.kind == InstanceKind::kSpot &&
        Usable(m, obs.current.zone, m.now(), job_.ondemand_price)) {
      return obs.current.zone;
    }
    int best = -1;
    for (int z = 0; z < m.num_zones(); ++z) {
      if (!Usable(m, z, m.now(), job_.ondemand_price)) continue;
      if (best < 0 || m.PriceNow(z) < m.PriceNow(best)) best = z;
    }
    return best;
  }

  // Whether the market is usable now, and the age (ticks) of its current run.
  bool UpdateAge(const MarketView& m) {
    int64_t now = m.now();
    bool up = AnyUsable(m, now);
    if (now == last_now_ + 1 && last_now_ >= 0) {
      age_ = up == last_up_ ? age_ + 1 : 1;
    } else {  // first call: scan back, no further than the chain's last bucket
      int64_t cap = (kAgeEdges.back() + 1) * step_ticks_ + 1;
      age_ = 1;
      while (age_ < cap && now - age_ >= 0 && AnyUsable(m, now - age_) == up) ++age_;
    }
    last_now_ = now;
    last_up_ = up;
    return up;
  }

  // Fits the chain on the history before the last multiple of refit_ticks_,
  // when that cut moved, and takes the solution for it.
  void Refit(const MarketView& m) {
    // In the first refit period, an eighth of it: young markets learn sooner.
    int64_t every = m.now() >= refit_ticks_ ? refit_ticks_ : std::max<int64_t>(1, refit_ticks_ / 8);
    int64_t cut = (m.now() / every) * every;
    if (cut == fitted_cut_) return;
    fitted_cut_ = cut;
    double gap = m.gap_hours();
    if (static_cast<double>(cut) * gap < opt_.min_history_hours) return;
    int64_t window = static_cast<int64_t>(opt_.history_window_hours / gap);
    int64_t first = std::max<int64_t>(0, cut - window);
    std::vector<uint8_t> up(static_cast<size_t>(cut - first));
    std::vector<double> price(up.size(), 1.0);
    for (int64_t t = first; t < cut; ++t) {
      double best = job_.ondemand_price;
      for (int z = 0; z < m.num_zones(); ++z) {
        if (!Usable(m, z, t, job_.ondemand_price)) continue;
        auto p = m.PriceHistory(z);
        best = std::min(best, p.empty() ? 1.0 : p[t]);
        up[t - first] = 1;
      }
      if (up[t - first]) price[t - first] = best;
    }
    ChainFitOptions fit{.step_ticks = static_cast<double>(step_ticks_),
                        .prior_steps = opt_.prior_steps,
                        .half_life_ticks = HalfLifeTicks(opt_, gap)};
    AvailabilityChain chain = FitAvailabilityChain(up, price, fit);
    for (int s = 0; s < kAgeBuckets; ++s) {
      chain.survive[s] = std::pow(chain.survive[s], opt_.spot_hazard_scale);
    }
    MdpGrid grid{.step_hours = static_cast<double>(step_ticks_) * gap,
                 .cells_per_step = static_cast<int>(opt_.cells_per_step)};
    solution_ = SolveMdp(chain, job_, grid);
  }

  MdpOptions opt_;
  std::unique_ptr<Policy> up_;
  LatchedSafetyNet net_;
  JobSpec job_;
  int64_t step_ticks_ = 1, refit_ticks_ = 1, fitted_cut_ = -1;
  std::shared_ptr<const MdpSolution> solution_;
  int64_t last_now_ = -1, age_ = 0;
  bool last_up_ = false;
};

}  // namespace

Decision OnDemandWhileSpotStarts(int zone, int nodes) {
  return {.fleet = {{.pool = fleet::PoolRef::Spot(zone), .count = nodes, .min_count = nodes},
                    {.pool = fleet::PoolRef::OnDemand(), .count = nodes, .min_count = nodes}}};
}

std::optional<int> SpotStartingZone(const Decision& d, int nodes) {
  if (d.fleet.size() != 2) return std::nullopt;
  const fleet::PoolTarget &a = d.fleet[0], &b = d.fleet[1];
  if (!a.pool.spot() || a.count != nodes || b.pool.spot() || b.pool.zone != -1 ||
      b.count != nodes) {
    return std::nullopt;
  }
  return a.pool.zone;
}

int64_t HalfLifeTicks(const MdpOptions& o, double gap_hours) {
  if (!(o.history_half_life_hours > 0)) return 0;
  return std::max<int64_t>(1, std::llround(o.history_half_life_hours / gap_hours));
}

void DeclareFields(MdpOptions& o, FieldVisitor& v) {
  v.Double("history_window_hours", &o.history_window_hours, {.min = 1},
           "past window the availability chain is fitted on");
  v.Double("history_half_life_hours", &o.history_half_life_hours, {.min = 0},
           "runs of the window weigh half as much per this many hours since they ended (0: "
           "all alike)");
  v.Double("min_history_hours", &o.min_history_hours, {.min = 0},
           "less history than this before the job: act as up");
  v.Double("refit_hours", &o.refit_hours, {.min = 0.1},
           "the chain is refitted on the history up to each multiple of this");
  v.Double("prior_steps", &o.prior_steps, {.min = 0},
           "shrinks each run-age bucket's hazard toward the pooled one (steps of evidence)");
  v.Double("step_hours", &o.step_hours, {.min = 0.001},
           "step of the decision process (rounded to whole ticks)");
  v.Int("cells_per_step", &o.cells_per_step, {.min = 2, .max = 16}, "deficit grid cells per step");
  v.Double("spot_hazard_scale", &o.spot_hazard_scale, {.min = 0.1, .max = 10},
           "multiplies the fitted hazard of spot runs (> 1: trust spot less)");
}

std::unique_ptr<Policy> MakeMdpPolicy(MdpOptions options) {
  return std::make_unique<MdpPolicy>(options);
}

}  // namespace spot::policy
