// Rolling-origin backtests without look-ahead. For each zone, horizon H and
// model: origins o every step_hours from the end of a warm-up; at origin o the
// model sees HistoryView::Of(panel, o) only (ticks [0, o)); it is refitted on
// that expanding window every refit_hours; its forecast is scored against
// tick o - 1 + H (prices) or ticks [o, o + H) (preemption; only origins whose
// tick o - 1 is up, an instance being held).
//
// Two guards refuse a leaking model with FailedPrecondition:
//  - future scrambling: at guard_origins origins per series the forecast is
//    made again on a copy of the panel whose ticks >= o are randomized; any
//    change means the model read past its view (e.g. through the span's data
//    pointer, or a reference to the full panel);
//  - implausible skill: MASE below implausible_mase or a Brier skill score
//    above implausible_bss means the inputs themselves leak the outcome (a
//    feature series shifted from the future); no honest model of spot markets
//    gets there. A genuinely periodic synthetic series can trip it: raise the
//    thresholds for such data.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "core/status.h"
#include "forecast/history.h"
#include "forecast/metrics.h"
#include "forecast/registry.h"

namespace spot::forecast {

struct BacktestOptions {
  std::vector<double> price_horizons_hours = {1, 6, 24};
  std::vector<double> preemption_horizons_hours = {1, 6};
  double step_hours = 1;          // between origins, > 0
  double warmup_fraction = 0.25;  // the first origin is after this share of the panel...
  double min_warmup_hours = 24;   // ...and at least this many hours
  double refit_hours = 72;        // refit every this many hours (expanding window), > 0
  int guard_origins = 3;          // scrambled-future checks per series and model, >= 1
  double implausible_mase = 0.2;  // refuse a price model scoring below this
  double implausible_bss = 0.9;   // refuse a preemption model scoring above this
  int64_t min_guard_points = 20;  // origins a series needs before the skill guard applies
  uint64_t seed = 7;              // of the scrambled futures
};

struct PriceResult {
  std::string model, zone;
  double horizon_hours = 0;
  PriceMetrics metrics;
};

struct PreemptionResult {
  std::string model, zone;
  double horizon_hours = 0;
  ProbabilityMetrics metrics;
};

struct BacktestReport {
  std::string panel;
  std::vector<PriceResult> prices;
  std::vector<PreemptionResult> preemption;
  double seconds = 0;
};

// Called after each (zone, horizon, model) series with (done, total).
using BacktestProgressFn = std::function<void(int64_t done, int64_t total)>;

// Price models run when the panel has prices, preemption models when it has
// availability. InvalidArgument for bad options or a panel too short for one
// origin; NotFound for an unknown model; FailedPrecondition from the guards.
Result<BacktestReport> RunBacktest(const Panel& panel, const ForecasterRegistry& registry,
                                   const std::vector<std::string>& price_models,
                                   const std::vector<std::string>& preemption_models,
                                   const BacktestOptions& options,
                                   const BacktestProgressFn& progress = nullptr);

// The (zone, horizon, model) series RunBacktest will run (for progress bars).
int64_t BacktestSeriesCount(const Panel& panel, size_t price_models, size_t preemption_models,
                            const BacktestOptions& options);

// A copy of `panel` whose ticks >= from hold random prices and availability.
Panel ScrambleFuture(const Panel& panel, int64_t from, uint64_t seed);

}  // namespace spot::forecast
