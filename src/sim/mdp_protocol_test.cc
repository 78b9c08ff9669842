// Our policies in the simulator: over 10,000 random Markov markets they meet
// every deadline up meets and stay above the omniscient bound, and mdp never
// holds spot priced at or above on-demand; on the real records of
// ../shared/data (skipped, saying so, when absent), out of sample under the
// protocols, mdp misses no deadline up meets and costs less than up on average.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <optional>
#include <random>

#include "fleet/migration.h"
#include "market/loaders.h"
#include "policy/observation.h"
#include "policy/omniscient.h"
#include "policy/registry.h"
#include "policy/test_traces.h"
#include "sim/protocol.h"
#include "sim/spot_sim.h"

namespace spot::sim {
namespace {

using policy::InstanceKind;
using policy::testing::RandomTrace;

// The spot zones of the fleet a tick of a timeline held (a gang, or a spot
// gang starting beside on-demand).
std::vector<int> SpotZonesHeld(const TickRecord& r, int nodes) {
  std::vector<int> zones;
  for (const fleet::PoolTarget& t : policy::ParseFleetName(r.fleet, nodes)) {
    if (t.pool.spot() && t.count > 0) zones.push_back(t.pool.zone);
  }
  return zones;
}

// Over 10,000 random Markov markets (the count): every policy of
// ours meets every deadline up meets, mdp never holds spot priced at or
// above on-demand, and the omniscient bound is below each of them (checked
// on a tenth: the exact DP is the slow part).
TEST(OursProperty, MeetEveryDeadlineUpMeetsOn10000RandomMarkets) {
  policy::PolicyRegistry registry;
  policy::RegisterBuiltinPolicies(registry);
  std::mt19937_64 rng(2026);
  std::uniform_real_distribution<double> u(0, 1);
  const double gaps[] = {600, 300, 195};
  // mdp-zones is mdp on one zone (policy/mdp_zones_test.cc): run where it differs.
  const char* ours[] = {"mdp", "hazard-up", "forecast-up", "mdp-zones"};
  int up_met = 0, bounded = 0, spot_ticks = 0, starting_ticks = 0;
  for (int trial = 0; trial < 10000; ++trial) {
    const double gap = gaps[trial % 3];
    const double gap_min = gap / 60;
    // C in [2, 8] h, D / C in [1.02, 1.6], d in whole minutes in [g, 30 min]
    // (the 2d net needs g <= d), k = 3, or k = 1 against prices in [0.3, 1.2]
    // so that spot is sometimes dearer than on-demand.
    JobSpec job{.compute_hours = 2 + 6 * u(rng),
                .changeover_hours = std::ceil(gap_min + (30 - gap_min) * u(rng)) / 60,
                .ondemand_price = trial % 4 == 3 ? 1.0 : 3.0};
    job.deadline_hours = job.compute_hours * (1.02 + 0.58 * u(rng));
    // 30 to 60 hours of history before the start (the chain is fitted), or
    // for one trial in five under 20 (mdp starts as up in a young market).
    const double history_hours = trial % 5 == 4 ? 20 * u(rng) : 30 + 30 * u(rng);
    int64_t start = static_cast<int64_t>(history_hours * 3600 / gap);
    int64_t ticks = start + static_cast<int64_t>(job.deadline_hours * 3600 / gap) + 10;
    double mean_up = 1 + 60 * u(rng), mean_down = 1 + 30 * u(rng);
    int zones_n = trial % 10 == 9 ? 2 : 1;
    std::vector<market::Trace> traces;
    for (int z = 0; z < zones_n; ++z) {
      traces.push_back(RandomTrace(rng, gap, ticks, mean_up, mean_down, trial % 2 == 1));
    }
    std::vector<const market::Trace*> zones;
    for (auto& t : traces) zones.push_back(&t);
    auto up = registry.Create("up");
    ASSERT_TRUE(up.ok());
    RunResult ru = SimulateJob(**up, zones, start, job);
    up_met += ru.met_deadline;
    // The one-group bound, and the bound with spot entered from on-demand
    // make before break (mdp's), below it.
    std::optional<policy::OmniscientPlan> plan, overlap;
    if (trial % 10 == 0) {
      auto solved = policy::SolveOmniscient({zones, start}, job);
      ASSERT_TRUE(solved.ok());
      auto with = policy::SolveOmniscient({zones, start}, job, {.overlap_entries = true});
      ASSERT_TRUE(with.ok());
      EXPECT_EQ(with->feasible, solved->feasible) << "trial " << trial;
      if (solved->feasible) {
        plan = *solved;
        overlap = *with;
        EXPECT_LE(with->cost, solved->cost + 1e-9) << "trial " << trial;
      }
      bounded += plan.has_value();
    }
    for (const char* name : ours) {
      if (zones_n == 1 && std::string(name) == "mdp-zones") continue;
      auto p = registry.Create(name);
      ASSERT_TRUE(p.ok());
      const bool is_mdp = std::string(name).starts_with("mdp");
      RunResult r = SimulateJob(**p, zones, start, job, {.record_timeline = is_mdp});
      if (ru.met_deadline) {
        EXPECT_TRUE(r.met_deadline)
            << "trial " << trial << ": up met the deadline, " << name << " did not";
      }
      if (plan) {
        const double bound = is_mdp ? overlap->cost : plan->cost;
        EXPECT_LE(bound, r.cost + 1e-9) << name << " trial " << trial;
      }
      if (!is_mdp) continue;
      for (size_t t = 0; t < r.timeline.size(); ++t) {
        const std::vector<int> held = SpotZonesHeld(r.timeline[t], job.nodes);
        starting_ticks += !held.empty() && r.timeline[t].placement.kind != InstanceKind::kSpot;
        for (int zone : held) {
          ++spot_ticks;
          const market::Trace& z = *zones[zone];
          double price = z.has_prices() ? z.price[start + t] : 1.0;
          EXPECT_LT(price, job.ondemand_price) << "trial " << trial << " tick " << t;
        }
      }
    }
  }
  EXPECT_GT(up_met, 7500);  // the property was exercised
  EXPECT_GT(bounded, 500);
  EXPECT_GT(spot_ticks, 0);
  EXPECT_GT(starting_ticks, 0);  // spot gangs started beside on-demand (make before break)
}

// mdp-zones over 10,000 random markets of 2 to 4 zones in two regions, with
// prices half the time and a checkpoint of 0 to 300 GB moved at $0.02/GB
// between the regions: it meets every deadline up meets, never holds spot
// priced at or above on-demand, and the omniscient bound is below it where
// moves are free (the bound does not see migration).
TEST(OursProperty, MdpZonesMeetsEveryDeadlineUpMeetsAcrossRegions) {
  policy::PolicyRegistry registry;
  policy::RegisterBuiltinPolicies(registry);
  fleet::EgressPrices egress;
  ASSERT_TRUE(egress.Add("us-east-1", "us-west-2", 0.02).ok());
  ASSERT_TRUE(egress.Add("us-west-2", "us-east-1", 0.02).ok());
  const char* names[] = {"us-east-1a", "us-west-2a", "us-east-1b", "us-west-2b"};
  std::mt19937_64 rng(19);
  std::uniform_real_distribution<double> u(0, 1);
  const double gaps[] = {600, 300, 195};
  int up_met = 0, bounded = 0, moved = 0;
  for (int trial = 0; trial < 10000; ++trial) {
    const double gap = gaps[trial % 3];
    const double gap_min = gap / 60;
    JobSpec job{.compute_hours = 2 + 6 * u(rng),
                .changeover_hours = std::ceil(gap_min + (30 - gap_min) * u(rng)) / 60,
                .ondemand_price = trial % 4 == 3 ? 1.0 : 3.0,
                .checkpoint_gb = trial % 3 == 0 ? 0.0 : 300 * u(rng),
                .egress = &egress};
    job.deadline_hours = job.compute_hours * (1.02 + 0.58 * u(rng));
    int64_t start = static_cast<int64_t>((30 + 30 * u(rng)) * 3600 / gap);
    int64_t ticks = start + static_cast<int64_t>(job.deadline_hours * 3600 / gap) + 10;
    const int zones_n = 2 + trial % 3;
    std::vector<market::Trace> traces;
    for (int z = 0; z < zones_n; ++z) {
      double mean_up = 1 + 60 * u(rng), mean_down = 1 + 30 * u(rng);
      traces.push_back(RandomTrace(rng, gap, ticks, mean_up, mean_down, trial % 2 == 1));
      traces.back().pool.zone = names[z];
    }
    std::vector<const market::Trace*> zones;
    for (auto& t : traces) zones.push_back(&t);
    ASSERT_TRUE(ValidateMarket(zones, job).ok());
    auto up = registry.Create("up");
    auto ours = registry.Create("mdp-zones");
    ASSERT_TRUE(up.ok() && ours.ok());
    RunResult ru = SimulateJob(**up, zones, start, job);
    RunResult r = SimulateJob(**ours, zones, start, job, {.record_timeline = true});
    up_met += ru.met_deadline;
    moved += r.migrations;
    if (ru.met_deadline) {
      EXPECT_TRUE(r.met_deadline) << "trial " << trial
                                  << ": up met the deadline, mdp-zones did not";
    }
    if (job.checkpoint_gb == 0 && trial % 10 == 0) {
      // The bound with spot entered from on-demand make before break.
      auto plan = policy::SolveOmniscient({zones, start}, job, {.overlap_entries = true});
      ASSERT_TRUE(plan.ok());
      if (plan->feasible) {
        ++bounded;
        EXPECT_LE(plan->cost, r.cost + 1e-9) << "trial " << trial;
      }
    }
    for (size_t t = 0; t < r.timeline.size(); ++t) {
      for (int zone : SpotZonesHeld(r.timeline[t], job.nodes)) {
        const market::Trace& z = *zones[zone];
        EXPECT_LT(z.has_prices() ? z.price[start + t] : 1.0, job.ondemand_price)
            << "trial " << trial << " tick " << t;
      }
    }
  }
  EXPECT_GT(up_met, 7500);  // the property was exercised
  EXPECT_GT(bounded, 200);
  EXPECT_GT(moved, 0);  // and moves across regions happened
}

namespace fs = std::filesystem;
const fs::path kData = fs::path(SPOT_SOURCE_DIR) / ".." / "shared" / "data";

// Every trace of a shared folder, each its own market (prices from the files).
struct Folder {
  std::vector<market::Trace> traces;
  std::vector<ProtocolMarket> markets;
};

Folder Load(const fs::path& dir) {
  Folder f;
  std::vector<fs::path> files;
  for (const auto& e : fs::directory_iterator(dir)) {
    if (e.path().extension() == ".json") files.push_back(e.path());
  }
  std::sort(files.begin(), files.end());
  f.traces.reserve(files.size());
  for (const fs::path& p : files) {
    auto t = market::LoadAvailabilityJson(p.string());
    EXPECT_TRUE(t.ok()) << t.status().ToString();
    if (t.ok()) f.traces.push_back(std::move(*t));
  }
  for (const auto& t : f.traces) f.markets.push_back({t.name, {&t}, "file"});
  return f;
}

// up and mdp on a shared folder, out of sample by `protocol`, `samples`
// starts a market part; no deadline miss that up does not have.
Result<ProtocolResult> ScoreMdp(const Folder& f, Protocol protocol, const JobSpec& job,
                                int samples) {
  policy::PolicyRegistry registry;
  policy::RegisterBuiltinPolicies(registry);
  const std::vector<std::string> policies = {"up", "mdp"};
  auto res = RunProtocol(registry, f.markets, job, policies,
                         {.protocol = protocol, .sampling = {.samples = samples}});
  if (res.ok()) {
    for (const MarketResult& m : res->markets) {
      for (const PolicyScore& s : m.policies) {
        EXPECT_EQ(s.stats.misses_up_met, 0) << m.name << " " << s.policy;
      }
    }
  }
  return res;
}

// The job of the leaderboard on r5.16xlarge (its on-demand price) or V100.
JobSpec LeaderboardJob(double ondemand_price) {
  return {.compute_hours = 48,
          .deadline_hours = 60,
          .changeover_hours = 0.2,
          .ondemand_price = ondemand_price};
}

// Out of sample on a real folder: cheaper than up pooled (the interval's
// top below 1).
void CheckFolder(const char* folder, Protocol protocol, const JobSpec& job) {
  fs::path dir = kData / folder;
  if (!fs::exists(dir)) GTEST_SKIP() << dir << " not present: real-trace check skipped";
  auto res = ScoreMdp(Load(dir), protocol, job, 30);
  ASSERT_TRUE(res.ok()) << res.status().ToString();
  const PolicyScore& ours = res->pooled[1];
  ASSERT_EQ(ours.policy, "mdp");
  EXPECT_LT(ours.stats.ratio_to_up.ci.hi, 1.0) << folder;
}

TEST(MdpRealTraces, LeaveOneZoneOutOnV100Preemptions) {
  CheckFolder("preemption/aws-v100-2023-04", Protocol::kLeaveOneOut, LeaderboardJob(3.06));
}

// r5 us-east-1c is a market that changed (spot scarce in short runs its
// first two days, plentiful after): with a chain that weighs every run of
// the window alike, mdp stayed on on-demand while it turned plentiful
// (+1.6% against up under loo). Fitted on the other two zones, the grid's
// half-life brings every zone within 1% of up.
TEST(MdpRealTraces, LeaveOneZoneOutOnR5KeepsEveryZoneWithinOnePercentOfUp) {
  fs::path dir = kData / "preemption/aws-r5-2023-05";
  if (!fs::exists(dir)) GTEST_SKIP() << dir << " not present: real-trace check skipped";
  auto res = ScoreMdp(Load(dir), Protocol::kLeaveOneOut, LeaderboardJob(4.032), 60);
  ASSERT_TRUE(res.ok()) << res.status().ToString();
  for (const MarketResult& m : res->markets) {
    const PolicyScore& ours = m.policies[1];
    ASSERT_EQ(ours.policy, "mdp");
    EXPECT_LT(ours.stats.ratio_to_up.mean, 1.01) << m.name;
  }
}

TEST(MdpRealTraces, TimeSplitOnR5WithItsPrices) {
  CheckFolder("preemption/aws-r5-2023-05", Protocol::kTimeSplit, LeaderboardJob(4.032));
}

}  // namespace
}  // namespace spot::sim
