#include "apps/spot/forecast_report.h"

#include <fmt/format.h>

#include <cmath>
#include <map>
#include <nlohmann/json.hpp>

namespace spot::cli {
namespace {

using forecast::BacktestReport;
using nlohmann::ordered_json;

ordered_json Num(double v) { return std::isfinite(v) ? ordered_json(v) : ordered_json(nullptr); }

std::string F(double v, const char* spec = "{:.3f}") {
  return std::isfinite(v) ? fmt::format(fmt::runtime(spec), v) : "-";
}

bool IsPriceBaseline(const std::string& m) {
  return m == "last" || m == "seasonal-day" || m == "seasonal-week" || m == "moving-average";
}
bool IsPreemptionBaseline(const std::string& m) {
  return m == "climatology" || m == "hourly-climatology";
}

// Results of one (zone, horizon), keyed by model.
template <typename R>
std::map<std::pair<std::string, double>, std::map<std::string, const R*>> Group(
    const std::vector<R>& results) {
  std::map<std::pair<std::string, double>, std::map<std::string, const R*>> out;
  for (const R& r : results) out[{r.zone, r.horizon_hours}][r.model] = &r;
  return out;
}

// The best model and the best baseline of one (zone, horizon) by `score`
// (lower is better when `lower`); NaN scores never win.
template <typename R, typename Score, typename Baseline>
std::pair<std::pair<std::string, double>, std::pair<std::string, double>> Best(
    const std::map<std::string, const R*>& models, Score score, Baseline is_baseline, bool lower) {
  std::pair<std::string, double> model{"-", NAN}, base{"-", NAN};
  for (const auto& [name, r] : models) {
    double v = score(*r);
    auto& slot = is_baseline(name) ? base : model;
    if (std::isfinite(v) &&
        (!std::isfinite(slot.second) || (lower ? v < slot.second : v > slot.second))) {
      slot = {name, v};
    }
  }
  return {model, base};
}

std::string Verdict(double model, double base, bool lower) {
  if (!std::isfinite(model) || !std::isfinite(base)) return "-";
  return (lower ? model < base : model > base) ? "model wins" : "baseline wins";
}

std::string PriceSummary(const BacktestReport& rep) {
  std::string out = fmt::format("{:<22} {:>4} {:>5} {:<14} {:>6} {:<15} {:>6}  {}\n", "zone", "h",
                                "n", "best model", "MASE", "best baseline", "MASE", "verdict");
  for (const auto& [key, models] : Group(rep.prices)) {
    auto [m, b] = Best(
        models, [](const forecast::PriceResult& r) { return r.metrics.mase; }, IsPriceBaseline,
        true);
    out += fmt::format(
        "{:<22} {:>4g} {:>5} {:<14} {:>6} {:<15} {:>6}  {}\n", key.first, key.second,
        models.begin()->second->metrics.n, m.first, F(m.second), b.first, F(b.second),
        std::isfinite(b.second) ? Verdict(m.second, b.second, true) : "no price changes");
  }
  return out;
}

std::string PreemptionSummary(const BacktestReport& rep) {
  std::string out =
      fmt::format("{:<22} {:>4} {:>5} {:>6} {:<14} {:>7} {:<19} {:>7}  {}\n", "zone", "h", "n",
                  "events", "best model", "BSS", "best baseline", "BSS", "verdict");
  for (const auto& [key, models] : Group(rep.preemption)) {
    auto [m, b] = Best(
        models, [](const forecast::PreemptionResult& r) { return r.metrics.bss; },
        IsPreemptionBaseline, false);
    const auto& any = models.begin()->second->metrics;
    bool degenerate = any.events == 0 || any.events == any.n;
    out += fmt::format("{:<22} {:>4g} {:>5} {:>6} {:<14} {:>7} {:<19} {:>7}  {}\n", key.first,
                       key.second, any.n, any.events, m.first, F(m.second), b.first, F(b.second),
                       degenerate ? "all or no events" : Verdict(m.second, b.second, false));
  }
  return out;
}

}  // namespace

std::string RowsJson(const std::vector<ForecastRow>& rows) {
  ordered_json j = {{"rows", ordered_json::array()}};
  for (const ForecastRow& r : rows) {
    j["rows"].push_back({{"panel", r.panel},
                         {"zone", r.zone},
                         {"kind", r.kind},
                         {"model", r.model},
                         {"horizon_hours", r.horizon_hours},
                         {"value", Num(r.value)},
                         {"text", r.text}});
  }
  return j.dump(2) + "\n";
}

std::string RowsTable(const std::vector<ForecastRow>& rows, bool with_value) {
  std::string out = fmt::format("{:<18} {:<22} {:<10} {:<18} {:>5} {:>10}  {}\n", "panel", "zone",
                                "kind", "model", "h", with_value ? "value" : "", "");
  for (const ForecastRow& r : rows) {
    out += fmt::format("{:<18} {:<22} {:<10} {:<18} {:>5g} {:>10}  {}\n", r.panel, r.zone, r.kind,
                       r.model, r.horizon_hours, with_value ? F(r.value, "{:.4f}") : "", r.text);
  }
  return out;
}

std::string BacktestJson(const std::vector<BacktestReport>& reports) {
  ordered_json j = {{"panels", ordered_json::array()}};
  for (const BacktestReport& rep : reports) {
    ordered_json p = {{"name", rep.panel},
                      {"seconds", rep.seconds},
                      {"prices", ordered_json::array()},
                      {"preemption", ordered_json::array()}};
    for (const auto& r : rep.prices) {
      const auto& m = r.metrics;
      p["prices"].push_back({{"zone", r.zone},
                             {"horizon_hours", r.horizon_hours},
                             {"model", r.model},
                             {"n", m.n},
                             {"mae", Num(m.mae)},
                             {"mape", Num(m.mape)},
                             {"mase", Num(m.mase)},
                             {"directional", Num(m.directional)}});
    }
    for (const auto& r : rep.preemption) {
      const auto& m = r.metrics;
      ordered_json bins = ordered_json::array();
      for (const auto& b : m.calibration) {
        bins.push_back({{"lo", b.lo},
                        {"hi", b.hi},
                        {"n", b.n},
                        {"mean_p", b.mean_p},
                        {"observed", b.observed}});
      }
      p["preemption"].push_back({{"zone", r.zone},
                                 {"horizon_hours", r.horizon_hours},
                                 {"model", r.model},
                                 {"n", m.n},
                                 {"events", m.events},
                                 {"brier", Num(m.brier)},
                                 {"brier_climatology", Num(m.brier_climatology)},
                                 {"bss", Num(m.bss)},
                                 {"log_loss", Num(m.log_loss)},
                                 {"calibration", bins}});
    }
    j["panels"].push_back(std::move(p));
  }
  return j.dump(2) + "\n";
}

std::string BacktestTable(const std::vector<BacktestReport>& reports) {
  std::string out;
  for (const BacktestReport& rep : reports) {
    out += fmt::format("== {} ({:.1f} s)\n", rep.panel, rep.seconds);
    if (!rep.prices.empty()) {
      out += fmt::format("{:<22} {:>5} {:<15} {:>6} {:>9} {:>8} {:>7} {:>6}\n", "zone", "h",
                         "price model", "n", "MAE", "MAPE %", "MASE", "dir");
    }
    for (const auto& r : rep.prices) {
      const auto& m = r.metrics;
      out += fmt::format("{:<22} {:>5g} {:<15} {:>6} {:>9} {:>8} {:>7} {:>6}\n", r.zone,
                         r.horizon_hours, r.model, m.n, F(m.mae, "{:.5f}"), F(m.mape, "{:.2f}"),
                         F(m.mase), F(m.directional, "{:.2f}"));
    }
    if (!rep.preemption.empty()) {
      out += fmt::format("{:<22} {:>5} {:<19} {:>6} {:>6} {:>7} {:>7} {:>8}\n", "zone", "h",
                         "preemption model", "n", "events", "Brier", "BSS", "logloss");
    }
    for (const auto& r : rep.preemption) {
      const auto& m = r.metrics;
      out += fmt::format("{:<22} {:>5g} {:<19} {:>6} {:>6} {:>7} {:>7} {:>8}\n", r.zone,
                         r.horizon_hours, r.model, m.n, m.events, F(m.brier, "{:.4f}"), F(m.bss),
                         F(m.log_loss));
    }
    out += "\n";
  }
  return out + BacktestSummary(reports);
}

std::string BacktestSummary(const std::vector<BacktestReport>& reports) {
  std::string out;
  for (const BacktestReport& rep : reports) {
    out += fmt::format("summary: {}\n", rep.panel);
    if (!rep.prices.empty()) out += PriceSummary(rep);
    if (!rep.preemption.empty()) out += PreemptionSummary(rep);
    out += "\n";
  }
  return out;
}

}  // namespace spot::cli
