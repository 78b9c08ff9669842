#include "forecast/metrics.h"

#include <algorithm>
#include <cmath>
#include <limits>

namespace spot::forecast {
namespace {

int Direction(double to, double from) {
  double tol = 1e-9 * std::max(1.0, std::abs(from));
  return to > from + tol ? 1 : (to < from - tol ? -1 : 0);
}

}  // namespace

PriceMetrics ScorePrices(std::span<const PricePoint> points) {
  PriceMetrics m;
  m.n = static_cast<int64_t>(points.size());
  if (points.empty()) return m;
  int64_t positive = 0, same_direction = 0;
  for (const PricePoint& p : points) {
    double e = std::abs(p.predicted - p.actual);
    m.mae += e;
    m.naive_mae += std::abs(p.last - p.actual);
    if (p.actual > 0) m.mape += e / p.actual, ++positive;
    same_direction += Direction(p.predicted, p.last) == Direction(p.actual, p.last);
  }
  const double n = static_cast<double>(m.n);
  m.mae /= n;
  m.naive_mae /= n;
  m.mape = positive ? 100 * m.mape / double(positive) : 0;
  m.mase = m.naive_mae > 0 ? m.mae / m.naive_mae : std::numeric_limits<double>::quiet_NaN();
  m.directional = double(same_direction) / n;
  return m;
}

ProbabilityMetrics ScoreProbabilities(std::span<const ProbabilityPoint> points) {
  ProbabilityMetrics m;
  m.calibration.resize(10);
  for (int b = 0; b < 10; ++b) m.calibration[b].lo = b / 10.0, m.calibration[b].hi = (b + 1) / 10.0;
  m.n = static_cast<int64_t>(points.size());
  if (points.empty()) return m;
  for (const ProbabilityPoint& x : points) {
    double o = x.event ? 1 : 0;
    double p = std::clamp(x.p, 1e-4, 1 - 1e-4);
    m.events += x.event;
    m.brier += (x.p - o) * (x.p - o);
    m.brier_climatology += (x.climatology - o) * (x.climatology - o);
    m.log_loss -= x.event ? std::log(p) : std::log(1 - p);
    CalibrationBin& bin = m.calibration[std::min(9, static_cast<int>(x.p * 10))];
    ++bin.n, bin.mean_p += x.p, bin.observed += o;
  }
  const double n = static_cast<double>(m.n);
  m.brier /= n, m.brier_climatology /= n, m.log_loss /= n;
  m.bss = m.brier_climatology > 0 ? 1 - m.brier / m.brier_climatology
                                  : std::numeric_limits<double>::quiet_NaN();
  for (CalibrationBin& b : m.calibration) {
    if (b.n) b.mean_p /= double(b.n), b.observed /= double(b.n);
  }
  return m;
}

}  // namespace spot::forecast
