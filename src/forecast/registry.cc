#include "forecast/registry.h"

#include "forecast/baselines.h"
#include "forecast/gbt.h"
#include "forecast/holt_winters.h"
#include "forecast/survival.h"

namespace spot::forecast {
namespace {

template <typename Map>
std::vector<std::string> Keys(const Map& m) {
  std::vector<std::string> out;
  for (const auto& [name, entry] : m) out.push_back(name);
  return out;
}

template <typename Map>
Status Unknown(const std::string& kind, const std::string& name, const Map& m) {
  std::string known;
  for (const auto& [n, e] : m) known += (known.empty() ? "" : ", ") + n;
  return NotFoundError("unknown " + kind + " model '" + name + "' (known: " + known + ")");
}

}  // namespace

Status ForecasterRegistry::CheckNewName(const std::string& name) const {
  if (name.empty()) return InvalidArgumentError("model name is empty");
  if (price_.count(name) || preempt_.count(name)) {
    return InvalidArgumentError("model '" + name + "' registered twice");
  }
  return Status::Ok();
}

Status ForecasterRegistry::RegisterPrice(const std::string& name, std::string help,
                                         PriceFactory f) {
  SPOT_RETURN_IF_ERROR(CheckNewName(name));
  price_[name] = {std::move(help), std::move(f)};
  return Status::Ok();
}

Status ForecasterRegistry::RegisterPreemption(const std::string& name, std::string help,
                                              PreemptionFactory f) {
  SPOT_RETURN_IF_ERROR(CheckNewName(name));
  preempt_[name] = {std::move(help), std::move(f)};
  return Status::Ok();
}

Result<std::unique_ptr<PriceForecaster>> ForecasterRegistry::CreatePrice(
    const std::string& name) const {
  auto it = price_.find(name);
  if (it == price_.end()) return Unknown("price", name, price_);
  return it->second.second();
}

Result<std::unique_ptr<PreemptionForecaster>> ForecasterRegistry::CreatePreemption(
    const std::string& name) const {
  auto it = preempt_.find(name);
  if (it == preempt_.end()) return Unknown("preemption", name, preempt_);
  return it->second.second();
}

std::vector<std::string> ForecasterRegistry::PriceNames() const { return Keys(price_); }
std::vector<std::string> ForecasterRegistry::PreemptionNames() const { return Keys(preempt_); }

const std::string& ForecasterRegistry::Help(const std::string& name) const {
  auto it = price_.find(name);
  return it != price_.end() ? it->second.first : preempt_.at(name).first;
}

void RegisterBuiltinForecasters(ForecasterRegistry& r, const ModelOptions& o) {
  auto price = [&r](const std::string& n, std::string help, ForecasterRegistry::PriceFactory f) {
    Status s = r.RegisterPrice(n, std::move(help), std::move(f));
    (void)s;  // builtin names are distinct; a clash is a programmer bug caught by tests
  };
  auto preempt = [&r](const std::string& n, std::string help,
                      ForecasterRegistry::PreemptionFactory f) {
    Status s = r.RegisterPreemption(n, std::move(help), std::move(f));
    (void)s;
  };
  price("last", "baseline: the last price", [] { return MakeLastValue(); });
  price("seasonal-day", "baseline: the price one day before the target time",
        [] { return MakeSeasonalNaive(24); });
  price("seasonal-week", "baseline: the price one week before the target time",
        [] { return MakeSeasonalNaive(24 * 7); });
  price("moving-average", "baseline: mean price of the last window",
        [o] { return MakeMovingAverage(o.moving_average_hours); });
  price("holt-winters", "additive Holt-Winters (damped trend, daily season) on hourly means", [o] {
    return MakeHoltWinters(
        {.season_hours = o.season_hours, .history_hours = o.holt_winters_history_hours});
  });
  price("xgb", "gradient-boosted trees (XGBoost): lag, rolling, calendar, cross-zone features",
        [o] { return MakeGbtPriceForecaster(o); });
  preempt("climatology", "baseline: the past rate of preemption within the horizon",
          [] { return MakeClimatology(false); });
  preempt("hourly-climatology", "baseline: that rate by hour of day",
          [] { return MakeClimatology(true); });
  preempt("km", "Kaplan-Meier survival of spot lifetimes given the current run's age",
          [] { return MakeKaplanMeierHazard(); });
  preempt("xgb-hazard",
          "gradient-boosted trees (XGBoost, logistic): run age, recent availability, calendar, "
          "cross-zone features",
          [o] { return MakeGbtPreemptionForecaster(o); });
}

}  // namespace spot::forecast
