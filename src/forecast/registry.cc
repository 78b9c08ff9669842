#include "forecast/registry.h"

#include "forecast/baselines.h"
#include "forecast/gbt.h"
#include "forecast/holt_winters.h"
#include "forecast/survival.h"

namespace spot::forecast {
namespace {

void DeclareMovingAverage(ModelOptions& o, FieldVisitor& v) {
  v.Double("hours", &o.moving_average_hours, {.min = 0, .min_exclusive = true},
           "window of the mean");
}

void DeclareHoltWinters(ModelOptions& o, FieldVisitor& v) {
  v.Double("season_hours", &o.season_hours, {.min = 2}, "season length");
  v.Double("history_hours", &o.holt_winters_history_hours, {.min = 0, .min_exclusive = true},
           "hours of history the filter runs over");
}

void DeclareXgb(ModelOptions& o, FieldVisitor& v) {
  int64_t rounds = o.xgb_rounds, depth = o.xgb_max_depth, threads = o.xgb_threads;
  int64_t seed = static_cast<int64_t>(o.xgb_seed);
  v.Int("rounds", &rounds, {.min = 1, .max = 10000}, "boosting rounds");
  v.Int("max_depth", &depth, {.min = 1, .max = 16}, "depth of each tree");
  v.Double("eta", &o.xgb_eta, {.min = 0, .max = 1, .min_exclusive = true}, "learning rate");
  v.Int("threads", &threads, {.min = 1, .max = 256},
        "XGBoost threads (explicit: results do not depend on the machine)");
  v.Int("seed", &seed, {.min = 0}, "random seed");
  v.Int("max_rows", &o.xgb_max_rows, {.min = 10}, "training rows per fit (evenly spaced origins)");
  o.xgb_rounds = static_cast<int>(rounds);
  o.xgb_max_depth = static_cast<int>(depth);
  o.xgb_threads = static_cast<int>(threads);
  o.xgb_seed = static_cast<uint64_t>(seed);
}

}  // namespace

Status ForecasterRegistry::CheckNewName(const std::string& name) const {
  if (name.empty()) return InvalidArgumentError("model name is empty");
  if (price_.Has(name) || preempt_.Has(name)) {
    return InvalidArgumentError("model '" + name + "' registered twice");
  }
  return Status::Ok();
}

Status ForecasterRegistry::RegisterPrice(const std::string& name, std::string help,
                                         PriceFactory f) {
  SPOT_RETURN_IF_ERROR(CheckNewName(name));
  return price_.Register(name, std::move(help), std::move(f));
}

Status ForecasterRegistry::RegisterPreemption(const std::string& name, std::string help,
                                              PreemptionFactory f) {
  SPOT_RETURN_IF_ERROR(CheckNewName(name));
  return preempt_.Register(name, std::move(help), std::move(f));
}

const std::string& ForecasterRegistry::Help(const std::string& name) const {
  return price_.Has(name) ? price_.Help(name) : preempt_.Help(name);
}

std::vector<FieldInfo> ForecasterRegistry::Fields(const std::string& name) const {
  return price_.Has(name) ? price_.Fields(name) : preempt_.Fields(name);
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
  using Declare = std::function<void(ModelOptions&, FieldVisitor&)>;
  using MakePrice = std::function<std::unique_ptr<PriceForecaster>(const ModelOptions&)>;
  auto price_with = [&r, &o](const std::string& n, std::string help, Declare d, MakePrice f) {
    Status s = r.RegisterPrice<ModelOptions>(n, std::move(help), std::move(d), std::move(f), o);
    (void)s;
  };
  price_with("moving-average", "baseline: mean price of the last window", DeclareMovingAverage,
             [](const ModelOptions& m) { return MakeMovingAverage(m.moving_average_hours); });
  price_with("holt-winters", "additive Holt-Winters (damped trend, daily season) on hourly means",
             DeclareHoltWinters, [](const ModelOptions& m) {
               return MakeHoltWinters(
                   {.season_hours = m.season_hours, .history_hours = m.holt_winters_history_hours});
             });
  price_with("xgb", "gradient-boosted trees (XGBoost): lag, rolling, calendar, cross-zone features",
             DeclareXgb, [](const ModelOptions& m) { return MakeGbtPriceForecaster(m); });
  preempt("climatology", "baseline: the past rate of preemption within the horizon",
          [] { return MakeClimatology(false); });
  preempt("hourly-climatology", "baseline: that rate by hour of day",
          [] { return MakeClimatology(true); });
  preempt("km", "Kaplan-Meier survival of spot lifetimes given the current run's age",
          [] { return MakeKaplanMeierHazard(); });
  Status s = r.RegisterPreemption<ModelOptions>(
      "xgb-hazard",
      "gradient-boosted trees (XGBoost, logistic): run age, recent availability, calendar, "
      "cross-zone features",
      DeclareXgb, [](const ModelOptions& m) { return MakeGbtPreemptionForecaster(m); }, o);
  (void)s;
}

}  // namespace spot::forecast
