// Regression tests for defects the fuzzers of fuzz/ found in the market
// loaders (docs/fuzzing.md). Each input is the minimized one libFuzzer found.
#include <gtest/gtest.h>

#include <cmath>
#include <fstream>
#include <string>

#include "core/temp_dir.h"
#include "market/loaders.h"

namespace spot::market {
namespace {

class FuzzRegressionTest : public ::testing::Test {
 protected:
  std::string Write(const std::string& name, const std::string& text) {
    std::string path = (dir_.path() / name).string();
    std::ofstream(path, std::ios::binary) << text;
    return path;
  }
  TempDir dir_ = TempDir::Create("spot_market_fuzz_regression").value();
};

// catalog_csv_fuzzer: a memory size whose number is finite but overflows once
// scaled by its unit ("1e308 TiB" is 1.1e311 GB) was loaded as +Inf, where
// the loader promises finite numbers >= 0.
TEST_F(FuzzRegressionTest, CatalogMemoryThatOverflowsItsUnitIsAnError) {
  auto c = LoadCatalogCsv(Write("c.csv", "instance_type,region,memory\np3,us-east-1,1e308 TiB\n"));
  ASSERT_FALSE(c.ok());
  EXPECT_EQ(c.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(c.status().message().find("c.csv:2: memory: too large"), std::string::npos)
      << c.status().ToString();
  // The largest finite ones still load.
  auto ok = LoadCatalogCsv(Write("d.csv", "instance_type,region,memory\np3,us-east-1,1e300 TiB\n"));
  ASSERT_TRUE(ok.ok()) << ok.status().ToString();
  EXPECT_TRUE(std::isfinite(ok->front().memory_gb));
}

// price_csv_fuzzer's invariant (times finite): a tick that is a finite
// number but overflows once multiplied by the tick length became a change
// point at +Inf, and the table's start time -Inf.
TEST_F(FuzzRegressionTest, PriceTickThatOverflowsTheTickLengthIsAnError) {
  const std::string path = Write("p.csv",
                                 "tick,timestamp,availability_zone,spot_usd_per_hour\n"
                                 "1e308,2023-01-01 00:00:00,z,1\n");
  auto t = LoadPriceTable(path, 195);
  ASSERT_FALSE(t.ok());
  EXPECT_EQ(t.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(t.status().message().find("p.csv:2: tick: too large"), std::string::npos)
      << t.status().ToString();
  // Read by its timestamp instead (no tick length), the same file loads.
  auto by_time = LoadPriceTable(path);
  ASSERT_TRUE(by_time.ok()) << by_time.status().ToString();
  EXPECT_TRUE(std::isfinite(by_time->start_unix_s));
}

}  // namespace
}  // namespace spot::market
