#include "policy/hazard_up.h"

#include <cmath>
#include <vector>

#include "policy/lifetime_stats.h"
#include "policy/uniform_progress.h"
#include "policy/zone_choice.h"

namespace spot::policy {
namespace {

constexpr double kUnknown = 1e18;  // residual when history says nothing: trust spot

class HazardUpPolicy final : public Policy {
 public:
  explicit HazardUpPolicy(HazardUpOptions o) : opt_(o) {}
  std::string_view name() const override { return "hazard-up"; }

  void Start(const JobStart& s) override {
    net_.Reset();
    first_ = true;
    int Z = s.market.num_zones();
    int64_t window = static_cast<int64_t>(opt_.history_window_hours / s.market.gap_hours());
    stats_.assign(Z, {});
    age_.assign(Z, 0);
    passed_.assign(Z, false);
    bool enough = s.market.now() * s.market.gap_hours() >= opt_.min_history_hours;
    scarce_ = enough;
    for (int z = 0; z < Z; ++z) {
      auto hist = s.market.AvailabilityHistory(z);
      stats_[z] = LifetimeStats(hist.first(hist.size() - 1), s.market.nodes(), window);
      scarce_ = scarce_ && stats_[z].availability() < opt_.scarce_availability;
    }
  }

  Decision Decide(const Observation& obs) override {
    UpdateAges(obs);
    const double d = obs.job.changeover_hours;
    if (net_.Engaged(obs)) return obs.Gang(Placement::OnDemand());
    if (scarce_) {  // wait for spot; the net above finishes on on-demand
      int z = ChooseZone(obs);
      return obs.Gang(z >= 0 ? Placement::Spot(z) : Placement::Idle());
    }
    const double p = obs.progress_hours;
    bool on_od = obs.current.kind == InstanceKind::kOnDemand;
    if (on_od && p < ExpectedProgress(obs.job, obs.time_hours + 2 * d)) {
      return obs.Gang(Placement::OnDemand());
    }
    int z = ChooseZone(obs);
    if (z >= 0) {
      bool careful = on_od || passed_[z];
      if (!careful && opt_.check_from_idle) careful = obs.current.kind != InstanceKind::kSpot;
      if (!careful || WorthLeaving(obs, z, on_od)) return obs.Gang(Placement::Spot(z));
      passed_[z] = true;
    }
    if (p < ExpectedProgress(obs.job, obs.time_hours)) return obs.Gang(Placement::OnDemand());
    return obs.Gang(Placement::Idle());
  }

 private:
  void UpdateAges(const Observation& obs) {
    for (int z = 0; z < obs.market.num_zones(); ++z) {
      bool up = obs.market.AvailableNow(z);
      if (first_) {
        age_[z] = CurrentRunAge(obs.market.AvailabilityHistory(z), obs.market.nodes());
      } else {
        age_[z] = up ? age_[z] + 1 : 0;
      }
      if (!up) passed_[z] = false;
    }
    first_ = false;
  }

  double ResidualHours(const Observation& obs, int z) const {
    double r = opt_.median ? stats_[z].MedianResidualTicks(age_[z] - 1, kUnknown, opt_.min_runs)
                           : stats_[z].ResidualTicks(age_[z] - 1, kUnknown, opt_.min_runs);
    return r >= kUnknown ? kUnknown : r * obs.market.gap_hours();
  }

  // Taking spot in z from on-demand pays off when the run is expected to
  // outlive the break-even lifetime 2 k d / (k - p).
  // From idle one changeover is at stake: k d / (k - p).
  bool WorthLeaving(const Observation& obs, int z, bool from_od) const {
    double k = obs.job.ondemand_price, ps = obs.market.PriceNow(z);
    if (ps >= k) return false;
    double breakeven =
        opt_.breakeven_scale * (from_od ? 2 : 1) * k * obs.job.changeover_hours / (k - ps);
    return ResidualHours(obs, z) > breakeven;
  }

  int ChooseZone(const Observation& obs) const {
    const MarketView& m = obs.market;
    if (obs.current.kind == InstanceKind::kSpot && m.AvailableNow(obs.current.zone)) {
      return obs.current.zone;
    }
    int best = -1;
    double best_r = -1;
    for (int z = 0; z < m.num_zones(); ++z) {
      if (!m.AvailableNow(z)) continue;
      double r = ResidualHours(obs, z);
      if (best < 0 || r > best_r || (r == best_r && m.PriceNow(z) < m.PriceNow(best))) {
        best = z, best_r = r;
      }
    }
    return best;
  }

  HazardUpOptions opt_;
  LatchedSafetyNet net_;
  bool first_ = true, scarce_ = false;
  std::vector<LifetimeStats> stats_;
  std::vector<int64_t> age_;
  std::vector<bool> passed_;  // this zone's current run was passed over
};

}  // namespace

void DeclareFields(HazardUpOptions& o, FieldVisitor& v) {
  v.Double("history_window_hours", &o.history_window_hours, {.min = 1},
           "past window the survival curve of spot runs is fitted on");
  v.Int("min_runs", &o.min_runs, {.min = 1}, "fewer surviving runs in the window: act like up");
  v.Double("breakeven_scale", &o.breakeven_scale, {.min = 0},
           "multiplies the break-even lifetime 2kd / (k - p) a spot run must promise");
  v.Bool("median", &o.median, "use the median residual lifetime (else the mean)");
  v.Bool("check_from_idle", &o.check_from_idle, "also weigh entering spot from idle");
  v.Double("scarce_availability", &o.scarce_availability, {.min = 0, .max = 1},
           "below this fraction of the window with capacity in every zone, wait for spot");
  v.Double("min_history_hours", &o.min_history_hours, {.min = 0},
           "history needed before the scarcity rule applies");
}

std::unique_ptr<Policy> MakeHazardUpPolicy(HazardUpOptions options) {
  return std::make_unique<HazardUpPolicy>(options);
}

}  // namespace spot::policy
