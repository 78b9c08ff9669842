// Gradient-boosted tree forecasters (XGBoost, xgb_booster.h) on the features
// of features.h. One model per target (zone, horizon), trained direct (no
// recursion) on rows from evenly spaced past origins of the fit's view whose
// outcome is known inside it:
//   xgb:        regression (squared error) of log(p[origin - 1 + H] / p[origin - 1]);
//               predicts p0 * exp(y)
//   xgb-hazard: logistic regression of "preempted within H" over up origins;
//               predicts the climatology rate until it has >= 2 outcomes of each kind
#pragma once

#include <memory>

#include "forecast/forecaster.h"
#include "forecast/registry.h"

namespace spot::forecast {

std::unique_ptr<PriceForecaster> MakeGbtPriceForecaster(const ModelOptions& options);
std::unique_ptr<PreemptionForecaster> MakeGbtPreemptionForecaster(const ModelOptions& options);

}  // namespace spot::forecast
