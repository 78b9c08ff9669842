#include "forecast/backtest.h"

#include <chrono>
#include <cmath>
#include <cstdio>
#include <random>

#include "forecast/baselines.h"
#include "forecast/events.h"

namespace spot::forecast {
namespace {

// The origins of one (zone, horizon) series and the scrambled panels of its
// guard origins.
struct Series {
  int zone = 0;
  double horizon_hours = 0;
  Target target;
  std::vector<int64_t> origins;
  std::vector<std::pair<size_t, Panel>> guards;  // (index into origins, scrambled panel)
};

std::string Fmt(const char* f, double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, f, v);
  return buf;
}

Status Validate(const Panel& panel, const BacktestOptions& o) {
  if (panel.ticks < 2 || panel.gap_seconds <= 0) {
    return InvalidArgumentError(panel.name + ": panel has no ticks");
  }
  if (o.step_hours <= 0 || o.refit_hours <= 0) {
    return InvalidArgumentError("backtest: step_hours and refit_hours must be > 0");
  }
  if (o.guard_origins < 1) {
    return InvalidArgumentError("backtest: guard_origins must be >= 1 (the look-ahead guard)");
  }
  for (double h : o.price_horizons_hours) {
    if (h <= 0) return InvalidArgumentError("backtest: horizons must be > 0");
  }
  for (double h : o.preemption_horizons_hours) {
    if (h <= 0) return InvalidArgumentError("backtest: horizons must be > 0");
  }
  return Status::Ok();
}

Series MakeSeries(const Panel& panel, int z, double horizon_h, bool need_up,
                  const BacktestOptions& o, uint64_t seed) {
  HistoryView all = HistoryView::Of(panel, panel.ticks);
  Series s{.zone = z,
           .horizon_hours = horizon_h,
           .target = {.zone = z, .horizon_ticks = all.Ticks(horizon_h)}};
  int64_t first = std::max<int64_t>(all.Ticks(o.min_warmup_hours),
                                    std::llround(o.warmup_fraction * double(panel.ticks)));
  for (int64_t t = std::max<int64_t>(1, first); t - 1 + s.target.horizon_ticks < panel.ticks;
       t += all.Ticks(o.step_hours)) {
    if (!need_up || all.Up(z, t - 1)) s.origins.push_back(t);
  }
  const size_t n = s.origins.size();
  for (int g = 0; g < o.guard_origins && n > 0; ++g) {
    size_t i = (2 * size_t(g) + 1) * n / (2 * size_t(o.guard_origins));
    s.guards.emplace_back(i, ScrambleFuture(panel, s.origins[i], seed + g));
  }
  return s;
}

// Runs one model over a series' origins: refits on schedule, predicts, and
// checks the guard origins. `predict(view)` gives the model's number.
template <typename FitFn, typename PredictFn>
Result<std::vector<double>> RunSeries(const Panel& panel, const Series& s, const BacktestOptions& o,
                                      const std::string& model, FitFn fit, PredictFn predict) {
  std::vector<double> out;
  out.reserve(s.origins.size());
  const int64_t refit = HistoryView::Of(panel, 1).Ticks(o.refit_hours);
  int64_t next_fit = -1;
  size_t guard = 0;
  for (size_t i = 0; i < s.origins.size(); ++i) {
    const int64_t t = s.origins[i];
    if (t >= next_fit) {
      Status st = fit(HistoryView::Of(panel, t));
      if (!st.ok()) return st.WithContext(model + " at tick " + std::to_string(t));
      next_fit = t + refit;
    }
    out.push_back(predict(HistoryView::Of(panel, t)));
    for (; guard < s.guards.size() && s.guards[guard].first == i; ++guard) {
      double again = predict(HistoryView::Of(s.guards[guard].second, t));
      if (again != out.back() && !(std::isnan(again) && std::isnan(out.back()))) {
        return FailedPreconditionError(
            "look-ahead: model '" + model + "' (zone " + panel.zones[s.zone] + ", horizon " +
            Fmt("%g", s.horizon_hours) + " h) changed its forecast at tick " + std::to_string(t) +
            " when only data after that tick was scrambled (" + Fmt("%g", out.back()) + " vs " +
            Fmt("%g", again) + "); it reads the future");
      }
    }
  }
  return out;
}

Status CheckPriceSkill(const PriceResult& r, const BacktestOptions& o) {
  const PriceMetrics& m = r.metrics;
  if (m.n < o.min_guard_points || !(m.naive_mae > 0) || !(m.mase < o.implausible_mase)) {
    return Status::Ok();
  }
  return FailedPreconditionError("implausible skill: model '" + r.model + "' (zone " + r.zone +
                                 ", horizon " + Fmt("%g", r.horizon_hours) + " h) has MASE " +
                                 Fmt("%.3f", m.mase) + " < " + Fmt("%g", o.implausible_mase) +
                                 "; its inputs likely hold the future (shifted data?)");
}

Status CheckPreemptionSkill(const PreemptionResult& r, const BacktestOptions& o) {
  const ProbabilityMetrics& m = r.metrics;
  if (m.n < o.min_guard_points || m.events < 5 || m.n - m.events < 5 ||
      !(m.bss > o.implausible_bss)) {
    return Status::Ok();
  }
  return FailedPreconditionError(
      "implausible skill: model '" + r.model + "' (zone " + r.zone + ", horizon " +
      Fmt("%g", r.horizon_hours) + " h) has Brier skill " + Fmt("%.3f", m.bss) + " > " +
      Fmt("%g", o.implausible_bss) + "; its inputs likely hold the future (shifted data?)");
}

class Runner {
 public:
  Runner(const Panel& p, const ForecasterRegistry& r, const BacktestOptions& o,
         const BacktestProgressFn& progress, int64_t total)
      : panel_(p), reg_(r), opt_(o), progress_(progress), total_(total) {}

  Status Prices(const std::vector<std::string>& models, BacktestReport* report) {
    for (int z = 0; z < panel_.num_zones(); ++z) {
      for (double h : opt_.price_horizons_hours) {
        Series s = MakeSeries(panel_, z, h, false, opt_, opt_.seed + 1000 * z);
        for (const std::string& name : models) {
          SPOT_ASSIGN_OR_RETURN(auto model, reg_.CreatePrice(name));
          auto pred = RunSeries(
              panel_, s, opt_, name, [&](const HistoryView& v) { return model->Fit(v, s.target); },
              [&](const HistoryView& v) { return model->Predict(v, s.target); });
          if (!pred.ok()) return pred.status();
          std::vector<PricePoint> pts;
          for (size_t i = 0; i < s.origins.size(); ++i) {
            const auto& p = panel_.price[z];
            int64_t t = s.origins[i];
            pts.push_back({(*pred)[i], p[t - 1 + s.target.horizon_ticks], p[t - 1]});
          }
          report->prices.push_back({name, panel_.zones[z], h, ScorePrices(pts)});
          SPOT_RETURN_IF_ERROR(CheckPriceSkill(report->prices.back(), opt_));
          Tick();
        }
      }
    }
    return Status::Ok();
  }

  Status Preemption(const std::vector<std::string>& models, BacktestReport* report) {
    for (int z = 0; z < panel_.num_zones(); ++z) {
      auto next = NextDownTicks(HistoryView::Of(panel_, panel_.ticks), z);
      for (double h : opt_.preemption_horizons_hours) {
        Series s = MakeSeries(panel_, z, h, true, opt_, opt_.seed + 1000 * z + 500);
        auto clim_model = MakeClimatology(false);
        SPOT_ASSIGN_OR_RETURN(auto clim, Probabilities(*clim_model, s));
        for (const std::string& name : models) {
          SPOT_ASSIGN_OR_RETURN(auto model, reg_.CreatePreemption(name));
          SPOT_ASSIGN_OR_RETURN(auto pred, Probabilities(*model, s));
          std::vector<ProbabilityPoint> pts;
          for (size_t i = 0; i < s.origins.size(); ++i) {
            pts.push_back(
                {pred[i], EventWithin(next, s.origins[i], s.target.horizon_ticks), clim[i]});
          }
          report->preemption.push_back({name, panel_.zones[z], h, ScoreProbabilities(pts)});
          SPOT_RETURN_IF_ERROR(CheckPreemptionSkill(report->preemption.back(), opt_));
          Tick();
        }
      }
    }
    return Status::Ok();
  }

 private:
  Result<std::vector<double>> Probabilities(PreemptionForecaster& m, const Series& s) {
    return RunSeries(
        panel_, s, opt_, std::string(m.name()),
        [&](const HistoryView& v) { return m.Fit(v, s.target); },
        [&](const HistoryView& v) { return m.Probability(v, s.target); });
  }
  void Tick() {
    if (progress_) progress_(++done_, total_);
  }

  const Panel& panel_;
  const ForecasterRegistry& reg_;
  const BacktestOptions& opt_;
  const BacktestProgressFn& progress_;
  int64_t total_, done_ = 0;
};

}  // namespace

int64_t BacktestSeriesCount(const Panel& panel, size_t price_models, size_t preemption_models,
                            const BacktestOptions& options) {
  size_t per_zone = 0;
  if (panel.has_prices()) per_zone += price_models * options.price_horizons_hours.size();
  if (panel.has_availability()) {
    per_zone += preemption_models * options.preemption_horizons_hours.size();
  }
  return panel.num_zones() * static_cast<int64_t>(per_zone);
}

Panel ScrambleFuture(const Panel& panel, int64_t from, uint64_t seed) {
  Panel p = panel;
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<double> scale(0.5, 2.0);
  std::uniform_int_distribution<int32_t> count(0, 2 * std::max(1, panel.min_count));
  for (auto& series : p.price) {
    for (int64_t t = from; t < p.ticks; ++t) series[t] *= scale(rng);
  }
  for (auto& series : p.available) {
    for (int64_t t = from; t < p.ticks; ++t) series[t] = count(rng);
  }
  return p;
}

Result<BacktestReport> RunBacktest(const Panel& panel, const ForecasterRegistry& registry,
                                   const std::vector<std::string>& price_models,
                                   const std::vector<std::string>& preemption_models,
                                   const BacktestOptions& options,
                                   const BacktestProgressFn& progress) {
  SPOT_RETURN_IF_ERROR(Validate(panel, options));
  auto begin = std::chrono::steady_clock::now();
  const int64_t total =
      BacktestSeriesCount(panel, price_models.size(), preemption_models.size(), options);
  BacktestReport report{.panel = panel.name};
  Runner run(panel, registry, options, progress, total);
  if (panel.has_prices() && !price_models.empty()) {
    SPOT_RETURN_IF_ERROR(run.Prices(price_models, &report).WithContext(panel.name));
  }
  if (panel.has_availability() && !preemption_models.empty()) {
    SPOT_RETURN_IF_ERROR(run.Preemption(preemption_models, &report).WithContext(panel.name));
  }
  report.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - begin).count();
  return report;
}

}  // namespace spot::forecast
