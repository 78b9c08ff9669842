// Backtests on the shared records (../shared/data): skipped when absent.
#include <gtest/gtest.h>

#include <filesystem>

#include "forecast/backtest.h"
#include "market/loaders.h"

namespace spot::forecast {
namespace {

namespace fs = std::filesystem;

fs::path DataDir() { return fs::path(SPOT_SOURCE_DIR) / ".." / "shared" / "data"; }

TEST(RealData, V100ZoneBacktestRunsAndPassesTheGuards) {
  fs::path f = DataDir() / "availability" / "aws-v100-2023-02" / "us-east-1a_v100_1.json";
  fs::path prices = DataDir() / "prices" / "aws_p3.2xlarge_spot_2023-02-15_2023-04-02.csv";
  if (!fs::exists(f) || !fs::exists(prices)) {
    GTEST_SKIP() << "shared records not found at " << DataDir() << " (../shared/data)";
  }
  auto trace = market::LoadAvailabilityJson(f.string());
  ASSERT_TRUE(trace.ok()) << trace.status().ToString();
  auto table = market::LoadPriceTable(prices.string(), 195);
  ASSERT_TRUE(table.ok()) << table.status().ToString();
  ASSERT_TRUE(market::AttachPrices(*table, &*trace).ok());
  auto panel = PanelFromTraces("aws-v100-2023-02", {*trace});
  ASSERT_TRUE(panel.ok());
  ForecasterRegistry r;
  RegisterBuiltinForecasters(r, {.xgb_rounds = 20, .xgb_max_rows = 600});
  BacktestOptions o{.price_horizons_hours = {6},
                    .preemption_horizons_hours = {1},
                    .step_hours = 6,
                    .refit_hours = 240};
  auto rep = RunBacktest(*panel, r, {"last", "holt-winters"}, {"climatology", "km"}, o);
  ASSERT_TRUE(rep.ok()) << rep.status().ToString();
  ASSERT_EQ(rep->prices.size(), 2u);
  EXPECT_GT(rep->prices[0].metrics.n, 100);
  EXPECT_GT(rep->preemption[0].metrics.events, 5);
}

}  // namespace
}  // namespace spot::forecast
