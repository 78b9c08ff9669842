#include "policy/forecast_aware.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "forecast/registry.h"
#include "forecast/survival.h"
#include "policy/lifetime_stats.h"
#include "policy/uniform_progress.h"
#include "policy/zone_choice.h"

namespace spot::policy {
namespace {

using forecast::HistoryView;

// The last `window` ticks of the market's history, as a forecast view.
HistoryView WindowView(const MarketView& m, int64_t window) {
  std::vector<forecast::ZoneSeries> zones;
  const size_t n = static_cast<size_t>(m.now() + 1);
  const size_t from = n > size_t(window) ? n - size_t(window) : 0;
  for (int z = 0; z < m.num_zones(); ++z) {
    auto price = m.PriceHistory(z);
    zones.push_back(
        {price.empty() ? price : price.subspan(from), m.AvailabilityHistory(z).subspan(from)});
  }
  return HistoryView(std::move(zones), m.gap_hours() * 3600, 0, m.nodes(),
                     static_cast<int64_t>(n - from));
}

class ForecastUpPolicy final : public Policy {
 public:
  explicit ForecastUpPolicy(ForecastUpOptions o) : opt_(std::move(o)) {
    forecast::RegisterBuiltinForecasters(registry_);
  }
  std::string_view name() const override { return "forecast-up"; }

  void Start(const JobStart& s) override {
    net_.Reset();
    first_ = true;
    const MarketView& m = s.market;
    const int Z = m.num_zones();
    HistoryView v = WindowView(m, std::llround(opt_.history_window_hours / m.gap_hours()));
    survival_.clear();
    for (int z = 0; z < Z; ++z) survival_.push_back(forecast::SurvivalModel::FromHistory(v, z));
    FitOutages(v);
    age_.assign(Z, 0);
    down_age_.assign(Z, 0);
    price_at_.assign(Z, -1e18);
    predicted_.assign(Z, 0);
    prices_ = v.has_prices();
    price_models_.clear();
    if (!prices_) return;
    for (int z = 0; z < Z; ++z) {
      auto model = registry_.CreatePrice(opt_.price_model);
      if (!model.ok() || !(*model)->Fit(v, Target(v, z)).ok()) {
        prices_ = false;
        return;
      }
      price_models_.push_back(std::move(model).value());
    }
  }

  Decision Decide(const Observation& obs) override {
    UpdateAges(obs);
    if (net_.Engaged(obs)) return obs.Gang(Placement::OnDemand());
    const double p = obs.progress_hours, t = obs.time_hours;
    const bool on_od = obs.current.kind == InstanceKind::kOnDemand;
    if (on_od && p < ExpectedProgress(obs.job, t + 2 * obs.job.changeover_hours)) {
      return obs.Gang(Placement::OnDemand());
    }
    int z = ChooseZone(obs);
    bool on_spot = obs.current.kind == InstanceKind::kSpot;
    if (z >= 0 && !on_spot && WaitForDrop(obs, z)) return obs.Gang(Placement::Idle());
    if (z >= 0) return obs.Gang(Placement::Spot(z));
    if (p < ExpectedProgress(obs.job, t) && !SpotLikelySoon(obs))
      return obs.Gang(Placement::OnDemand());
    return obs.Gang(Placement::Idle());
  }

 private:
  forecast::Target Target(const HistoryView& v, int z) const {
    return {.zone = z, .horizon_ticks = v.Ticks(opt_.price_horizon_hours)};
  }

  void UpdateAges(const Observation& obs) {
    for (int z = 0; z < obs.market.num_zones(); ++z) {
      bool up = obs.market.AvailableNow(z);
      auto hist = obs.market.AvailabilityHistory(z);
      age_[z] = first_ ? CurrentRunAge(hist, obs.market.nodes()) : (up ? age_[z] + 1 : 0);
      if (first_) {
        down_age_[z] = 0;
        for (size_t i = hist.size(); i-- > 0 && hist[i] < obs.market.nodes();) ++down_age_[z];
      } else {
        down_age_[z] = up ? 0 : down_age_[z] + 1;
      }
    }
    first_ = false;
  }

  // Outage lengths: the survival of the down runs (a view of the inverted window).
  void FitOutages(const HistoryView& v) {
    down_.assign(v.num_zones(), {});
    outage_.clear();
    for (int z = 0; z < v.num_zones(); ++z) {
      for (int64_t t = 0; t < v.end(); ++t) down_[z].push_back(v.Up(z, t) ? 0 : 1);
    }
    std::vector<forecast::ZoneSeries> zones;
    for (const auto& d : down_) zones.push_back({{}, d});
    HistoryView inverted(std::move(zones), v.gap_hours() * 3600, 0, 1, v.end());
    for (int z = 0; z < v.num_zones(); ++z) {
      outage_.push_back(forecast::SurvivalModel::FromHistory(inverted, z));
    }
  }

  // Some zone is likely to have capacity again within spot_wait_hours, and the
  // slack allows waiting that long twice over.
  bool SpotLikelySoon(const Observation& obs) const {
    const double slack = obs.remaining_time() - obs.remaining_work() - 2 * obs.job.changeover_hours;
    if (slack < 2 * opt_.spot_wait_hours) return false;
    double none = 1;
    for (int z = 0; z < obs.market.num_zones(); ++z) {
      double age_h = double(std::max<int64_t>(0, down_age_[z] - 1)) * obs.market.gap_hours();
      none *= 1 - outage_[z].EndProbability(age_h, opt_.spot_wait_hours);
    }
    return 1 - none >= opt_.spot_wait_probability;
  }

  // P(the zone's current run ends within `hours`), from its survival model.
  double EndProbability(const Observation& obs, int z, double hours) const {
    double age_h = double(std::max<int64_t>(0, age_[z] - 1)) * obs.market.gap_hours();
    return survival_[z].EndProbability(age_h, hours);
  }

  // Expected $ per hour of spot in zone z over the next zone_horizon_hours:
  // its price plus the chance of a preemption times what one costs (a
  // changeover billed and a changeover of progress to make up, ~2 d k).
  double Score(const Observation& obs, int z) const {
    double q = EndProbability(obs, z, opt_.zone_horizon_hours);
    double penalty = 2 * obs.job.changeover_hours * obs.job.ondemand_price;
    return obs.market.PriceNow(z) + q * penalty / opt_.zone_horizon_hours;
  }

  int BestZone(const Observation& obs, int except) const {
    const MarketView& m = obs.market;
    int best = -1;
    double best_s = 0;
    for (int z = 0; z < m.num_zones(); ++z) {
      if (z == except || !m.AvailableNow(z)) continue;
      double s = Score(obs, z);
      if (best < 0 || s < best_s) best = z, best_s = s;
    }
    return best;
  }

  int ChooseZone(const Observation& obs) const {
    const MarketView& m = obs.market;
    const int cur = obs.current.zone;
    if (obs.current.kind != InstanceKind::kSpot || !m.AvailableNow(cur)) {
      return BestZone(obs, -1);
    }
    int alt = BestZone(obs, cur);
    if (alt < 0) return cur;
    double risk = EndProbability(obs, cur, 1);
    if (risk > opt_.move_probability && EndProbability(obs, alt, 1) < risk - opt_.move_margin) {
      return alt;
    }
    return WorthMoving(obs, cur, alt) ? alt : cur;
  }

  // Moving to a cheaper zone pays when the saving over the alternative's
  // expected remaining lifetime (Kaplan-Meier, capped by the work left)
  // exceeds what the move costs: a changeover billed there and one of progress.
  bool WorthMoving(const Observation& obs, int cur, int alt) const {
    const MarketView& m = obs.market;
    double saving = m.PriceNow(cur) - m.PriceNow(alt);
    if (saving <= 0) return false;
    double age_h = double(std::max<int64_t>(0, age_[alt] - 1)) * m.gap_hours();
    double hours = std::min(survival_[alt].ExpectedRemainingHours(age_h), obs.remaining_work());
    double cost = 2 * obs.job.changeover_hours * m.PriceNow(alt);
    return saving * hours > opt_.move_gain * cost;
  }

  // Idle now because zone z's price is predicted to drop enough, and the job
  // stays on the uniform-progress line while it waits.
  bool WaitForDrop(const Observation& obs, int z) {
    if (!prices_) return false;
    const double wait_until = obs.time_hours + opt_.price_horizon_hours;
    if (obs.progress_hours < ExpectedProgress(obs.job, wait_until)) return false;
    if (obs.time_hours - price_at_[z] >= opt_.price_refresh_hours) {
      HistoryView v =
          WindowView(obs.market, std::llround(opt_.history_window_hours / obs.market.gap_hours()));
      predicted_[z] = price_models_[z]->Predict(v, Target(v, z));
      price_at_[z] = obs.time_hours;
    }
    return predicted_[z] < (1 - opt_.price_drop) * obs.market.PriceNow(z);
  }

  ForecastUpOptions opt_;
  forecast::ForecasterRegistry registry_;
  LatchedSafetyNet net_;
  bool first_ = true, prices_ = false;
  std::vector<forecast::SurvivalModel> survival_;
  std::vector<std::unique_ptr<forecast::PriceForecaster>> price_models_;
  std::vector<forecast::SurvivalModel> outage_;  // down-run survival per zone
  std::vector<std::vector<int32_t>> down_;       // the window, inverted (1 = down)
  std::vector<int64_t> age_, down_age_;
  std::vector<double> price_at_, predicted_;
};

}  // namespace

void DeclareFields(ForecastUpOptions& o, FieldVisitor& v) {
  v.Double("history_window_hours", &o.history_window_hours, {.min = 1},
           "past window the survival models are fitted on");
  v.Double("zone_horizon_hours", &o.zone_horizon_hours, {.min = 0, .min_exclusive = true},
           "preemption horizon that ranks zones");
  v.Double("move_probability", &o.move_probability, {.min = 0, .max = 1},
           "P(preempted within 1 h) that makes it move");
  v.Double("move_margin", &o.move_margin, {.min = 0, .max = 1},
           "the other zone must be this much less likely to be preempted");
  v.Double("move_gain", &o.move_gain, {.min = 0},
           "moves to a cheaper zone when the saving exceeds this many times the move's cost");
  v.Double("spot_wait_hours", &o.spot_wait_hours, {.min = 0, .min_exclusive = true},
           "waits for spot instead of on-demand when an outage is likely to end within this");
  v.Double("spot_wait_probability", &o.spot_wait_probability, {.min = 0, .max = 1},
           "how likely the outage's end must be to wait for it");
  v.Double("price_drop", &o.price_drop, {.min = 0, .max = 1},
           "predicted relative price drop worth waiting for");
  v.Double("price_horizon_hours", &o.price_horizon_hours, {.min = 0, .min_exclusive = true},
           "how far ahead it looks for the drop");
  v.Double("price_refresh_hours", &o.price_refresh_hours, {.min = 0, .min_exclusive = true},
           "price forecasts are recomputed this often");
  v.Enum("price_model", &o.price_model,
         {"last", "seasonal-day", "seasonal-week", "moving-average", "holt-winters", "xgb"},
         "the forecast price model");
}

std::unique_ptr<Policy> MakeForecastUpPolicy(ForecastUpOptions options) {
  return std::make_unique<ForecastUpPolicy>(std::move(options));
}

}  // namespace spot::policy
