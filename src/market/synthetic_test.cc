#include "market/synthetic.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <numeric>

#include "market/hazard.h"
#include "market/loaders.h"
#include "market/rng.h"

namespace spot::market {
namespace {

namespace fs = std::filesystem;

SyntheticModel LongRuns() {
  SyntheticModel m;
  m.name = "test";
  m.gap_seconds = 60;
  m.up = {std::log(3.0) - 0.32, 0.8, 100};     // mean 3 h
  m.down = {std::log(1.0) - 0.125, 0.5, 100};  // mean 1 h
  m.price = {true, 1.0, 0.9, 0.5, 0.6, 0.05};
  return m;
}

double MeanHours(const Trace& t, bool up) {
  std::vector<AvailabilityRun> runs = AvailabilityRuns(t);
  double sum = 0;
  int n = 0;
  for (size_t i = 1; i + 1 < runs.size(); ++i) {
    if (runs[i].up != up) continue;
    sum += static_cast<double>(runs[i].length) * t.gap_seconds / 3600;
    ++n;
  }
  return sum / n;
}

TEST(RngTest, FixedOutputForSeed) {
  Rng a(42), b(42), c(43);
  uint64_t first = a.Next();
  EXPECT_EQ(first, b.Next());
  EXPECT_NE(first, c.Next());
  double sum = 0;
  for (int i = 0; i < 100000; ++i) sum += a.Normal();
  EXPECT_NEAR(sum / 100000, 0, 0.02);
}

TEST(SyntheticTest, DeterministicForASeed) {
  SyntheticModel m = LongRuns();
  Trace a = GenerateSyntheticTrace(m, 5000, 7);
  Trace b = GenerateSyntheticTrace(m, 5000, 7);
  Trace c = GenerateSyntheticTrace(m, 5000, 8);
  EXPECT_EQ(a.available, b.available);
  EXPECT_EQ(a.price, b.price);
  EXPECT_NE(a.available, c.available);
  EXPECT_EQ(a.ticks(), 5000);
  EXPECT_EQ(a.price.size(), 5000u);
}

TEST(SyntheticTest, GeneratedStatisticsMatchTheModel) {
  SyntheticModel m = LongRuns();
  Trace t = GenerateSyntheticTrace(m, 2'000'000, 1);  // ~3.8 years of minutes, ~8000 cycles
  EXPECT_NEAR(m.ImpliedAvailability(), 0.75, 0.01);
  EXPECT_NEAR(AvailabilityFraction(t), m.ImpliedAvailability(), 0.02);
  EXPECT_NEAR(MeanHours(t, true), m.up.Mean(), 0.05 * m.up.Mean());
  EXPECT_NEAR(MeanHours(t, false), m.down.Mean(), 0.05 * m.down.Mean());
  for (double p : t.price) ASSERT_GT(p, 0);
}

TEST(SyntheticTest, RefitRecoversParameters) {
  SyntheticModel m = LongRuns();
  Trace t = GenerateSyntheticTrace(m, 2'000'000, 3);
  auto fit = FitSyntheticModel(t);
  ASSERT_TRUE(fit.ok()) << fit.status().ToString();
  EXPECT_NEAR(fit->up.sigma, m.up.sigma, 0.05);
  EXPECT_NEAR(fit->up.mu, m.up.mu, 0.05);
  EXPECT_NEAR(fit->down.sigma, m.down.sigma, 0.05);
  EXPECT_NEAR(fit->down.mu, m.down.mu, 0.05);
  EXPECT_NEAR(fit->availability_fraction, 0.75, 0.02);
  EXPECT_NEAR(fit->price.changes_per_hour, m.price.changes_per_hour, 0.05);
  EXPECT_NEAR(fit->price.level, m.price.level, 0.05);
  EXPECT_NEAR(fit->price.reversion, m.price.reversion, 0.1);
  EXPECT_NEAR(fit->price.volatility, m.price.volatility, 0.01);
}

TEST(SyntheticTest, FitRejectsBadInputAndHandlesOneState) {
  EXPECT_EQ(FitSyntheticModel(Trace{}).status().code(), StatusCode::kInvalidArgument);
  Trace always;
  always.gap_seconds = 60;
  always.available.assign(100, 1);
  auto fit = FitSyntheticModel(always);
  ASSERT_TRUE(fit.ok());
  EXPECT_EQ(fit->down.runs, 0);
  EXPECT_EQ(fit->ImpliedAvailability(), 1);
  Trace g = GenerateSyntheticTrace(*fit, 1000, 1);
  EXPECT_EQ(AvailabilityFraction(g), 1);
  EXPECT_EQ(FitSyntheticModel(always, {.min_count = 0}).status().code(),
            StatusCode::kInvalidArgument);
}

TEST(SyntheticTest, DefaultZonesWorkWithoutSharedData) {
  std::vector<SyntheticModel> models = DefaultSyntheticModels();
  ASSERT_EQ(models.size(), 5u);
  std::vector<Trace> zones = DefaultSyntheticZones();
  ASSERT_EQ(zones.size(), 5u);
  for (size_t i = 0; i < zones.size(); ++i) {
    const Trace& z = zones[i];
    EXPECT_EQ(z.ticks(), 20158);
    EXPECT_EQ(z.gap_seconds, 195);
    EXPECT_EQ(z.pool.cloud, "aws");
    EXPECT_EQ(z.pool.instance_type, "p3.2xlarge");
    ASSERT_TRUE(z.has_prices());
    EXPECT_LT(z.price.front(), kP3OnDemandUsdPerHour);
    EXPECT_NE(models[i].fitted_from.find("aws-v100-2023-02"), std::string::npos);
    // 45 days of one zone is only tens of cycles: a loose check.
    EXPECT_NEAR(AvailabilityFraction(z), models[i].ImpliedAvailability(), 0.2) << z.name;
  }
}

// Loads a default zone's source: the availability JSON with the p3 prices attached.
Result<Trace> LoadV100Zone(const std::string& zone) {
  fs::path data = SPOT_SOURCE_DIR "/../shared/data";
  SPOT_ASSIGN_OR_RETURN(
      Trace t, LoadAvailabilityJson(
                   (data / "availability/aws-v100-2023-02" / (zone + "_v100_1.json")).string()));
  SPOT_ASSIGN_OR_RETURN(
      PriceTable p,
      LoadPriceTable((data / "prices/aws_p3.2xlarge_spot_2023-02-15_2023-04-02.csv").string(),
                     195));
  SPOT_RETURN_IF_ERROR(AttachPrices(p, &t));
  return t;
}

// The built-in constants are exactly the fits of the real files they name.
TEST(SyntheticTest, DefaultFitsComeFromTheNamedFiles) {
  for (const SyntheticModel& d : DefaultSyntheticModels()) {
    auto t = LoadV100Zone(d.pool.zone);
    if (!t.ok()) GTEST_SKIP() << t.status().ToString();
    auto fit = FitSyntheticModel(*t);
    ASSERT_TRUE(fit.ok());
    EXPECT_NEAR(fit->up.mu, d.up.mu, 1e-5) << d.name;
    EXPECT_NEAR(fit->up.sigma, d.up.sigma, 1e-5) << d.name;
    EXPECT_EQ(fit->up.runs, d.up.runs) << d.name;
    EXPECT_NEAR(fit->down.mu, d.down.mu, 1e-5) << d.name;
    EXPECT_NEAR(fit->down.sigma, d.down.sigma, 1e-5) << d.name;
    EXPECT_EQ(fit->down.runs, d.down.runs) << d.name;
    EXPECT_NEAR(fit->availability_fraction, d.availability_fraction, 1e-5) << d.name;
    EXPECT_NEAR(fit->price.level, d.price.level, 1e-5) << d.name;
    EXPECT_NEAR(fit->price.changes_per_hour, d.price.changes_per_hour, 1e-5) << d.name;
    EXPECT_NEAR(fit->price.reversion, d.price.reversion, 1e-5) << d.name;
    EXPECT_NEAR(fit->price.volatility, d.price.volatility, 1e-5) << d.name;
  }
}

// The tool that produced default_fits.cc:
//   spot_market_test --gtest_also_run_disabled_tests --gtest_filter='*PrintDefaultFits'
TEST(SyntheticTest, DISABLED_PrintDefaultFits) {
  for (const char* zone : {"us-east-1a", "us-east-1d", "us-east-2a", "us-west-2a", "us-west-2b"}) {
    auto t = LoadV100Zone(zone);
    ASSERT_TRUE(t.ok()) << t.status().ToString();
    auto m = FitSyntheticModel(*t);
    ASSERT_TRUE(m.ok());
    std::printf(
        "    Zone(\"%s\", %.8f, {%.8f, %.8f, %lld}, {%.8f, %.8f, %lld},\n"
        "         {true, %.4f, %.8f, %.8f, %.8f, %.8f}),\n",
        zone, m->availability_fraction, m->up.mu, m->up.sigma, static_cast<long long>(m->up.runs),
        m->down.mu, m->down.sigma, static_cast<long long>(m->down.runs), m->price.initial,
        m->price.level, m->price.changes_per_hour, m->price.reversion, m->price.volatility);
    SurvivalCurve km = LifetimeSurvival(*t);
    std::printf("    // %s: KM median lifetime %.3f h, up mean %.3f h, down mean %.3f h\n", zone,
                km.MedianHours(), m->up.Mean(), m->down.Mean());
  }
}

}  // namespace
}  // namespace spot::market
