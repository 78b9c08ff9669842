// The rolling-origin harness, and its look-ahead guards: a model that reads
// past its view, or is fed data shifted from the future, must be refused.
#include "forecast/backtest.h"

#include <gtest/gtest.h>

#include <cmath>

#include "forecast/baselines.h"
#include "forecast/calibration_svg.h"
#include "forecast/test_panels.h"

namespace spot::forecast {
namespace {

using testing::SyntheticPanel;

BacktestOptions Fast() {
  return {.price_horizons_hours = {1, 6},
          .preemption_horizons_hours = {1, 6},
          .step_hours = 3,
          .refit_hours = 48};
}

ForecasterRegistry Builtins() {
  ForecasterRegistry r;
  RegisterBuiltinForecasters(r, {.xgb_rounds = 20, .xgb_max_rows = 600});
  return r;
}

// Reads the price at its target through the span's data pointer, past the
// view's end (what an off-by-horizon bug in feature code does).
class PeekingPrice final : public PriceForecaster {
 public:
  std::string_view name() const override { return "peek"; }
  double Predict(const HistoryView& h, const Target& t) const override {
    return h.price(t.zone).data()[h.end() - 1 + t.horizon_ticks];
  }
};

class PeekingPreemption final : public PreemptionForecaster {
 public:
  std::string_view name() const override { return "peek-up"; }
  double Probability(const HistoryView& h, const Target& t) const override {
    const int32_t* a = h.available(t.zone).data();
    for (int64_t i = h.end(); i < h.end() + t.horizon_ticks; ++i) {
      if (a[i] < h.min_count()) return 1;
    }
    return 0;
  }
};

// Predicts zone 0 as zone 1's last price: honest, unless zone 1 is zone 0
// shifted from the future.
class OtherZoneLast final : public PriceForecaster {
 public:
  std::string_view name() const override { return "other-zone"; }
  double Predict(const HistoryView& h, const Target& t) const override {
    return h.price(1 - t.zone).back();
  }
};

ForecasterRegistry WithCheaters() {
  ForecasterRegistry r = Builtins();
  EXPECT_TRUE(r.RegisterPrice("peek", "", [] { return std::make_unique<PeekingPrice>(); }).ok());
  EXPECT_TRUE(r.RegisterPreemption("peek-up", "", [] {
                 return std::make_unique<PeekingPreemption>();
               }).ok());
  EXPECT_TRUE(
      r.RegisterPrice("other-zone", "", [] { return std::make_unique<OtherZoneLast>(); }).ok());
  return r;
}

// Zone 1 := zone 0 shifted `shift` ticks from the future (a misaligned join).
Panel ShiftedPanel(int64_t shift) {
  Panel p = SyntheticPanel(2, 8);
  for (int64_t t = 0; t < p.ticks; ++t) {
    int64_t src = std::min(t + shift, p.ticks - 1);
    p.price[1][t] = p.price[0][src];
    p.available[1][t] = p.available[0][src];
  }
  return p;
}

TEST(Backtest, HonestModelsOnTheSyntheticMarket) {
  Panel p = SyntheticPanel(2, 8);
  ForecasterRegistry r = Builtins();
  int64_t calls = 0;
  auto rep = RunBacktest(p, r, r.PriceNames(), r.PreemptionNames(), Fast(),
                         [&](int64_t done, int64_t total) {
                           ++calls;
                           EXPECT_LE(done, total);
                         });
  ASSERT_TRUE(rep.ok()) << rep.status().ToString();
  EXPECT_EQ(rep->prices.size(), 2u * 2 * 6);
  EXPECT_EQ(rep->preemption.size(), 2u * 2 * 4);
  EXPECT_EQ(calls, 2 * 2 * 10);
  for (const auto& x : rep->prices) {
    EXPECT_GT(x.metrics.n, 10) << x.model;
    EXPECT_TRUE(std::isfinite(x.metrics.mae)) << x.model;
    if (x.model == "last") {
      EXPECT_NEAR(x.metrics.mase, 1.0, 1e-12);
    }
  }
  for (const auto& x : rep->preemption) {
    EXPECT_GT(x.metrics.n, 5) << x.model;
    if (x.model == "climatology") {
      EXPECT_NEAR(x.metrics.bss, 0.0, 1e-12);
    }
  }
  std::string svg = RenderCalibrationSvg(rep->preemption, "synthetic");
  EXPECT_EQ(svg.rfind("<svg", 0), 0u);
  EXPECT_NE(svg.find("xgb-hazard"), std::string::npos);
}

TEST(Backtest, SameResultsTwice) {
  Panel p = SyntheticPanel(1, 6);
  ForecasterRegistry r = Builtins();
  auto a = RunBacktest(p, r, {"xgb"}, {"xgb-hazard"}, Fast());
  auto b = RunBacktest(p, r, {"xgb"}, {"xgb-hazard"}, Fast());
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_EQ(a->prices[0].metrics.mae, b->prices[0].metrics.mae);
  EXPECT_EQ(a->preemption[0].metrics.brier, b->preemption[0].metrics.brier);
}

// The scrambled-future guard alone (skill guard off) catches a model that
// reads past its view; it would otherwise score a perfect MASE of 0.
TEST(LookAheadGuard, ModelReadingPastItsViewIsRefused) {
  Panel p = SyntheticPanel(2, 8);
  ForecasterRegistry r = WithCheaters();
  BacktestOptions o = Fast();
  o.implausible_mase = 0;
  o.implausible_bss = 2;
  auto rep = RunBacktest(p, r, {"last", "peek"}, {}, o);
  ASSERT_FALSE(rep.ok());
  EXPECT_EQ(rep.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(rep.status().message().find("look-ahead: model 'peek'"), std::string::npos)
      << rep.status().message();
  auto pre = RunBacktest(p, r, {}, {"climatology", "peek-up"}, o);
  ASSERT_FALSE(pre.ok());
  EXPECT_NE(pre.status().message().find("look-ahead: model 'peek-up'"), std::string::npos)
      << pre.status().message();
}

// A model fed shifted future data reads only its view, so scrambling cannot
// see it; its skill is implausible, and the harness refuses it.
TEST(LookAheadGuard, ShiftedFutureDataIsRefused) {
  const int64_t six_hours = 6 * 3600 / 195 + 1;  // HistoryView::Ticks(6) rounds 110.8 to 111
  Panel p = ShiftedPanel(six_hours - 1);  // zone 1 at t holds zone 0 at t + H - 1: the target
  ForecasterRegistry r = WithCheaters();
  BacktestOptions o = Fast();
  o.price_horizons_hours = {6};
  auto rep = RunBacktest(p, r, {"other-zone"}, {}, o);
  ASSERT_FALSE(rep.ok());
  EXPECT_EQ(rep.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(rep.status().message().find("implausible skill: model 'other-zone'"), std::string::npos)
      << rep.status().message();
  // Without the guard, the leak would have shown as a near-perfect score.
  o.implausible_mase = 0;
  auto leaked = RunBacktest(p, r, {"other-zone"}, {}, o);
  ASSERT_TRUE(leaked.ok());
  EXPECT_LT(leaked->prices[0].metrics.mase, 0.05);
  // On honest data the same cross-zone model is accepted.
  EXPECT_TRUE(RunBacktest(SyntheticPanel(2, 8), r, {"other-zone"}, {}, Fast()).ok());
}

TEST(LookAheadGuard, ShiftedAvailabilityIsRefused) {
  Panel p = ShiftedPanel(3600 / 195);  // zone 1 leads zone 0 by an hour
  ForecasterRegistry r = Builtins();
  BacktestOptions o = Fast();
  o.step_hours = 0.5;
  o.preemption_horizons_hours = {1};
  auto rep = RunBacktest(p, r, {}, {"xgb-hazard"}, o);
  ASSERT_FALSE(rep.ok());
  EXPECT_NE(rep.status().message().find("implausible skill: model 'xgb-hazard'"), std::string::npos)
      << rep.status().message();
}

TEST(Backtest, BadOptionsAndNames) {
  Panel p = SyntheticPanel(1, 4);
  ForecasterRegistry r = Builtins();
  BacktestOptions o = Fast();
  o.guard_origins = 0;
  EXPECT_EQ(RunBacktest(p, r, {"last"}, {}, o).status().code(), StatusCode::kInvalidArgument);
  auto bad = RunBacktest(p, r, {"prophet"}, {}, Fast());
  EXPECT_EQ(bad.status().code(), StatusCode::kNotFound);
  EXPECT_NE(bad.status().message().find("prophet"), std::string::npos);
}

}  // namespace
}  // namespace spot::forecast
