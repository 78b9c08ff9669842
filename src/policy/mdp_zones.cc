#include "policy/mdp_zones.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "fleet/migration.h"
#include "policy/uniform_progress.h"
#include "policy/zone_choice.h"

namespace spot::policy {
namespace {

constexpr double kTiny = 1e-6;

class MdpZonesPolicy final : public Policy {
 public:
  explicit MdpZonesPolicy(MdpZonesOptions o) : opt_(o), mdp_(MakeMdpPolicy(o.mdp)) {}
  std::string_view name() const override { return "mdp-zones"; }

  void Start(const JobStart& s) override {
    mdp_->Start(s);
    job_ = s.job;
    zones_ = s.market.num_zones();
    // mdp's step and refit schedule (mdp_policy.cc), so both see the same past.
    const double gap = s.market.gap_hours();
    step_ticks_ = std::max<int64_t>(1, std::llround(opt_.mdp.step_hours / gap));
    const auto job_ticks = static_cast<int64_t>(std::ceil(s.job.deadline_hours / gap));
    step_ticks_ = std::max<int64_t>(step_ticks_, (job_ticks + 599) / 600);
    step_hours_ = static_cast<double>(step_ticks_) * gap;
    refit_ticks_ = std::max<int64_t>(1, std::llround(opt_.mdp.refit_hours / gap));
    fitted_cut_ = -1;
    chains_.clear();
    std::vector<std::string> regions;
    for (int z = 0; z < zones_; ++z) regions.push_back(fleet::RegionOf(s.market.pool(z)));
    auto usd = fleet::MigrationMatrix(regions, s.job.checkpoint_gb, s.job.egress);
    move_usd_ = usd.ok() ? std::move(usd).value()
                         : std::vector<double>(regions.size() * regions.size(), 0.0);
    state_zone_ = -1;
  }

  Decision Decide(const Observation& obs) override {
    if (obs.current.kind == InstanceKind::kSpot) state_zone_ = obs.current.zone;
    Decision d = mdp_->Decide(obs);
    if (zones_ < 2) return d;
    if (SpotStartingZone(d, obs.job.nodes)) return Starting(obs, d);
    auto gang = AsGang(d.fleet, obs.job.nodes);
    if (!gang || gang->kind != InstanceKind::kSpot || gang->zone < 0) return d;
    Refit(obs.market);
    if (chains_.empty()) return d;
    const bool running =
        (obs.current.kind == InstanceKind::kSpot && obs.current.zone == gang->zone) ||
        SpotLive(obs, gang->zone);  // or started beside on-demand
    return obs.Gang(running ? Stay(obs, gang->zone) : Enter(obs));
  }

 private:
  bool Usable(const MarketView& m, int z, int64_t t) const {
    auto avail = m.AvailabilityHistory(z);
    auto price = m.PriceHistory(z);
    return avail[t] >= m.nodes() && (price.empty() ? 1.0 : price[t]) < job_.ondemand_price;
  }
  double Move(int from, int to) const {
    return from < 0 ? 0 : move_usd_[static_cast<size_t>(from * zones_ + to)];
  }

  // Expected hours of the current spot run of usable zone z, capped at `cap`.
  double RunHours(const MarketView& m, int z, double cap) const {
    const int64_t now = m.now();
    const int64_t max_age = (kAgeEdges.back() + 1) * step_ticks_ + 1;
    int64_t age = 1;
    while (age < max_age && now - age >= 0 && Usable(m, z, now - age)) ++age;
    const int state = ChainState(true, age, static_cast<double>(step_ticks_));
    const double steps = ExpectedUpSteps(chains_[z], state, cap / step_hours_ + 1);
    return std::min(cap, steps * step_hours_);
  }

  // Whether the job holds spot instances in zone z (any zone: z < 0) that
  // the market did not take back.
  static bool SpotLive(const Observation& obs, int z) {
    for (const fleet::Instance& i : obs.fleet) {
      if (i.pool.spot() && (z < 0 || i.pool.zone == z) &&
          i.state != fleet::InstanceState::kPreempted) {
        return true;
      }
    }
    return false;
  }

  // mdp leaving on-demand for spot make before break: the zone is chosen as
  // for any entry, once; a gang already starting keeps its zone (mdp keeps
  // it while usable).
  Decision Starting(const Observation& obs, const Decision& d) {
    if (SpotLive(obs, -1)) return d;
    Refit(obs.market);
    if (chains_.empty()) return d;
    const Placement p = Enter(obs);
    if (p.kind == InstanceKind::kSpot) return OnDemandWhileSpotStarts(p.zone, obs.job.nodes);
    return obs.Gang(p);
  }

  // Entering spot: the usable zone of least expected $ per hour of progress,
  // the move from the job's state included; none when on-demand is cheaper.
  Placement Enter(const Observation& obs) const {
    const MarketView& m = obs.market;
    const double work = std::max(obs.remaining_work(), kTiny);
    const double n = obs.job.nodes, d = obs.job.changeover_hours;
    int best = -1;
    double best_unit = std::numeric_limits<double>::infinity();
    for (int z = 0; z < zones_; ++z) {
      if (!Usable(m, z, m.now())) continue;
      const double run = std::max(RunHours(m, z, work), kTiny);
      const double unit = (n * m.PriceNow(z) * (run + d) + Move(state_zone_, z)) / run;
      if (unit < best_unit) {
        best = z;
        best_unit = unit;
      }
    }
    const double od_unit = n * job_.ondemand_price * (work + d) / work;
    if (best >= 0 && best_unit <= od_unit) return Placement::Spot(best);
    if (obs.current.kind == InstanceKind::kOnDemand ||
        obs.progress_hours < ExpectedProgress(obs.job, obs.time_hours)) {
      return Placement::OnDemand();
    }
    return Placement::Idle();
  }

  // Running in usable zone `here`: stay unless another zone saves more than
  // move_margin x what the move costs, with slack to spare.
  Placement Stay(const Observation& obs, int here) const {
    const MarketView& m = obs.market;
    const double n = obs.job.nodes, d = obs.job.changeover_hours;
    const double slack =
        obs.remaining_time() - obs.remaining_work() - obs.changeover_left_hours - 2 * d;
    if (slack < opt_.move_slack_changeovers * d) return Placement::Spot(here);
    const double work = std::max(obs.remaining_work(), kTiny);
    const double price_here = m.PriceNow(here);
    int best = here;
    double best_gain = 0;
    for (int j = 0; j < zones_; ++j) {
      if (j == here || m.PriceNow(j) >= price_here || !Usable(m, j, m.now())) continue;
      const double run = RunHours(m, j, work);
      const double saving = n * (price_here - m.PriceNow(j)) * run;
      const double cost = n * m.PriceNow(j) * d + Move(here, j);
      const double gain = saving - opt_.move_margin * cost;
      if (gain > best_gain) {
        best = j;
        best_gain = gain;
      }
    }
    return Placement::Spot(best);
  }

  // Fits one chain per zone on the history before the last refit cut, when
  // that cut moved (mdp's schedule and window).
  void Refit(const MarketView& m) {
    const int64_t every =
        m.now() >= refit_ticks_ ? refit_ticks_ : std::max<int64_t>(1, refit_ticks_ / 8);
    const int64_t cut = (m.now() / every) * every;
    if (cut == fitted_cut_) return;
    fitted_cut_ = cut;
    const double gap = m.gap_hours();
    if (static_cast<double>(cut) * gap < opt_.mdp.min_history_hours) return;
    const auto window = static_cast<int64_t>(opt_.mdp.history_window_hours / gap);
    const int64_t first = std::max<int64_t>(0, cut - window);
    chains_.assign(zones_, {});
    std::vector<uint8_t> up(static_cast<size_t>(cut - first));
    std::vector<double> price(up.size());
    const ChainFitOptions fit{.step_ticks = static_cast<double>(step_ticks_),
                              .prior_steps = opt_.mdp.prior_steps,
                              .half_life_ticks = HalfLifeTicks(opt_.mdp, gap)};
    for (int z = 0; z < zones_; ++z) {
      auto p = m.PriceHistory(z);
      for (int64_t t = first; t < cut; ++t) {
        up[t - first] = Usable(m, z, t) ? 1 : 0;
        price[t - first] = p.empty() ? 1.0 : p[t];
      }
      chains_[z] = FitAvailabilityChain(up, price, fit);
      for (int s = 0; s < kAgeBuckets; ++s) {
        chains_[z].survive[s] = std::pow(chains_[z].survive[s], opt_.mdp.spot_hazard_scale);
      }
    }
  }

  MdpZonesOptions opt_;
  std::unique_ptr<Policy> mdp_;
  JobSpec job_;
  int zones_ = 0;
  int64_t step_ticks_ = 1, refit_ticks_ = 1, fitted_cut_ = -1;
  double step_hours_ = 1;
  std::vector<AvailabilityChain> chains_;  // per zone; empty: not enough history
  std::vector<double> move_usd_;           // zones x zones, row: from
  int state_zone_ = -1;                    // where the job's state is (-1: nowhere yet)
};

}  // namespace

double ExpectedUpSteps(const AvailabilityChain& chain, int state, double cap) {
  if (!IsUp(state)) return 0;
  // E_b = s_b (1 + a_b E_{b+1} + (1 - a_b) E_b): survive the step, then
  // advance to the next age bucket or stay in this one.
  double next = 0;
  for (int b = kAgeBuckets - 1; b >= state; --b) {
    const double s = chain.survive[b];
    const double a = AdvanceChance(b);
    const double denom = 1 - s * (1 - a);
    next = denom <= 1e-12 ? cap : std::min(cap, s * (1 + a * next) / denom);
  }
  return next;
}

void DeclareFields(MdpZonesOptions& o, FieldVisitor& v) {
  DeclareFields(o.mdp, v);
  v.Double("move_margin", &o.move_margin, {.min = 0.01, .max = 100},
           "a running job moves zone only when the expected saving beats this many times the "
           "move's cost (changeover + migration)");
  v.Double("move_slack_changeovers", &o.move_slack_changeovers, {.min = 0, .max = 1000},
           "and only with at least this many changeovers of slack beyond the 2d safety net");
}

std::unique_ptr<Policy> MakeMdpZonesPolicy(MdpZonesOptions options) {
  return std::make_unique<MdpZonesPolicy>(options);
}

}  // namespace spot::policy
