// The forecaster interfaces. A forecaster is made for one target (a zone and a
// horizon), learns in Fit() from the past, and predicts from the past: both
// receive a HistoryView that ends at the forecast origin (tick end() - 1 is
// the last one known). Not thread-safe; one instance per target.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "core/status.h"
#include "forecast/history.h"

namespace spot::forecast {

// What to predict: zone index in the view and horizon in ticks (>= 1).
struct Target {
  int zone = 0;
  int64_t horizon_ticks = 1;
};

// Spot price of zone `zone` at tick end() - 1 + horizon_ticks.
class PriceForecaster {
 public:
  virtual ~PriceForecaster() = default;
  virtual std::string_view name() const = 0;
  // Learns from the past. Default: nothing to learn (the baselines).
  virtual Status Fit(const HistoryView& history, const Target& target) { return Status::Ok(); }
  // REQUIRES: history.has_prices(), history.end() >= 1.
  virtual double Predict(const HistoryView& history, const Target& target) const = 0;
  // Fitted parameters in one line, for `spot forecast fit`.
  virtual std::string Describe() const { return "no parameters"; }
};

// Probability that a spot instance held in `zone` at tick end() - 1 (an up
// tick) is preempted or finds no capacity at some tick of
// [end(), end() + horizon_ticks).
class PreemptionForecaster {
 public:
  virtual ~PreemptionForecaster() = default;
  virtual std::string_view name() const = 0;
  virtual Status Fit(const HistoryView& history, const Target& target) { return Status::Ok(); }
  // In [0, 1]. REQUIRES: tick end() - 1 of the zone is up.
  virtual double Probability(const HistoryView& history, const Target& target) const = 0;
  virtual std::string Describe() const { return "no parameters"; }
};

}  // namespace spot::forecast
