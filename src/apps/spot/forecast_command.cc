// `spot forecast`: price and preemption forecasts over recorded or synthetic markets.
//   spot forecast models             registered models, one a line, with help
//   spot forecast fit [flags]        fits every model on all the history; prints parameters
//   spot forecast predict [flags]    forecasts from the end of the history
//   spot forecast backtest [flags]   rolling-origin scores; --all DIR for every record
#include <fmt/format.h>

#include <CLI/CLI.hpp>

#include "apps/spot/commands.h"
#include "apps/spot/exit_code.h"
#include "apps/spot/forecast_data.h"
#include "apps/spot/forecast_report.h"
#include "apps/spot/name_list.h"
#include "core/file_io.h"
#include "core/progress.h"
#include "forecast/calibration_svg.h"
#include "forecast/registry.h"
#include "forecast/survival.h"

namespace spot::cli {
namespace {

using forecast::HistoryView;
using forecast::Panel;

int Fail(const Status& s) {
  fmt::print(stderr, "error: {}\n", s.message());
  return s.code() == StatusCode::kNotFound ? kExitBadInput : ExitCodeFor(s);
}

Result<std::vector<double>> Hours(const std::string& flag, const std::string& list) {
  std::vector<double> out;
  for (const std::string& s : SplitNames(list)) {
    size_t used = 0;
    double h = 0;
    try {
      h = std::stod(s, &used);
    } catch (const std::exception&) {
      used = 0;
    }
    if (used != s.size() || !(h > 0)) {
      return InvalidArgumentError(flag + ": '" + s + "' is not a positive number of hours");
    }
    out.push_back(h);
  }
  return out;
}

// Every named model exists (before any work starts).
Status CheckNames(const forecast::ForecasterRegistry& reg, const ForecastArgs& a) {
  for (const std::string& n : SplitNames(a.price_models)) {
    auto m = reg.CreatePrice(n);
    if (!m.ok()) return InvalidArgumentError("--price-models: " + m.status().message());
  }
  for (const std::string& n : SplitNames(a.preemption_models)) {
    auto m = reg.CreatePreemption(n);
    if (!m.ok()) return InvalidArgumentError("--preemption-models: " + m.status().message());
  }
  return Status::Ok();
}

Status Emit(const ForecastArgs& a, const std::string& text) {
  if (a.out.empty()) {
    fmt::print("{}", text);
    return Status::Ok();
  }
  Status s = WriteFileAtomically(a.out, text);
  return s.ok() ? s : InvalidArgumentError("--out " + a.out + ": " + s.message());
}

// fit / predict: every model, every zone, every horizon, on the whole history.
Result<std::vector<ForecastRow>> FitAll(const forecast::ForecasterRegistry& reg, const Panel& p,
                                        const ForecastArgs& a, bool predict) {
  SPOT_ASSIGN_OR_RETURN(auto ph, Hours("--price-horizons", a.price_horizons));
  SPOT_ASSIGN_OR_RETURN(auto qh, Hours("--preemption-horizons", a.preemption_horizons));
  std::vector<ForecastRow> rows;
  HistoryView v = HistoryView::Of(p, p.ticks);
  for (int z = 0; z < p.num_zones(); ++z) {
    for (const std::string& n :
         p.has_prices() ? SplitNames(a.price_models) : std::vector<std::string>{}) {
      for (double h : ph) {
        forecast::Target t{.zone = z, .horizon_ticks = v.Ticks(h)};
        SPOT_ASSIGN_OR_RETURN(auto m, reg.CreatePrice(n));
        SPOT_RETURN_IF_ERROR(m->Fit(v, t).WithContext(p.name + " " + p.zones[z]));
        rows.push_back({p.name, p.zones[z], "price", n, h, predict ? m->Predict(v, t) : NAN,
                        predict ? "" : m->Describe()});
      }
    }
    if (!p.has_availability()) continue;
    bool up = v.Up(z, p.ticks - 1);
    for (const std::string& n : SplitNames(a.preemption_models)) {
      for (double h : qh) {
        forecast::Target t{.zone = z, .horizon_ticks = v.Ticks(h)};
        SPOT_ASSIGN_OR_RETURN(auto m, reg.CreatePreemption(n));
        SPOT_RETURN_IF_ERROR(m->Fit(v, t).WithContext(p.name + " " + p.zones[z]));
        double prob = predict && up ? m->Probability(v, t) : NAN;
        rows.push_back({p.name, p.zones[z], "preemption", n, h, prob,
                        predict ? (up ? "" : "no capacity now") : m->Describe()});
      }
    }
    if (predict) {
      rows.push_back({p.name, p.zones[z], "lifetime", "km", 0,
                      forecast::ExpectedRemainingLifetimeHours(v, z),
                      up ? "expected remaining hours of the current run" : "no capacity now"});
    }
  }
  return rows;
}

Result<forecast::BacktestOptions> BacktestOptionsOf(const ForecastArgs& a) {
  forecast::BacktestOptions o;
  SPOT_ASSIGN_OR_RETURN(o.price_horizons_hours, Hours("--price-horizons", a.price_horizons));
  SPOT_ASSIGN_OR_RETURN(o.preemption_horizons_hours,
                        Hours("--preemption-horizons", a.preemption_horizons));
  o.step_hours = a.step_hours;
  o.refit_hours = a.refit_hours;
  return o;
}

Result<std::string> Backtest(const forecast::ForecasterRegistry& reg,
                             const std::vector<Panel>& panels, const ForecastArgs& a) {
  SPOT_ASSIGN_OR_RETURN(auto opt, BacktestOptionsOf(a));
  std::vector<forecast::BacktestReport> reports;
  for (const Panel& p : panels) {
    Progress bar(
        {.label = "backtest " + p.name,
         .total = forecast::BacktestSeriesCount(p, SplitNames(a.price_models).size(),
                                                SplitNames(a.preemption_models).size(), opt)});
    auto rep = forecast::RunBacktest(
        p, reg, SplitNames(a.price_models), SplitNames(a.preemption_models), opt,
        [&bar](int64_t done, int64_t total) { bar.Update(done, "series"); });
    if (!rep.ok()) return rep.status();
    bar.Finish(fmt::format("{:.1f} s", rep->seconds));
    reports.push_back(std::move(rep).value());
  }
  if (!a.svg.empty()) {
    std::vector<forecast::PreemptionResult> all;
    for (const auto& r : reports) all.insert(all.end(), r.preemption.begin(), r.preemption.end());
    Status w = WriteFileAtomically(
        a.svg, forecast::RenderCalibrationSvg(all, "Calibration of preemption forecasts"));
    if (!w.ok()) return InvalidArgumentError("--svg " + a.svg + ": " + w.message());
  }
  return a.format == "json" ? BacktestJson(reports) : BacktestTable(reports);
}

void AddDataFlags(CLI::App* c, ForecastArgs* a) {
  c->add_option("--trace", a->traces, "Availability JSON (repeatable: zones of one market)");
  c->add_option("--prices", a->prices, "Spot price change-point CSV");
  c->add_option("--tick-seconds", a->tick_seconds, "Tick of the price CSV's 'tick' column")
      ->check(CLI::NonNegativeNumber);
  c->add_option("--min-count", a->min_count, "A tick is up with at least this many instances")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  c->add_option("--seed", a->seed, "Seed of the synthetic market")->capture_default_str();
  c->add_option("--price-models", a->price_models, "Comma-separated price models")
      ->capture_default_str();
  c->add_option("--preemption-models", a->preemption_models, "Comma-separated preemption models")
      ->capture_default_str();
  c->add_option("--price-horizons", a->price_horizons, "Hours, comma-separated")
      ->capture_default_str();
  c->add_option("--preemption-horizons", a->preemption_horizons, "Hours, comma-separated")
      ->capture_default_str();
  c->add_option("--format", a->format, "Output: table or json")
      ->check(CLI::IsMember({"table", "json"}))
      ->capture_default_str();
  c->add_option("--out", a->out, "Write the output to this file instead of stdout");
  c->add_option("--threads", a->xgb_threads, "XGBoost threads")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
}

}  // namespace

CLI::App* AddForecastCommand(CLI::App& app, ForecastArgs* a) {
  CLI::App* f = app.add_subcommand("forecast",
                                   "Forecast spot prices and preemptions; backtest "
                                   "the models (see docs/forecast.md)");
  f->require_subcommand(1);
  CLI::App* models = f->add_subcommand("models", "List the registered models");
  models->add_flag("--params", a->params,
                   "Each model with its help and its parameters (a Markdown table: name, type, "
                   "default, bounds, meaning)");
  models->callback([a] { a->action = "models"; });
  CLI::App* fit = f->add_subcommand("fit", "Fit every model on the whole history");
  CLI::App* predict = f->add_subcommand("predict", "Forecast from the end of the history");
  CLI::App* bt = f->add_subcommand("backtest", "Rolling-origin backtest of the models");
  fit->callback([a] { a->action = "fit"; });
  predict->callback([a] { a->action = "predict"; });
  bt->callback([a] { a->action = "backtest"; });
  for (CLI::App* c : {fit, predict, bt}) AddDataFlags(c, a);
  bt->add_option("--all", a->all, "Every availability/preemption record under this directory");
  bt->add_option("--step-hours", a->step_hours, "Hours between forecast origins")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  bt->add_option("--refit-hours", a->refit_hours, "Refit the models every this many hours")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  bt->add_option("--svg", a->svg, "Write the calibration plot (SVG) to this file");
  return f;
}

int RunForecast(const ForecastArgs& a) {
  forecast::ForecasterRegistry reg;
  forecast::RegisterBuiltinForecasters(reg, {.xgb_threads = a.xgb_threads});
  if (a.action == "models" && a.params) {
    for (const auto& names : {reg.PriceNames(), reg.PreemptionNames()}) {
      for (const auto& n : names) {
        fmt::print("### `{}`\n\n{}\n\n{}\n", n, reg.Help(n), FieldsMarkdown(reg.Fields(n)));
      }
    }
    return kExitOk;
  }
  if (a.action == "models") {
    for (const auto& n : reg.PriceNames()) fmt::print("price       {:<19} {}\n", n, reg.Help(n));
    for (const auto& n : reg.PreemptionNames()) {
      fmt::print("preemption  {:<19} {}\n", n, reg.Help(n));
    }
    return kExitOk;
  }
  Status names = CheckNames(reg, a);
  if (!names.ok()) return Fail(names);
  auto panels = LoadForecastPanels({.traces = a.traces,
                                    .prices = a.prices,
                                    .tick_seconds = a.tick_seconds,
                                    .all = a.all,
                                    .min_count = a.min_count,
                                    .seed = a.seed});
  if (!panels.ok()) return Fail(panels.status());
  if (a.action == "backtest") {
    auto text = Backtest(reg, *panels, a);
    if (!text.ok()) return Fail(text.status());
    Status s = Emit(a, *text);
    return s.ok() ? kExitOk : Fail(s);
  }
  std::vector<ForecastRow> rows;
  for (const Panel& p : *panels) {
    auto r = FitAll(reg, p, a, a.action == "predict");
    if (!r.ok()) return Fail(r.status());
    rows.insert(rows.end(), r->begin(), r->end());
  }
  Status s = Emit(a, a.format == "json" ? RowsJson(rows) : RowsTable(rows, a.action == "predict"));
  return s.ok() ? kExitOk : Fail(s);
}

}  // namespace spot::cli
