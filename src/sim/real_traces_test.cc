// Policies on the real records of ../shared/data (skipped when absent):
// the bound holds, nobody misses a feasible deadline, and ours beats UP on
// mean cost over the five aws-v100-2023-02 zones (the setting, fewer
// samples to keep the test quick; docs/benchmarks.md has the full run).
#include <gtest/gtest.h>

#include <filesystem>

#include "market/loaders.h"
#include "policy/registry.h"
#include "sim/evaluate.h"

namespace spot::sim {
namespace {

namespace fs = std::filesystem;
const fs::path kData = fs::path(SPOT_SOURCE_DIR) / ".." / "shared" / "data";

TEST(RealTraces, HazardUpBeatsUpOnV100Zones) {
  fs::path dir = kData / "availability" / "aws-v100-2023-02";
  if (!fs::exists(dir)) GTEST_SKIP() << dir << " not present";
  policy::PolicyRegistry reg;
  policy::RegisterBuiltinPolicies(reg);
  JobSpec job{.compute_hours = 48, .deadline_hours = 60, .changeover_hours = 0.2,
              .ondemand_price = 3};
  double up_sum = 0, ours_sum = 0;
  for (const char* z : {"us-east-1a", "us-east-1d", "us-east-2a", "us-west-2a", "us-west-2b"}) {
    auto t = market::LoadAvailabilityJson((dir / (std::string(z) + "_v100_1.json")).string());
    ASSERT_TRUE(t.ok()) << t.status().ToString();
    const market::Trace* zones[] = {&*t};
    auto up = EvaluatePolicy(reg, "up", zones, job, 60);
    auto ours = EvaluatePolicy(reg, "hazard-up", zones, job, 60);
    ASSERT_TRUE(up.ok() && ours.ok());
    EXPECT_EQ(up->deadline_misses, 0) << z;
    EXPECT_EQ(ours->deadline_misses, 0) << z;
    up_sum += up->mean_cost;
    ours_sum += ours->mean_cost;
  }
  EXPECT_LT(ours_sum, up_sum);
}

}  // namespace
}  // namespace spot::sim
