// Policies on the real records of ../shared/data (skipped when absent):
// the omniscient bound holds and ours miss no deadline up meets on every
// shared folder, and hazard-up beats up on mean cost over the five
// aws-v100-2023-02 zones (the setting, fewer samples to keep the
// test quick; docs/spotsim.md has the leaderboard).
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <iostream>

#include "market/loaders.h"
#include "policy/omniscient.h"
#include "policy/registry.h"
#include "sim/evaluate.h"
#include "sim/spot_sim.h"

namespace spot::sim {
namespace {

namespace fs = std::filesystem;
const fs::path kData = fs::path(SPOT_SOURCE_DIR) / ".." / "shared" / "data";

TEST(RealTraces, HazardUpBeatsUpOnV100Zones) {
  fs::path dir = kData / "availability" / "aws-v100-2023-02";
  if (!fs::exists(dir)) GTEST_SKIP() << dir << " not present";
  policy::PolicyRegistry reg;
  policy::RegisterBuiltinPolicies(reg);
  JobSpec job{
      .compute_hours = 48, .deadline_hours = 60, .changeover_hours = 0.2, .ondemand_price = 3};
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

// Every shared availability and preemption folder, each zone its own market
// with the files' own prices, the leaderboard's job with the folder's gang
// and on-demand price: at starts spread over each trace (the first on the
// trace's first day, where mdp has no history yet), the omniscient bound
// costs no more than any policy, and no policy of ours misses a deadline
// that up meets.
TEST(RealTraces, TheBoundHoldsAndOursMissNoDeadlineUpMeetsOnEveryFolder) {
  struct Folder {
    const char* dir;
    int nodes;
    double ondemand_price, compute_hours, deadline_hours;
    int starts;  // per zone (the r5 records' 34 s ticks make the bound slow)
  };
  const Folder folders[] = {{"availability/aws-2022-10", 1, 3, 48, 60, 4},
                            {"availability/aws-v100-2023-02", 1, 3.06, 48, 60, 4},
                            {"availability/aws-v100x16-2023-08", 16, 3, 48, 60, 4},
                            {"preemption/aws-v100-2023-04", 1, 3.06, 48, 60, 4},
                            {"preemption/aws-r5-2023-05", 1, 4.032, 48, 60, 2},
                            {"preemption/aws-v100x4-2023-08", 4, 3, 48, 60, 4},
                            {"preemption/gcp-c3-2023-04", 1, 3, 8, 10, 4}};
  policy::PolicyRegistry reg;
  policy::RegisterBuiltinPolicies(reg);
  int checked = 0;
  for (const Folder& f : folders) {
    const fs::path dir = kData / f.dir;
    if (!fs::exists(dir)) {
      std::cerr << "[ SKIPPED  ] " << dir << " not present: real-trace check skipped\n";
      continue;
    }
    std::vector<fs::path> files;
    for (const auto& e : fs::directory_iterator(dir)) {
      if (e.path().extension() == ".json") files.push_back(e.path());
    }
    std::sort(files.begin(), files.end());
    const JobSpec job{.compute_hours = f.compute_hours,
                      .deadline_hours = f.deadline_hours,
                      .changeover_hours = 0.2,
                      .nodes = f.nodes,
                      .ondemand_price = f.ondemand_price};
    for (const fs::path& file : files) {
      auto t = market::LoadAvailabilityJson(file.string());
      ASSERT_TRUE(t.ok()) << t.status().ToString();
      const market::Trace* zones[] = {&*t};
      const int64_t job_ticks =
          static_cast<int64_t>(std::ceil(job.deadline_hours * 3600 / t->gap_seconds)) + 1;
      const int64_t last = static_cast<int64_t>(t->available.size()) - job_ticks;
      ASSERT_GT(last, 0) << file;
      const int64_t first_day = std::min<int64_t>(
          last, static_cast<int64_t>(std::floor(2 * 3600 / t->gap_seconds)));  // 2 h in
      std::vector<int64_t> starts = {first_day};
      for (int i = 1; i < f.starts; ++i) starts.push_back(last * i / (f.starts - 1));
      for (const int64_t start : starts) {
        const std::string where = fmt::format("{} from tick {}", file.filename().string(), start);
        // The bound with spot entered from on-demand make before break (mdp's).
        auto plan = policy::SolveOmniscient({zones, start}, job, {.overlap_entries = true});
        ASSERT_TRUE(plan.ok()) << where << ": " << plan.status().ToString();
        // up first: the others are held to the deadlines it meets.
        bool up_met = false;
        for (const std::string name : {"up", "od", "greedy", "hazard-up", "forecast-up", "mdp"}) {
          auto p = reg.Create(name);
          ASSERT_TRUE(p.ok()) << name;
          const RunResult r = SimulateJob(**p, zones, start, job);
          if (plan->feasible) {
            EXPECT_LE(plan->cost, r.cost + 1e-6) << name << " " << where;
          }
          if (name == "up") up_met = r.met_deadline;
          const bool ours = name == "mdp" || name == "hazard-up" || name == "forecast-up";
          if (up_met && ours) {
            EXPECT_TRUE(r.met_deadline) << name << " missed the deadline up met, " << where;
          }
        }
        ++checked;
      }
    }
  }
  if (checked == 0) GTEST_SKIP() << kData << ": no shared folder present";
}

}  // namespace
}  // namespace spot::sim
