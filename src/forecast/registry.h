// Forecasters by name. Registration is explicit: call
// RegisterBuiltinForecasters() (static self-registration vanishes from static
// libraries).
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "core/status.h"
#include "forecast/forecaster.h"

namespace spot::forecast {

class ForecasterRegistry {
 public:
  using PriceFactory = std::function<std::unique_ptr<PriceForecaster>()>;
  using PreemptionFactory = std::function<std::unique_ptr<PreemptionForecaster>()>;

  // InvalidArgument if `name` is empty or taken (in either kind).
  Status RegisterPrice(const std::string& name, std::string help, PriceFactory f);
  Status RegisterPreemption(const std::string& name, std::string help, PreemptionFactory f);
  // Fresh models; NotFound naming the known ones for an unknown name.
  Result<std::unique_ptr<PriceForecaster>> CreatePrice(const std::string& name) const;
  Result<std::unique_ptr<PreemptionForecaster>> CreatePreemption(const std::string& name) const;
  std::vector<std::string> PriceNames() const;             // sorted
  std::vector<std::string> PreemptionNames() const;        // sorted
  const std::string& Help(const std::string& name) const;  // REQUIRES: registered

 private:
  Status CheckNewName(const std::string& name) const;

  std::map<std::string, std::pair<std::string, PriceFactory>> price_;
  std::map<std::string, std::pair<std::string, PreemptionFactory>> preempt_;
};

// Settings of the built-in models.
struct ModelOptions {
  double moving_average_hours = 6;              // window of "moving-average", > 0
  double season_hours = 24;                     // Holt-Winters season length, >= 2
  double holt_winters_history_hours = 24 * 28;  // hours the filter runs over
  int xgb_rounds = 60;                          // boosting rounds
  int xgb_max_depth = 4;
  double xgb_eta = 0.1;
  int xgb_threads = 1;  // nthread, explicit: results do not depend on the machine
  uint64_t xgb_seed = 0;
  int64_t xgb_max_rows = 3000;  // training rows per fit (evenly spaced origins)
};

// Price: last, seasonal-day, seasonal-week, moving-average, holt-winters, xgb.
// Preemption: climatology, hourly-climatology, km, xgb-hazard.
void RegisterBuiltinForecasters(ForecasterRegistry& registry, const ModelOptions& options = {});

}  // namespace spot::forecast
