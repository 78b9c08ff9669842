#include "forecast/holt_winters.h"

#include <algorithm>
#include <cmath>
#include <cstdio>

namespace spot::forecast {
namespace {

// Hourly means of the view's prices, oldest first, in buckets ending at the
// origin (the last bucket ends at tick end() - 1).
std::vector<double> HourlyMeans(const HistoryView& h, int z, double max_hours) {
  auto p = h.price(z);
  const int64_t k = h.Ticks(1);
  const int64_t n = std::min<int64_t>(h.end() / k, static_cast<int64_t>(max_hours));
  std::vector<double> y(n);
  for (int64_t b = 0; b < n; ++b) {
    int64_t hi = h.end() - b * k, lo = hi - k;
    double s = 0;
    for (int64_t t = lo; t < hi; ++t) s += p[t];
    y[n - 1 - b] = s / static_cast<double>(k);
  }
  return y;
}

struct State {
  double level = 0, trend = 0;
  std::vector<double> season;
};

State Init(std::span<const double> y, int m) {
  State s;
  double mean1 = 0, mean2 = 0;
  for (int i = 0; i < m; ++i) mean1 += y[i], mean2 += y[m + i];
  mean1 /= m, mean2 /= m;
  s.level = mean1;
  s.trend = (mean2 - mean1) / m;
  s.season.resize(m);
  for (int i = 0; i < m; ++i) s.season[i] = y[i] - mean1;
  return s;
}

// Runs the filter over y[m..]; calls on_step(t, state) before each update so a
// caller can score forecasts made at t - 1.
template <typename Fn>
State Filter(std::span<const double> y, int m, const HoltWintersParams& p, Fn on_step) {
  State s = Init(y, m);
  for (size_t t = m; t < y.size(); ++t) {
    on_step(t, s);
    double& st = s.season[t % m];
    double prev = s.level;
    s.level = p.alpha * (y[t] - st) + (1 - p.alpha) * (s.level + p.phi * s.trend);
    s.trend = p.beta * (s.level - prev) + (1 - p.beta) * p.phi * s.trend;
    st = p.gamma * (y[t] - s.level) + (1 - p.gamma) * st;
  }
  return s;
}

double Ahead(const State& s, size_t n, int m, const HoltWintersParams& p, int h) {
  double damp = 0, f = 1;
  for (int i = 0; i < h; ++i) f *= p.phi, damp += f;
  return s.level + damp * s.trend + s.season[(n + h - 1) % m];
}

class HoltWinters final : public PriceForecaster {
 public:
  explicit HoltWinters(HoltWintersOptions o) : opt_(o), m_(std::max(2, int(o.season_hours))) {
    params_.phi = o.phi;
  }
  std::string_view name() const override { return "holt-winters"; }

  Status Fit(const HistoryView& h, const Target& t) override {
    std::vector<double> y = HourlyMeans(h, t.zone, opt_.history_hours);
    if (y.size() < size_t(2 * m_)) return Status::Ok();
    int hz = HorizonHours(h, t);
    double best = INFINITY;
    for (double a : {0.1, 0.3, 0.6, 0.9}) {
      for (double b : {0.0, 0.05}) {
        for (double g : {0.0, 0.1, 0.3}) {
          HoltWintersParams p{a, b, g, opt_.phi};
          double sse = Score(y, p, hz);
          if (sse < best) best = sse, params_ = p;
        }
      }
    }
    return Status::Ok();
  }

  double Predict(const HistoryView& h, const Target& t) const override {
    std::vector<double> y = HourlyMeans(h, t.zone, opt_.history_hours);
    int hz = HorizonHours(h, t);
    std::vector<double> f = HoltWintersForecast(y, m_, params_, hz);
    if (f.empty()) return h.price(t.zone).back();
    return std::max(0.0, f.back());
  }

  std::string Describe() const override {
    char buf[96];
    std::snprintf(buf, sizeof buf, "alpha %.2f beta %.2f gamma %.2f phi %.2f season %d h",
                  params_.alpha, params_.beta, params_.gamma, params_.phi, m_);
    return buf;
  }

 private:
  static int HorizonHours(const HistoryView& h, const Target& t) {
    return std::max<int>(1, std::lround(double(t.horizon_ticks) * h.gap_hours()));
  }
  // Squared error of the hz-step forecasts made at every step of the filter.
  double Score(std::span<const double> y, const HoltWintersParams& p, int hz) const {
    double sse = 0;
    Filter(y, m_, p, [&](size_t t, const State& s) {
      if (t + hz - 1 < y.size()) {
        double e = Ahead(s, t, m_, p, hz) - y[t + hz - 1];
        sse += e * e;
      }
    });
    return sse;
  }

  HoltWintersOptions opt_;
  int m_;
  HoltWintersParams params_;
};

}  // namespace

std::vector<double> HoltWintersForecast(std::span<const double> y, int m,
                                        const HoltWintersParams& p, int horizon) {
  if (y.size() < size_t(2 * m)) return {};
  State s = Filter(y, m, p, [](size_t, const State&) {});
  std::vector<double> out;
  for (int h = 1; h <= horizon; ++h) out.push_back(Ahead(s, y.size(), m, p, h));
  return out;
}

std::unique_ptr<PriceForecaster> MakeHoltWinters(HoltWintersOptions options) {
  return std::make_unique<HoltWinters>(options);
}

}  // namespace spot::forecast
