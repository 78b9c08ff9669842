// Features of the gradient-boosted models, computed from a HistoryView at its
// origin (tick end() - 1 is the last known one), so training rows (from
// truncated views) and live rows are built by the same code and cannot see
// past their origin.
#pragma once

#include <string>
#include <vector>

#include "forecast/history.h"

namespace spot::forecast {

// Price, relative to the last price p0 (log ratios): lags 1 h, 6 h, 24 h, 7 d;
// rolling mean 6 h and 24 h, min and max 24 h, std of log price 24 h, long-run
// mean; hours since the last change; hour of day and day of week of the
// target; the price one day before the target; cross-zone: mean and min of
// the other zones' prices now, their mean 6 h log change. REQUIRES: prices,
// end() >= 1.
std::vector<float> PriceFeatures(const HistoryView& h, int zone, int64_t horizon_ticks);
const std::vector<std::string>& PriceFeatureNames();

// Preemption: age of the current up run; fraction of up ticks in the last
// 1 h, 6 h, 24 h, 7 d; preemptions in the last 24 h; hour of day and day of
// week; cross-zone: fraction of the other zones up now, their up fraction in
// the last 1 h, and their preemptions in the last 6 h. REQUIRES: availability, end() >= 1.
std::vector<float> PreemptionFeatures(const HistoryView& h, int zone);
const std::vector<std::string>& PreemptionFeatureNames();

}  // namespace spot::forecast
