// Forecast scores.
// Prices, over origins i with prediction f_i, outcome y_i and last known price l_i:
//   MAE  = mean |f - y|;  MAPE = 100 mean |f - y| / y  (y > 0)
//   MASE = MAE / mean |l - y|: the error relative to the last-value forecast
//          on the same origins (< 1 beats it; NaN when last value is exact)
//   directional accuracy = share of origins where sign(f - l) == sign(y - l),
//          "no change" (|.| <= 1e-9 relative) counting as its own direction
// Preemption, with probabilities p_i, outcomes o_i in {0, 1} and the
// climatology forecast c_i made at the same origin:
//   Brier = mean (p - o)^2;  BSS = 1 - Brier / Brier(c) (> 0 beats climatology)
//   log loss = -mean [o log p + (1 - o) log(1 - p)], p clipped to [1e-4, 1 - 1e-4]
//   calibration: 10 equal-width bins of p, mean p and observed frequency each.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

namespace spot::forecast {

struct PricePoint {
  double predicted = 0, actual = 0, last = 0;
};

struct PriceMetrics {
  int64_t n = 0;
  double mae = 0, mape = 0, mase = 0, directional = 0;
  double naive_mae = 0;  // MAE of the last value on the same origins
};

PriceMetrics ScorePrices(std::span<const PricePoint> points);

struct ProbabilityPoint {
  double p = 0;
  bool event = false;
  double climatology = 0;
};

struct CalibrationBin {
  double lo = 0, hi = 0;  // bin of predicted probability [lo, hi)
  int64_t n = 0;
  double mean_p = 0;    // mean prediction in the bin
  double observed = 0;  // event frequency in the bin
};

struct ProbabilityMetrics {
  int64_t n = 0, events = 0;
  double brier = 0, brier_climatology = 0, bss = 0, log_loss = 0;
  std::vector<CalibrationBin> calibration;  // 10 bins, empty ones included (n = 0)
};

ProbabilityMetrics ScoreProbabilities(std::span<const ProbabilityPoint> points);

}  // namespace spot::forecast
