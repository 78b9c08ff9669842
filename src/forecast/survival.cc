#include "forecast/survival.h"

#include <algorithm>
#include <cmath>
#include <cstdio>

namespace spot::forecast {

SurvivalModel SurvivalModel::FromHistory(const HistoryView& h, int z, int64_t min_at_risk) {
  SurvivalModel m;
  m.min_at_risk_ = min_at_risk;
  std::vector<market::Lifetime> lives;
  double up_hours = 0;
  int64_t events = 0;
  for (int64_t t = 0; t < h.end();) {
    if (!h.Up(z, t)) {
      ++t;
      continue;
    }
    int64_t b = t;
    while (t < h.end() && h.Up(z, t)) ++t;
    double hours = double(t - b) * h.gap_hours();
    bool censored = t == h.end();
    lives.push_back({hours, censored});
    m.hours_sorted_.push_back(hours);
    up_hours += hours;
    events += !censored;
  }
  std::sort(m.hours_sorted_.begin(), m.hours_sorted_.end());
  m.rate_ = (double(events) + 0.5) / std::max(up_hours, 1.0);
  m.curve_ = market::KaplanMeier(std::move(lives));
  return m;
}

int64_t SurvivalModel::AtRisk(double age_hours) const {
  auto it = std::upper_bound(hours_sorted_.begin(), hours_sorted_.end(), age_hours);
  return hours_sorted_.end() - it;
}

double SurvivalModel::EndProbability(double age_hours, double horizon_hours) const {
  double s0 = curve_.At(age_hours);
  if (AtRisk(age_hours) < min_at_risk_ || s0 <= 1e-12) {
    return 1 - std::exp(-rate_ * horizon_hours);
  }
  return std::clamp(1 - curve_.At(age_hours + horizon_hours) / s0, 0.0, 1.0);
}

double SurvivalModel::ExpectedRemainingHours(double age_hours) const {
  double s0 = curve_.At(age_hours);
  if (AtRisk(age_hours) < min_at_risk_ || s0 <= 1e-12 || hours_sorted_.empty()) {
    return 1 / rate_;
  }
  // Area under the step function S from age to the longest lifetime.
  double area = 0, t = age_hours, s = s0;
  const double end = hours_sorted_.back();
  auto it = std::upper_bound(curve_.time_h.begin(), curve_.time_h.end(), age_hours);
  for (; it != curve_.time_h.end() && *it < end; ++it) {
    area += s * (*it - t);
    t = *it;
    s = curve_.survival[it - curve_.time_h.begin()];
  }
  area += s * std::max(0.0, end - t);
  return area / s0;
}

double ExpectedRemainingLifetimeHours(const HistoryView& h, int z) {
  SurvivalModel m = SurvivalModel::FromHistory(h, z);
  return m.ExpectedRemainingHours(double(CurrentRunTicks(h, z)) * h.gap_hours());
}

namespace {

class KaplanMeierHazard final : public PreemptionForecaster {
 public:
  std::string_view name() const override { return "km"; }
  Status Fit(const HistoryView& h, const Target& t) override {
    model_ = SurvivalModel::FromHistory(h, t.zone);
    return Status::Ok();
  }
  double Probability(const HistoryView& h, const Target& t) const override {
    // A run up for n ticks has L >= n; the event is L <= n - 1 + H (ticks), so
    // the conditional is 1 - S(n - 1 + H) / S(n - 1).
    double age = double(std::max<int64_t>(0, CurrentRunTicks(h, t.zone) - 1)) * h.gap_hours();
    return model_.EndProbability(age, double(t.horizon_ticks) * h.gap_hours());
  }
  std::string Describe() const override {
    char buf[128];
    std::snprintf(buf, sizeof buf, "%lld lifetimes (%lld censored), median %.2f h, %.3f/up h",
                  (long long)model_.curve().lifetimes, (long long)model_.curve().censored,
                  model_.curve().MedianHours(), model_.rate_per_hour());
    return buf;
  }

 private:
  SurvivalModel model_;
};

}  // namespace

std::unique_ptr<PreemptionForecaster> MakeKaplanMeierHazard() {
  return std::make_unique<KaplanMeierHazard>();
}

}  // namespace spot::forecast
