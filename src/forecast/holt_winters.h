// Additive Holt-Winters exponential smoothing with a damped trend, written
// here (no Debian library offers it in C++): level l, trend b, season s of
// length m over hourly means of the price,
//   l_t = a (y_t - s_{t-m}) + (1 - a)(l_{t-1} + phi b_{t-1})
//   b_t = beta (l_t - l_{t-1}) + (1 - beta) phi b_{t-1}
//   s_t = g (y_t - l_t) + (1 - g) s_{t-m}
//   y_{t+h} = l_t + (phi + ... + phi^h) b_t + s_{t+h-m(k+1)}.
// Fit() picks (a, beta, g) from a small grid by the squared error of the
// forecasts at the target's horizon over the fitted history. With fewer than
// two seasons of history it predicts the last price.
#pragma once

#include <memory>
#include <span>
#include <vector>

#include "forecast/forecaster.h"

namespace spot::forecast {

struct HoltWintersOptions {
  double season_hours = 24;    // m in hours, >= 2
  double history_hours = 672;  // hourly means the filter runs over (the last 4 weeks)
  double phi = 0.9;            // trend damping in (0, 1]
};

struct HoltWintersParams {
  double alpha = 0.3, beta = 0.0, gamma = 0.1, phi = 0.9;
};

// The h-step forecasts (h = 1..horizon) after filtering `y` (hourly means, oldest
// first) with `p` and season length m; empty when y.size() < 2 m.
std::vector<double> HoltWintersForecast(std::span<const double> y, int m,
                                        const HoltWintersParams& p, int horizon);

std::unique_ptr<PriceForecaster> MakeHoltWinters(HoltWintersOptions options = {});

}  // namespace spot::forecast
