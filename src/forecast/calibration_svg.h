// A reliability diagram (SVG, self-contained): for each model, the observed
// event frequency against the mean predicted probability in each bin, one
// panel per horizon; the diagonal is perfect calibration. Bins with fewer
// than min_points predictions are not drawn.
#pragma once

#include <string>
#include <vector>

#include "forecast/backtest.h"

namespace spot::forecast {

// Pools the calibration bins of `results` over zones, per (horizon, model).
std::string RenderCalibrationSvg(const std::vector<PreemptionResult>& results,
                                 const std::string& title, int64_t min_points = 5);

}  // namespace spot::forecast
