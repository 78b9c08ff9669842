// Output of `spot forecast`: tables for people, JSON for programs.
#pragma once

#include <string>
#include <vector>

#include "forecast/backtest.h"

namespace spot::cli {

// One line of `fit` or `predict`: a model's parameters or its forecast for a
// (panel, zone, horizon). kind: "price" ($/h), "preemption" (probability) or
// "lifetime" (expected remaining hours, horizon 0).
struct ForecastRow {
  std::string panel, zone, kind, model;
  double horizon_hours = 0;
  double value = 0;  // predict: the forecast; fit: unused
  std::string text;  // fit: the fitted parameters; predict: a note ("down now")
};

// {"rows": [{"panel", "zone", "kind", "model", "horizon_hours", "value", "text"}]}
std::string RowsJson(const std::vector<ForecastRow>& rows);
std::string RowsTable(const std::vector<ForecastRow>& rows, bool with_value);

// {"panels": [{"name", "seconds", "prices": [...], "preemption": [...]}]}, every
// metric of backtest.h, calibration bins included; NaN as null.
std::string BacktestJson(const std::vector<forecast::BacktestReport>& reports);
// All scores, then the per-zone summary (BacktestSummary).
std::string BacktestTable(const std::vector<forecast::BacktestReport>& reports);
// Per zone and horizon: the best price model by MASE next to the baselines'
// MASE, and the best preemption model by Brier skill next to the baselines'.
std::string BacktestSummary(const std::vector<forecast::BacktestReport>& reports);

}  // namespace spot::cli
