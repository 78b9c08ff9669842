#include "forecast/baselines.h"

#include <algorithm>
#include <array>
#include <cstdio>
#include <numeric>

#include "forecast/events.h"

namespace spot::forecast {

std::vector<int64_t> NextDownTicks(const HistoryView& h, int z) {
  std::vector<int64_t> next(static_cast<size_t>(h.end()) + 1, h.end());
  for (int64_t t = h.end() - 1; t >= 0; --t) next[t] = h.Up(z, t) ? next[t + 1] : t;
  return next;
}

namespace {

class LastValue final : public PriceForecaster {
 public:
  std::string_view name() const override { return "last"; }
  double Predict(const HistoryView& h, const Target& t) const override {
    return h.price(t.zone).back();
  }
};

class SeasonalNaive final : public PriceForecaster {
 public:
  explicit SeasonalNaive(double period_hours) : period_h_(period_hours) {}
  std::string_view name() const override {
    return period_h_ > 24 ? "seasonal-week" : "seasonal-day";
  }
  double Predict(const HistoryView& h, const Target& t) const override {
    auto p = h.price(t.zone);
    int64_t at = h.end() - 1 + t.horizon_ticks - h.Ticks(period_h_);
    while (at >= h.end()) at -= h.Ticks(period_h_);
    return at >= 0 ? p[at] : p.back();
  }

 private:
  double period_h_;
};

class MovingAverage final : public PriceForecaster {
 public:
  explicit MovingAverage(double hours) : hours_(hours) {}
  std::string_view name() const override { return "moving-average"; }
  double Predict(const HistoryView& h, const Target& t) const override {
    auto p = h.price(t.zone);
    int64_t n = std::min<int64_t>(h.Ticks(hours_), h.end());
    return std::accumulate(p.end() - n, p.end(), 0.0) / static_cast<double>(n);
  }
  std::string Describe() const override { return "window " + std::to_string(hours_) + " h"; }

 private:
  double hours_;
};

class Climatology final : public PreemptionForecaster {
 public:
  explicit Climatology(bool hourly) : hourly_(hourly) { rate_.fill(0.5); }
  std::string_view name() const override { return hourly_ ? "hourly-climatology" : "climatology"; }

  Status Fit(const HistoryView& h, const Target& target) override {
    std::array<double, 24> n{}, e{};
    auto next = NextDownTicks(h, target.zone);
    for (int64_t t = 1; t + target.horizon_ticks <= h.end(); ++t) {
      if (!h.Up(target.zone, t - 1)) continue;
      int hour = hourly_ ? h.HourOfDay(t) : 0;
      n[hour] += 1;
      e[hour] += EventWithin(next, t, target.horizon_ticks);
    }
    double all_n = std::accumulate(n.begin(), n.end(), 0.0);
    double all_e = std::accumulate(e.begin(), e.end(), 0.0);
    overall_ = (all_e + 0.5) / (all_n + 1);  // Jeffreys-like: never exactly 0 or 1
    constexpr double kPrior = 20;            // ticks of the overall rate mixed into each hour
    for (int i = 0; i < 24; ++i) rate_[i] = (e[i] + kPrior * overall_) / (n[i] + kPrior);
    return Status::Ok();
  }
  double Probability(const HistoryView& h, const Target& t) const override {
    return hourly_ ? rate_[h.HourOfDay(h.end())] : overall_;
  }
  std::string Describe() const override {
    char buf[64];
    std::snprintf(buf, sizeof buf, "rate %.4f", overall_);
    return buf;
  }

 private:
  bool hourly_;
  double overall_ = 0.5;
  std::array<double, 24> rate_{};
};

}  // namespace

std::unique_ptr<PriceForecaster> MakeLastValue() { return std::make_unique<LastValue>(); }
std::unique_ptr<PriceForecaster> MakeSeasonalNaive(double period_hours) {
  return std::make_unique<SeasonalNaive>(period_hours);
}
std::unique_ptr<PriceForecaster> MakeMovingAverage(double window_hours) {
  return std::make_unique<MovingAverage>(window_hours);
}
std::unique_ptr<PreemptionForecaster> MakeClimatology(bool by_hour_of_day) {
  return std::make_unique<Climatology>(by_hour_of_day);
}

}  // namespace spot::forecast
