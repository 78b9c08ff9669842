// Baseline forecasters, the yardsticks every model is scored against.
//   last:           the last known price (MASE's reference)
//   seasonal-naive: the price one period (a day, a week) before the target
//                   time; the last price when that is not yet known
//   moving-average: the mean price over the last window
//   climatology:    the past frequency of a preemption within the horizon
//                   among up ticks (Brier skill's reference); by hour of day,
//                   shrunk toward the overall rate where an hour has few ticks
#pragma once

#include <memory>

#include "forecast/forecaster.h"

namespace spot::forecast {

std::unique_ptr<PriceForecaster> MakeLastValue();
std::unique_ptr<PriceForecaster> MakeSeasonalNaive(double period_hours);
std::unique_ptr<PriceForecaster> MakeMovingAverage(double window_hours);
std::unique_ptr<PreemptionForecaster> MakeClimatology(bool by_hour_of_day);

}  // namespace spot::forecast
