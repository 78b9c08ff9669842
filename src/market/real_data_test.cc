// Loads every record of ../shared/data that market/ understands; skipped on a
// machine without the shared records.
#include <gtest/gtest.h>

#include <filesystem>

#include "market/hazard.h"
#include "market/loaders.h"

namespace spot::market {
namespace {

namespace fs = std::filesystem;

const fs::path kData = SPOT_SOURCE_DIR "/../shared/data";

std::vector<fs::path> Glob(const fs::path& dir, const std::string& ext) {
  std::vector<fs::path> out;
  if (!fs::exists(dir)) return out;
  for (const auto& e : fs::recursive_directory_iterator(dir)) {
    if (e.is_regular_file() && e.path().extension() == ext) out.push_back(e.path());
  }
  std::sort(out.begin(), out.end());
  return out;
}

TEST(RealDataTest, EveryAvailabilityAndPreemptionJsonLoads) {
  std::vector<fs::path> files = Glob(kData / "availability", ".json");
  for (const fs::path& p : Glob(kData / "preemption", ".json")) files.push_back(p);
  if (files.empty()) GTEST_SKIP() << "no shared data at " << kData;
  EXPECT_EQ(files.size(), 28u);
  for (const fs::path& p : files) {
    auto t = LoadAvailabilityJson(p.string());
    ASSERT_TRUE(t.ok()) << t.status().ToString();
    EXPECT_GT(t->ticks(), 1000) << p;
    EXPECT_FALSE(t->pool.zone.empty()) << p;
    EXPECT_FALSE(t->pool.cloud.empty()) << p;
    if (t->has_prices()) {
      EXPECT_EQ(t->price.size(), t->available.size());
    }
  }
}

TEST(RealDataTest, EveryPriceCsvLoads) {
  std::vector<fs::path> files = Glob(kData / "prices", ".csv");
  if (files.empty()) GTEST_SKIP() << "no shared data at " << kData;
  int loaded = 0;
  for (const fs::path& p : files) {
    // The snapshot index lists dates, not prices.
    if (p.filename().string().ends_with("_index.csv")) continue;
    auto t = LoadPriceTable(p.string());
    ASSERT_TRUE(t.ok()) << t.status().ToString();
    EXPECT_FALSE(t->series.empty());
    ++loaded;
  }
  EXPECT_EQ(loaded, 3);
}

TEST(RealDataTest, CatalogsLoad) {
  for (const char* name :
       {"aws_gpu_ondemand_catalog_2026-01.csv", "gcp_machine_catalog_2026-07-30.csv"}) {
    fs::path p = kData / "catalog" / name;
    if (!fs::exists(p)) GTEST_SKIP() << "no " << p;
    auto c = LoadCatalogCsv(p.string());
    ASSERT_TRUE(c.ok()) << c.status().ToString();
    EXPECT_GT(c->size(), 1000u);
  }
}

TEST(RealDataTest, P3PricesAttachToTheV100Zones) {
  fs::path prices = kData / "prices/aws_p3.2xlarge_spot_2023-02-15_2023-04-02.csv";
  fs::path avail = kData / "availability/aws-v100-2023-02/us-east-1a_v100_1.json";
  if (!fs::exists(prices) || !fs::exists(avail)) GTEST_SKIP() << "no shared data";
  auto table = LoadPriceTable(prices.string(), 195);
  ASSERT_TRUE(table.ok()) << table.status().ToString();
  EXPECT_EQ(table->series.size(), 5u);
  auto t = LoadAvailabilityJson(avail.string());
  ASSERT_TRUE(t.ok());
  ASSERT_TRUE(AttachPrices(*table, &*t).ok());
  EXPECT_EQ(t->price.front(), 1.6703);
  EXPECT_EQ(t->start_unix_s, 1676498896);  // 2023-02-15 22:08:16 UTC
  // Published range: availability 12%..94% of ticks, lifetimes heavy-tailed.
  double median = LifetimeSurvival(*t).MedianHours();
  EXPECT_GT(median, 0.05);
  EXPECT_LT(median, 24);
}

}  // namespace
}  // namespace spot::market
