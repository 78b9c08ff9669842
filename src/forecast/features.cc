#include "forecast/features.h"

#include <algorithm>
#include <cmath>

namespace spot::forecast {
namespace {

// p[max(0, end - 1 - lag)]
double Lag(std::span<const double> p, int64_t lag) {
  int64_t i = static_cast<int64_t>(p.size()) - 1 - lag;
  return p[std::max<int64_t>(0, i)];
}

struct Window {
  double mean = 0, min = 0, max = 0, log_std = 0;
};

Window Stats(std::span<const double> p, int64_t n) {
  n = std::min<int64_t>(n, static_cast<int64_t>(p.size()));
  auto w = p.last(static_cast<size_t>(n));
  Window s{0, w[0], w[0], 0};
  double sl = 0, sl2 = 0;
  for (double v : w) {
    s.mean += v, s.min = std::min(s.min, v), s.max = std::max(s.max, v);
    double l = std::log(std::max(v, 1e-9));
    sl += l, sl2 += l * l;
  }
  s.mean /= double(n);
  double var = sl2 / double(n) - (sl / double(n)) * (sl / double(n));
  s.log_std = std::sqrt(std::max(0.0, var));
  return s;
}

float LogRatio(double a, double b) {
  return static_cast<float>(std::log(std::max(a, 1e-9) / std::max(b, 1e-9)));
}

double UpFraction(const HistoryView& h, int z, int64_t n) {
  n = std::min(n, h.end());
  int64_t up = 0;
  for (int64_t t = h.end() - n; t < h.end(); ++t) up += h.Up(z, t);
  return double(up) / double(n);
}

int64_t Preemptions(const HistoryView& h, int z, int64_t n) {
  int64_t c = 0;
  for (int64_t t = std::max<int64_t>(1, h.end() - n); t < h.end(); ++t) {
    c += h.Up(z, t - 1) && !h.Up(z, t);
  }
  return c;
}

}  // namespace

std::vector<float> PriceFeatures(const HistoryView& h, int z, int64_t horizon) {
  auto p = h.price(z);
  const double p0 = p.back();
  const int64_t day = h.Ticks(24);
  Window w6 = Stats(p, h.Ticks(6)), w24 = Stats(p, day), wall = Stats(p, h.Ticks(24 * 14));
  int64_t since = 0;
  while (since + 1 < h.end() && p[h.end() - 2 - since] == p0) ++since;
  const int64_t target = h.end() - 1 + horizon;
  std::vector<float> f = {static_cast<float>(std::log(std::max(p0, 1e-9))),
                          LogRatio(p0, Lag(p, h.Ticks(1))),
                          LogRatio(p0, Lag(p, h.Ticks(6))),
                          LogRatio(p0, Lag(p, day)),
                          LogRatio(p0, Lag(p, h.Ticks(24 * 7))),
                          LogRatio(w6.mean, p0),
                          LogRatio(w24.mean, p0),
                          LogRatio(w24.min, p0),
                          LogRatio(w24.max, p0),
                          static_cast<float>(w24.log_std),
                          LogRatio(wall.mean, p0),
                          static_cast<float>(std::min(168.0, double(since) * h.gap_hours())),
                          static_cast<float>(h.HourOfDay(target)),
                          static_cast<float>(h.DayOfWeek(target)),
                          LogRatio(Lag(p, std::max<int64_t>(0, day - horizon)), p0)};
  double mean = 0, mn = INFINITY, chg = 0;
  int others = 0;
  for (int o = 0; o < h.num_zones(); ++o) {
    if (o == z) continue;
    auto q = h.price(o);
    mean += q.back(), mn = std::min(mn, q.back()), ++others;
    chg += LogRatio(q.back(), Lag(q, h.Ticks(6)));
  }
  f.push_back(others ? LogRatio(mean / others, p0) : 0.f);
  f.push_back(others ? LogRatio(mn, p0) : 0.f);
  f.push_back(others ? static_cast<float>(chg / others) : 0.f);
  return f;
}

const std::vector<std::string>& PriceFeatureNames() {
  static const std::vector<std::string> names = {"log_p0",      "lag_1h",     "lag_6h",
                                                 "lag_24h",     "lag_7d",     "mean_6h",
                                                 "mean_24h",    "min_24h",    "max_24h",
                                                 "log_std_24h", "mean_14d",   "hours_since_change",
                                                 "target_hour", "target_dow", "day_before_target",
                                                 "others_mean", "others_min", "others_change_6h"};
  return names;
}

std::vector<float> PreemptionFeatures(const HistoryView& h, int z) {
  std::vector<float> f = {
      static_cast<float>(std::min(168.0, double(CurrentRunTicks(h, z)) * h.gap_hours())),
      static_cast<float>(UpFraction(h, z, h.Ticks(1))),
      static_cast<float>(UpFraction(h, z, h.Ticks(6))),
      static_cast<float>(UpFraction(h, z, h.Ticks(24))),
      static_cast<float>(UpFraction(h, z, h.Ticks(24 * 7))),
      static_cast<float>(Preemptions(h, z, h.Ticks(24))),
      static_cast<float>(h.HourOfDay(h.end())),
      static_cast<float>(h.DayOfWeek(h.end()))};
  double up = 0, up_1h = 0, pre = 0;
  int others = 0;
  for (int o = 0; o < h.num_zones(); ++o) {
    if (o == z) continue;
    up += h.Up(o, h.end() - 1), up_1h += UpFraction(h, o, h.Ticks(1));
    pre += double(Preemptions(h, o, h.Ticks(6))), ++others;
  }
  for (double v : {up, up_1h, pre}) f.push_back(others ? static_cast<float>(v / others) : -1.f);
  return f;
}

const std::vector<std::string>& PreemptionFeatureNames() {
  static const std::vector<std::string> names = {"run_age_h",
                                                 "up_1h",
                                                 "up_6h",
                                                 "up_24h",
                                                 "up_7d",
                                                 "preemptions_24h",
                                                 "hour",
                                                 "dow",
                                                 "others_up",
                                                 "others_up_1h",
                                                 "others_preemptions_6h"};
  return names;
}

}  // namespace spot::forecast
