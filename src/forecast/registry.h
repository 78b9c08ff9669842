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

#include "core/registry.h"
#include "core/status.h"
#include "forecast/forecaster.h"

namespace spot::forecast {

// Two registries (core/registry.h), one per kind of model, whose names are
// distinct across both (a model is named without saying its kind).
class ForecasterRegistry {
 public:
  using PriceRegistry = Registry<PriceForecaster>;
  using PreemptionRegistry = Registry<PreemptionForecaster>;
  using PriceFactory = PriceRegistry::Factory;
  using PreemptionFactory = PreemptionRegistry::Factory;

  // InvalidArgument if `name` is empty or taken (in either kind).
  Status RegisterPrice(const std::string& name, std::string help, PriceFactory f);
  Status RegisterPreemption(const std::string& name, std::string help, PreemptionFactory f);
  // With parameters: the fields `declare` declares of `Options`.
  template <typename Options>
  Status RegisterPrice(const std::string& name, std::string help,
                       std::function<void(Options&, FieldVisitor&)> declare,
                       std::function<std::unique_ptr<PriceForecaster>(const Options&)> make,
                       Options defaults) {
    SPOT_RETURN_IF_ERROR(CheckNewName(name));
    return price_.RegisterWithFields<Options>(name, std::move(help), std::move(declare),
                                              std::move(make), std::move(defaults));
  }
  template <typename Options>
  Status RegisterPreemption(
      const std::string& name, std::string help,
      std::function<void(Options&, FieldVisitor&)> declare,
      std::function<std::unique_ptr<PreemptionForecaster>(const Options&)> make, Options defaults) {
    SPOT_RETURN_IF_ERROR(CheckNewName(name));
    return preempt_.RegisterWithFields<Options>(name, std::move(help), std::move(declare),
                                                std::move(make), std::move(defaults));
  }
  // Fresh models; NotFound naming the known ones for an unknown name,
  // InvalidArgument for bad parameters.
  Result<std::unique_ptr<PriceForecaster>> CreatePrice(const ComponentConfig& config) const {
    return price_.Create(config);
  }
  Result<std::unique_ptr<PriceForecaster>> CreatePrice(const std::string& name) const {
    return price_.Create(name);
  }
  Result<std::unique_ptr<PreemptionForecaster>> CreatePreemption(
      const ComponentConfig& config) const {
    return preempt_.Create(config);
  }
  Result<std::unique_ptr<PreemptionForecaster>> CreatePreemption(const std::string& name) const {
    return preempt_.Create(name);
  }
  std::vector<std::string> PriceNames() const { return price_.Names(); }         // sorted
  std::vector<std::string> PreemptionNames() const { return preempt_.Names(); }  // sorted
  const std::string& Help(const std::string& name) const;        // REQUIRES: registered
  std::vector<FieldInfo> Fields(const std::string& name) const;  // REQUIRES: registered

 private:
  Status CheckNewName(const std::string& name) const;

  PriceRegistry price_{"price model"};
  PreemptionRegistry preempt_{"preemption model"};
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
