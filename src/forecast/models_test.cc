// Each model on series whose answer is known, the registry, and the views.
#include <gtest/gtest.h>

#include <cmath>

#include "forecast/baselines.h"
#include "forecast/features.h"
#include "forecast/holt_winters.h"
#include "forecast/registry.h"
#include "forecast/survival.h"
#include "forecast/test_panels.h"

namespace spot::forecast {
namespace {

using testing::HandPanel;
using testing::SyntheticPanel;

// 10 days of hourly prices: 1 + 0.5 at hours 12..17 of each day.
std::vector<double> DailyPattern(int days) {
  std::vector<double> p;
  for (int t = 0; t < 24 * days; ++t) p.push_back(t % 24 >= 12 && t % 24 < 18 ? 1.5 : 1.0);
  return p;
}

TEST(Registry, BuiltinsByNameAndUnknownNamesTheKnown) {
  ForecasterRegistry r;
  RegisterBuiltinForecasters(r);
  EXPECT_EQ(r.PriceNames(), (std::vector<std::string>{"holt-winters", "last", "moving-average",
                                                      "seasonal-day", "seasonal-week", "xgb"}));
  EXPECT_EQ(r.PreemptionNames(),
            (std::vector<std::string>{"climatology", "hourly-climatology", "km", "xgb-hazard"}));
  for (const auto& n : r.PriceNames()) EXPECT_EQ((*r.CreatePrice(n))->name(), n);
  for (const auto& n : r.PreemptionNames()) EXPECT_EQ((*r.CreatePreemption(n))->name(), n);
  auto bad = r.CreatePrice("prophet");
  EXPECT_EQ(bad.status().code(), StatusCode::kNotFound);
  EXPECT_NE(bad.status().message().find("known: holt-winters"), std::string::npos);
  EXPECT_FALSE(r.RegisterPrice("km", "", [] { return MakeLastValue(); }).ok());
}

TEST(HistoryView, EndsAtTheOrigin) {
  Panel p = HandPanel({1, 2, 3, 4, 5}, {1, 1, 0, 1, 1});
  HistoryView v = HistoryView::Of(p, 3);
  EXPECT_EQ(v.price(0).size(), 3u);
  EXPECT_EQ(v.price(0).back(), 3);
  EXPECT_EQ(v.available(0).size(), 3u);
  EXPECT_EQ(CurrentRunTicks(v, 0), 0);
  EXPECT_EQ(CurrentRunTicks(HistoryView::Of(p, 5), 0), 2);
  EXPECT_EQ(v.Truncate(2).price(0).size(), 2u);
}

TEST(Baselines, KnownAnswers) {
  Panel p = HandPanel(DailyPattern(10));
  HistoryView v = HistoryView::Of(p, 24 * 8 + 10);  // last known hour: 9
  Target t{.zone = 0, .horizon_ticks = 4};          // target hour 13: 1.5
  EXPECT_EQ(MakeLastValue()->Predict(v, t), 1.0);
  EXPECT_EQ(MakeSeasonalNaive(24)->Predict(v, t), 1.5);
  EXPECT_EQ(MakeSeasonalNaive(24 * 7)->Predict(v, t), 1.5);
  // Mean of hours 4..9: all 1.
  EXPECT_EQ(MakeMovingAverage(6)->Predict(v, t), 1.0);
  // Too little history for a week: the last value.
  EXPECT_EQ(MakeSeasonalNaive(24 * 7)->Predict(HistoryView::Of(p, 30), t), 1.0);
}

TEST(HoltWinters, LearnsADailyPattern) {
  Panel p = HandPanel(DailyPattern(10));
  auto hw = MakeHoltWinters();
  HistoryView v = HistoryView::Of(p, 24 * 8 + 10);
  Target t{.zone = 0, .horizon_ticks = 4};
  ASSERT_TRUE(hw->Fit(v, t).ok());
  EXPECT_NEAR(hw->Predict(v, t), 1.5, 0.05) << hw->Describe();
  EXPECT_NEAR(hw->Predict(v, {.zone = 0, .horizon_ticks = 12}), 1.0, 0.05);
  // The filter on a constant series forecasts the constant.
  std::vector<double> y(48, 5.0);
  auto f = HoltWintersForecast(y, 24, {.alpha = 0.5, .beta = 0.5, .gamma = 0.1, .phi = 0.9}, 2);
  ASSERT_EQ(f.size(), 2u);
  EXPECT_NEAR(f[1], 5, 1e-9);
  EXPECT_TRUE(HoltWintersForecast(std::vector<double>(47, 5.0), 24, {}, 1).empty());
}

TEST(Survival, AgeMattersAndLifetimeIsPositive) {
  // Runs of 2 h and 10 h alternate with 1 h outages: a run aged 3 h is a long one.
  std::vector<int32_t> a;
  for (int k = 0; k < 20; ++k) {
    for (int i = 0; i < (k % 2 ? 10 : 2); ++i) a.push_back(1);
    a.push_back(0);
  }
  Panel p = HandPanel({}, a);
  HistoryView v = HistoryView::Of(p, p.ticks);
  SurvivalModel m = SurvivalModel::FromHistory(v, 0);
  EXPECT_NEAR(m.EndProbability(0, 2.5), 0.5, 1e-9);  // half the runs end at 2 h
  EXPECT_NEAR(m.EndProbability(3, 2), 0.0, 1e-9);    // a 10 h run ends at 10 h
  EXPECT_NEAR(m.EndProbability(3, 8), 1.0, 1e-9);
  EXPECT_NEAR(m.ExpectedRemainingHours(3), 7, 1e-9);
  EXPECT_GT(ExpectedRemainingLifetimeHours(v, 0), 0);
}

TEST(Climatology, RateOfEventsAmongUpOrigins) {
  // Up 3 ticks, down 1, repeated: from an up origin, 1 h ahead, 1 of 3 is an event.
  std::vector<int32_t> a;
  for (int k = 0; k < 50; ++k) a.insert(a.end(), {1, 1, 1, 0});
  Panel p = HandPanel({}, a);
  HistoryView v = HistoryView::Of(p, p.ticks);
  auto c = MakeClimatology(false);
  ASSERT_TRUE(c->Fit(v, {.zone = 0, .horizon_ticks = 1}).ok());
  EXPECT_NEAR(c->Probability(v, {.zone = 0, .horizon_ticks = 1}), 1.0 / 3, 0.01);
}

TEST(Gbt, DeterministicWithFixedSeedAndThreads) {
  Panel p = SyntheticPanel(2, 6);
  ForecasterRegistry r;
  RegisterBuiltinForecasters(r, {.xgb_rounds = 20, .xgb_max_rows = 800});
  HistoryView v = HistoryView::Of(p, p.ticks - 200);
  Target t{.zone = 0, .horizon_ticks = 18};
  auto a = std::move(r.CreatePrice("xgb")).value();
  auto b = std::move(r.CreatePrice("xgb")).value();
  ASSERT_TRUE(a->Fit(v, t).ok());
  ASSERT_TRUE(b->Fit(v, t).ok());
  EXPECT_EQ(a->Predict(v, t), b->Predict(v, t));  // fixed seed, one thread: bitwise equal
  EXPECT_GT(a->Predict(v, t), 0);
  EXPECT_EQ(PriceFeatures(v, 0, 18).size(), PriceFeatureNames().size());
  EXPECT_EQ(PreemptionFeatures(v, 0).size(), PreemptionFeatureNames().size());
  auto h = std::move(r.CreatePreemption("xgb-hazard")).value();
  ASSERT_TRUE(h->Fit(v, t).ok());
  double prob = h->Probability(v, t);
  EXPECT_GE(prob, 0);
  EXPECT_LE(prob, 1);
  EXPECT_NE(h->Describe().find("rows"), std::string::npos);
}

}  // namespace
}  // namespace spot::forecast
