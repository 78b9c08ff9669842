// End-to-end tests of `spot forecast`: the real binary on small generated traces.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <random>

#include "apps/spot/e2e_support.h"

namespace spot {
namespace {

namespace fs = std::filesystem;
using testing::ProcessResult;

class ForecastCliTest : public testing::E2eTest {
 protected:
  // Six days of 10-minute ticks: up and down runs of random lengths, and a
  // price that jumps at random ticks (seeded: the same file every run).
  fs::path Trace(const std::string& stem, unsigned seed) {
    std::mt19937 rng(seed);
    std::uniform_int_distribution<int> run(1, 40), jump(0, 29);
    std::uniform_real_distribution<double> level(0.8, 1.4);
    std::string data, prices;
    bool up = true;
    double price = 1;
    for (int t = 0, left = run(rng); t < 6 * 144; ++t, --left) {
      if (left == 0) up = !up, left = up ? 3 * run(rng) : run(rng) / 4 + 1;
      if (jump(rng) == 0) price = level(rng);
      data += fmt::format("{}{}", t ? "," : "", up ? 1 : 0);
      prices += fmt::format("{}{:.3f}", t ? "," : "", price);
    }
    fs::path p = dir_ / (stem + ".json");
    std::ofstream(p) << R"({"metadata": {"gap_seconds": 600}, "data": [)" << data
                     << R"(], "prices": [)" << prices << "]}";
    return p;
  }
  ProcessResult Spot(std::vector<std::string> args) {
    args.insert(args.begin(), "forecast");
    return E2eTest::Spot(std::move(args), "out");
  }
};

TEST_F(ForecastCliTest, ListsModels) {
  ProcessResult r = Spot({"models"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  for (const char* m : {"last", "holt-winters", "xgb", "climatology", "km", "xgb-hazard"}) {
    EXPECT_NE(r.out.find(m), std::string::npos) << m;
  }
}

TEST_F(ForecastCliTest, BacktestJsonTableAndCalibrationSvg) {
  fs::path a = Trace("us-east-1a_v100_1", 1), b = Trace("us-east-1d_v100_1", 2);
  fs::path svg = dir_ / "cal.svg", out = dir_ / "bt.json";
  ProcessResult r = Spot({"backtest", "--trace", a.string(), "--trace", b.string(), "--step-hours",
                          "2", "--refit-hours", "48", "--format", "json", "--svg", svg.string(),
                          "--out", out.string()});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  std::ifstream in(out);
  auto j = nlohmann::json::parse(in);
  ASSERT_EQ(j["panels"].size(), 1u);
  const auto& p = j["panels"][0];
  EXPECT_EQ(p["prices"].size(), 2u * 3 * 6);
  EXPECT_EQ(p["preemption"].size(), 2u * 2 * 4);
  for (const char* k : {"mae", "mape", "mase", "directional"}) {
    EXPECT_TRUE(p["prices"][0].contains(k)) << k;
  }
  for (const char* k : {"brier", "bss", "log_loss", "calibration"}) {
    EXPECT_TRUE(p["preemption"][0].contains(k)) << k;
  }
  std::ifstream s(svg);
  std::string text((std::istreambuf_iterator<char>(s)), {});
  EXPECT_EQ(text.rfind("<svg", 0), 0u);
  r = Spot({"backtest", "--trace", a.string(), "--price-models", "last,holt-winters",
            "--preemption-models", "climatology,km", "--step-hours", "3"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("summary: traces"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("MASE"), std::string::npos);
}

TEST_F(ForecastCliTest, FitAndPredictJson) {
  fs::path a = Trace("us-east-1a_v100_1", 1);
  ProcessResult r = Spot({"predict", "--trace", a.string(), "--format", "json"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  auto j = nlohmann::json::parse(r.out);
  bool lifetime = false;
  for (const auto& row : j["rows"]) {
    if (row["kind"] == "price") {
      EXPECT_GT(row["value"].get<double>(), 0);
    }
    lifetime = lifetime || row["kind"] == "lifetime";
  }
  EXPECT_TRUE(lifetime);
  r = Spot({"fit", "--trace", a.string(), "--price-models", "holt-winters"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("alpha"), std::string::npos) << r.out;
}

TEST_F(ForecastCliTest, BadInputExitsTwoNamingTheCulprit) {
  ProcessResult r = Spot({"backtest", "--trace", (dir_ / "missing.json").string()});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("--trace"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("missing.json"), std::string::npos) << r.err;
  fs::path bad = dir_ / "z_v100_1.json";
  std::ofstream(bad) << R"({"metadata": {"gap_seconds": 600}, "data": [1, "x"]})";
  r = Spot({"predict", "--trace", bad.string()});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("z_v100_1.json"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("data[1]"), std::string::npos) << r.err;
  fs::path a = Trace("us-east-1a_v100_1", 1);
  r = Spot({"backtest", "--trace", a.string(), "--price-models", "last,prophet"});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("--price-models: unknown price model 'prophet'"), std::string::npos)
      << r.err;
  r = Spot({"backtest", "--trace", a.string(), "--price-horizons", "1,soon"});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("--price-horizons: 'soon'"), std::string::npos) << r.err;
  r = Spot({"backtest", "--all", (dir_ / "nowhere").string()});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("--all"), std::string::npos) << r.err;
  // Nothing half-written: a failed run leaves no output file.
  fs::path out = dir_ / "never.json";
  r = Spot(
      {"backtest", "--trace", a.string(), "--preemption-models", "nope", "--out", out.string()});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_FALSE(fs::exists(out));
}

}  // namespace
}  // namespace spot
