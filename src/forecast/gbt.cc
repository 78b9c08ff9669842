#include "forecast/gbt.h"

#include <algorithm>
#include <cmath>
#include <optional>

#include "forecast/events.h"
#include "forecast/features.h"
#include "forecast/xgb_booster.h"

namespace spot::forecast {
namespace {

BoosterParams ParamsOf(const ModelOptions& o, const char* objective) {
  return {.objective = objective,
          .rounds = o.xgb_rounds,
          .max_depth = o.xgb_max_depth,
          .eta = o.xgb_eta,
          .threads = o.xgb_threads,
          .seed = o.xgb_seed};
}

// Origins t in [first, last] (inclusive), at most max_rows of them, evenly spaced.
std::vector<int64_t> Origins(int64_t first, int64_t last, int64_t max_rows) {
  std::vector<int64_t> out;
  if (last < first) return out;
  int64_t stride = std::max<int64_t>(1, (last - first + 1 + max_rows - 1) / max_rows);
  for (int64_t t = last; t >= first; t -= stride) out.push_back(t);
  std::reverse(out.begin(), out.end());
  return out;
}

class GbtPrice final : public PriceForecaster {
 public:
  explicit GbtPrice(ModelOptions o) : opt_(o) {}
  std::string_view name() const override { return "xgb"; }

  Status Fit(const HistoryView& h, const Target& t) override {
    auto p = h.price(t.zone);
    std::vector<float> rows, labels;
    // Origin o (view end) needs its target o - 1 + H inside the view.
    for (int64_t o : Origins(1, h.end() - t.horizon_ticks, opt_.xgb_max_rows)) {
      auto f = PriceFeatures(h.Truncate(o), t.zone, t.horizon_ticks);
      rows.insert(rows.end(), f.begin(), f.end());
      labels.push_back(LogRatio(p[o - 1 + t.horizon_ticks], p[o - 1]));
    }
    if (labels.size() < 20) return Status::Ok();  // too little history: predict the last price
    // Squared error: absolute error (what MASE scores) was 10x slower to train
    // in XGBoost 1.7 and no better on the shared records.
    BoosterParams params = ParamsOf(opt_, "reg:squarederror");
    params.base_score = 0;  // no change: the labels are log ratios around 0
    auto b = Booster::Train(rows, PriceFeatureNames().size(), labels, params);
    if (!b.ok()) return b.status().WithContext("xgb fit");
    booster_.emplace(std::move(b).value());
    rows_ = labels.size();
    return Status::Ok();
  }

  double Predict(const HistoryView& h, const Target& t) const override {
    double p0 = h.price(t.zone).back();
    if (!booster_) return p0;
    auto y = booster_->Predict(PriceFeatures(h, t.zone, t.horizon_ticks));
    return y.ok() ? p0 * std::exp(*y) : p0;
  }
  std::string Describe() const override {
    return std::to_string(rows_) + " rows, " + std::to_string(opt_.xgb_rounds) + " rounds, depth " +
           std::to_string(opt_.xgb_max_depth);
  }

 private:
  static float LogRatio(double a, double b) {
    return static_cast<float>(std::log(std::max(a, 1e-9) / std::max(b, 1e-9)));
  }
  ModelOptions opt_;
  std::optional<Booster> booster_;
  size_t rows_ = 0;
};

class GbtPreemption final : public PreemptionForecaster {
 public:
  explicit GbtPreemption(ModelOptions o) : opt_(o) {}
  std::string_view name() const override { return "xgb-hazard"; }

  Status Fit(const HistoryView& h, const Target& t) override {
    auto next = NextDownTicks(h, t.zone);
    std::vector<float> rows, labels;
    double events = 0;
    for (int64_t o : Origins(1, h.end() - t.horizon_ticks, 4 * opt_.xgb_max_rows)) {
      if (!h.Up(t.zone, o - 1)) continue;
      auto f = PreemptionFeatures(h.Truncate(o), t.zone);
      rows.insert(rows.end(), f.begin(), f.end());
      labels.push_back(EventWithin(next, o, t.horizon_ticks) ? 1.f : 0.f);
      events += labels.back();
      if (int64_t(labels.size()) >= opt_.xgb_max_rows) break;
    }
    base_ = (events + 0.5) / (double(labels.size()) + 1);
    if (events < 2 || double(labels.size()) - events < 2) return Status::Ok();
    BoosterParams params = ParamsOf(opt_, "binary:logistic");
    params.base_score = base_;
    params.min_child_weight = 5;  // events are few: no leaf for a handful of them
    auto b = Booster::Train(rows, PreemptionFeatureNames().size(), labels, params);
    if (!b.ok()) return b.status().WithContext("xgb-hazard fit");
    booster_.emplace(std::move(b).value());
    rows_ = labels.size();
    return Status::Ok();
  }

  double Probability(const HistoryView& h, const Target& t) const override {
    if (!booster_) return base_;
    auto y = booster_->Predict(PreemptionFeatures(h, t.zone));
    return y.ok() ? std::clamp(*y, 0.0, 1.0) : base_;
  }
  std::string Describe() const override {
    return std::to_string(rows_) + " rows, base rate " + std::to_string(base_);
  }

 private:
  ModelOptions opt_;
  std::optional<Booster> booster_;
  double base_ = 0.5;
  size_t rows_ = 0;
};

}  // namespace

std::unique_ptr<PriceForecaster> MakeGbtPriceForecaster(const ModelOptions& options) {
  return std::make_unique<GbtPrice>(options);
}
std::unique_ptr<PreemptionForecaster> MakeGbtPreemptionForecaster(const ModelOptions& options) {
  return std::make_unique<GbtPreemption>(options);
}

}  // namespace spot::forecast
