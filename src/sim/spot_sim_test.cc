// SpotSim against hand-made traces whose answers are worked out by hand.
#include "sim/spot_sim.h"

#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>

#include "fleet/migration.h"
#include "policy/registry.h"
#include "policy/test_traces.h"

namespace spot::sim {
namespace {

using policy::InstanceKind;
using policy::testing::MakeTrace;

// Replays a fixed list of placements (idle after the list ends).
class ScriptPolicy final : public policy::Policy {
 public:
  explicit ScriptPolicy(std::vector<Placement> s) : script_(std::move(s)) {}
  std::string_view name() const override { return "script"; }
  policy::Decision Decide(const policy::Observation& o) override {
    seen_.push_back(o);
    return o.Gang(o.tick < static_cast<int64_t>(script_.size()) ? script_[o.tick]
                                                                : Placement::Idle());
  }
  std::vector<policy::Observation> seen_;

 private:
  std::vector<Placement> script_;
};

class SimTest : public ::testing::Test {
 protected:
  SimTest() { policy::RegisterBuiltinPolicies(registry_); }
  RunResult Run(const std::string& name, const market::Trace& t, const JobSpec& job) {
    auto p = registry_.Create(name);
    EXPECT_TRUE(p.ok());
    const market::Trace* zones[] = {&t};
    EXPECT_TRUE(ValidateMarket(zones, job).ok());
    return SimulateJob(**p, zones, 0, job, {.record_timeline = true});
  }
  policy::PolicyRegistry registry_;
};

// g = 1 h, C = 2, D = 4, d = 0.5, always available, spot 1/h, k = 3.
// UP/greedy/omniscient: spot from tick 0: changeover 0.5 h + 2 h work = 2.5 h at
// 1/h, done at 2.5 h (the third tick billed pro rata). od: 3 * 2.5 = 7.5.
TEST_F(SimTest, AlwaysAvailable) {
  auto t = MakeTrace(3600, {1, 1, 1, 1, 1, 1});
  JobSpec job{
      .compute_hours = 2, .deadline_hours = 4, .changeover_hours = 0.5, .ondemand_price = 3};
  for (const char* name : {"up", "greedy", "omniscient", "hazard-up"}) {
    RunResult r = Run(name, t, job);
    EXPECT_NEAR(r.cost, 2.5, 1e-9) << name;
    EXPECT_NEAR(r.finish_hours, 2.5, 1e-9) << name;
    EXPECT_NEAR(r.spot_hours, 2.5, 1e-9) << name;
    EXPECT_TRUE(r.met_deadline);
    EXPECT_EQ(r.changeovers, 1);
  }
  RunResult od = Run("od", t, job);
  EXPECT_NEAR(od.cost, 7.5, 1e-9);
  EXPECT_NEAR(od.od_hours, 2.5, 1e-9);
  EXPECT_EQ(od.timeline.size(), 3u);
}

// a = 1 0 1 1 1 1 1 1, g = 1 h, C = 2, D = 6, d = 0.5.
// UP: tick 0 spot (0.5 changeover + 0.5 work, $1); tick 1 preempted, ep(1) =
// 1/3 <= 0.5 so idle; tick 2 spot again (changeover, p = 1.0, $2); tick 3 one
// hour of work -> done at 4.0 h, $3. Omniscient waits for the long run: enter at
// tick 2, done at 4.5 h, $2.5.
TEST_F(SimTest, PreemptionCostsASecondChangeover) {
  auto t = MakeTrace(3600, {1, 0, 1, 1, 1, 1, 1, 1});
  JobSpec job{
      .compute_hours = 2, .deadline_hours = 6, .changeover_hours = 0.5, .ondemand_price = 3};
  RunResult up = Run("up", t, job);
  EXPECT_NEAR(up.cost, 3.0, 1e-9);
  EXPECT_NEAR(up.finish_hours, 4.0, 1e-9);
  EXPECT_EQ(up.preemptions, 1);
  EXPECT_EQ(up.changeovers, 2);
  EXPECT_TRUE(up.timeline[1].preempted);
  EXPECT_EQ(up.timeline[1].placement.kind, InstanceKind::kIdle);
  RunResult best = Run("omniscient", t, job);
  EXPECT_NEAR(best.cost, 2.5, 1e-9);
  EXPECT_NEAR(best.finish_hours, 4.5, 1e-9);
}

// No spot at all, g = 0.5 h, C = 2, D = 4, d = 0.5, k = 3.
// UP: idle at 0 (ep(0) = 0); behind at 0.5 h -> on-demand and kept by the
// hysteresis, then the safety net: on-demand from 0.5 h, done at 3.0 h, $7.5.
// Greedy: idle until R < W + 2d, first at 1.5 h (2.5 < 3): done at exactly 4.0 h.
TEST_F(SimTest, NoSpotUsesOnDemand) {
  auto t = MakeTrace(1800, std::vector<int32_t>(12, 0));
  JobSpec job{
      .compute_hours = 2, .deadline_hours = 4, .changeover_hours = 0.5, .ondemand_price = 3};
  RunResult up = Run("up", t, job);
  EXPECT_NEAR(up.cost, 7.5, 1e-9);
  EXPECT_NEAR(up.finish_hours, 3.0, 1e-9);
  EXPECT_EQ(up.timeline[0].placement.kind, InstanceKind::kIdle);
  EXPECT_EQ(up.timeline[1].placement.kind, InstanceKind::kOnDemand);
  RunResult greedy = Run("greedy", t, job);
  EXPECT_NEAR(greedy.cost, 7.5, 1e-9);
  EXPECT_NEAR(greedy.finish_hours, 4.0, 1e-9);
  EXPECT_TRUE(greedy.met_deadline);
  EXPECT_NEAR(Run("omniscient", t, job).cost, 7.5, 1e-9);
}

// Prices 2, 1, 4 $/h, C = 1, D = 3, d = 0: UP takes spot at once ($2);
// omniscient waits for the $1 tick.
TEST_F(SimTest, SpotPriceSeries) {
  auto t = MakeTrace(3600, {1, 1, 1}, {2, 1, 4});
  JobSpec job{.compute_hours = 1, .deadline_hours = 3, .changeover_hours = 0, .ondemand_price = 3};
  EXPECT_NEAR(Run("up", t, job).cost, 2.0, 1e-9);
  EXPECT_NEAR(Run("omniscient", t, job).cost, 1.0, 1e-9);
  EXPECT_NEAR(Run("od", t, job).cost, 3.0, 1e-9);
}

// The changeover spans ticks (d = 0.2 h, g = 600 s) and is billed at the new
// instance's price; a spot request without capacity is idle; N = 2 nodes need
// count >= 2 and pay twice.
TEST(SimContract, ChangeoverAcrossTicksAndGangs) {
  auto t = MakeTrace(600, {1, 2, 2, 2, 2, 2, 2, 2, 2, 2});
  JobSpec job{.compute_hours = 0.5,
              .deadline_hours = 1.5,
              .changeover_hours = 0.2,
              .nodes = 2,
              .ondemand_price = 3};
  ScriptPolicy script(std::vector<Placement>(10, Placement::Spot(0)));
  const market::Trace* zones[] = {&t};
  RunResult r = SimulateJob(script, zones, 0, job, {.record_timeline = true});
  // Tick 0: count 1 < 2 -> idle. From tick 1 (1/6 h): 0.2 changeover + 0.5 work
  // = 0.7 h on 2 nodes at 1/h; done at 1/6 + 0.7 h.
  EXPECT_EQ(r.timeline[0].placement.kind, InstanceKind::kIdle);
  EXPECT_NEAR(r.cost, 1.4, 1e-9);
  EXPECT_NEAR(r.finish_hours, 1.0 / 6 + 0.7, 1e-9);
  EXPECT_NEAR(r.timeline[1].progress, 0.0, 1e-12);            // all changeover
  EXPECT_NEAR(r.timeline[2].progress, 2.0 / 6 - 0.2, 1e-12);  // 0.0333 h of changeover left
  EXPECT_DOUBLE_EQ(script.seen_[2].changeover_left_hours, 0.2 - 1.0 / 6);
}

// The policy never sees the future: the market view ends at the current tick.
TEST(SimContract, ObservationHasNoFuture) {
  auto t = MakeTrace(3600, {1, 0, 1, 1, 0, 1});
  JobSpec job{.compute_hours = 10, .deadline_hours = 3, .changeover_hours = 0};
  ScriptPolicy script({});
  const market::Trace* zones[] = {&t};
  SimulateJob(script, zones, 2, job);
  ASSERT_FALSE(script.seen_.empty());
  for (const auto& o : script.seen_) {
    EXPECT_EQ(o.market.AvailabilityHistory(0).size(), static_cast<size_t>(2 + o.tick + 1));
  }
}

TEST(SimContract, SampleStartsFollowTheFormula) {
  // T = 100 ticks of 3600 s, D = 10.5 h -> span ceil(10.5) = 11; s_i = floor(i * 89 / 4).
  auto s = SampleStarts(100, 3600, 10.5, 4);
  ASSERT_TRUE(s.ok());
  EXPECT_EQ(*s, (std::vector<int64_t>{0, 22, 44, 66}));
  EXPECT_FALSE(SampleStarts(5, 3600, 10.5, 4).ok());
}

// A deadline of more ticks than int64 holds (a gap of 1e-20 s once came in
// from a trace) is refused, not cast: the cast wrapped to a start far before
// tick 0, from which the simulation spun practically forever.
TEST(SimContract, SampleStartsRefuseSpansBeyondInt64) {
  for (auto [gap, deadline] : {std::pair{1e-20, 6.0}, {3600.0, 1e300}, {1.0, 1e15}}) {
    auto s = SampleStarts(100, gap, deadline, 4);
    ASSERT_FALSE(s.ok()) << gap << " " << deadline;
    EXPECT_EQ(s.status().code(), StatusCode::kInvalidArgument);
    EXPECT_NE(s.status().message().find("the traces (100 ticks) are shorter than the deadline"),
              std::string::npos)
        << s.status().message();
  }
  EXPECT_FALSE(SampleStarts(100, 0, 1, 4).ok());
  EXPECT_FALSE(SampleStarts(100, std::nan(""), 1, 4).ok());
  EXPECT_FALSE(SampleStarts(100, 3600, std::nan(""), 4).ok());
}

TEST(SimContract, ValidateMarketNamesTheTrace) {
  auto a = MakeTrace(600, {1, 1}, {}, "a.json");
  auto b = MakeTrace(300, {1, 1}, {}, "b.json");
  const market::Trace* zones[] = {&a, &b};
  Status s = ValidateMarket(zones, JobSpec{});
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("b.json"), std::string::npos);
}

// Migration: three zones always up at 1.0/h, two in us-east-1 and one in
// us-west-2; one-hour ticks, no changeover, a 10 GB checkpoint.
class MigrationTest : public ::testing::Test {
 protected:
  MigrationTest() {
    const char* names[] = {"us-east-1a", "us-east-1d", "us-west-2a"};
    for (const char* n : names) {
      traces_.push_back(MakeTrace(3600, std::vector<int32_t>(20, 1), {}, n));
      traces_.back().pool.zone = n;
    }
    for (const auto& t : traces_) zones_.push_back(&t);
    EXPECT_TRUE(egress_.Add("us-east-1", "us-west-2", 0.02).ok());
    EXPECT_TRUE(egress_.Add("us-west-2", "us-east-1", 0.03).ok());
  }
  JobSpec Job(double gb) const {
    return {.compute_hours = 6,
            .deadline_hours = 10,
            .changeover_hours = 0,
            .ondemand_price = 3,
            .checkpoint_gb = gb,
            .egress = &egress_};
  }
  std::vector<market::Trace> traces_;
  std::vector<const market::Trace*> zones_;
  fleet::EgressPrices egress_;
};

// Charged exactly on moves across regions, from the region the state is in:
// east-1a -> east-1d (same region: free) -> west-2a (10 GB x 0.02) ->
// on-demand of the reference type (runs where the state is: free) ->
// east-1a (10 GB x 0.03, the way back) -> east-1a.
TEST_F(MigrationTest, ChargedOnlyAcrossRegionsAtTheEgressPrice) {
  const std::vector<Placement> script = {Placement::Spot(0), Placement::Spot(1),
                                         Placement::Spot(2), Placement::OnDemand(),
                                         Placement::Spot(0), Placement::Spot(0)};
  ASSERT_TRUE(ValidateMarket(zones_, Job(10)).ok());
  ScriptPolicy p(script);
  RunResult r = SimulateJob(p, zones_, 0, Job(10));
  EXPECT_EQ(r.migrations, 2);
  EXPECT_NEAR(r.migration_cost, 10 * 0.02 + 10 * 0.03, 1e-12);
  EXPECT_NEAR(r.cost, 5 * 1.0 + 3.0 + 0.5, 1e-12);  // 5 spot hours, 1 on-demand hour, moves
  EXPECT_TRUE(r.met_deadline);
  ScriptPolicy free_moves(script);
  RunResult r0 = SimulateJob(free_moves, zones_, 0, Job(0));
  EXPECT_EQ(r0.migrations, 0);
  EXPECT_NEAR(r0.cost, 8.0, 1e-12);
}

TEST_F(MigrationTest, MovesWithinARegionAreFree) {
  ScriptPolicy p({Placement::Spot(0), Placement::Spot(1), Placement::Spot(0), Placement::Spot(1),
                  Placement::Spot(0), Placement::Spot(1)});
  RunResult r = SimulateJob(p, zones_, 0, Job(1000));
  EXPECT_EQ(r.migrations, 0);
  EXPECT_EQ(r.migration_cost, 0);
  EXPECT_NEAR(r.cost, 6.0, 1e-12);
}

TEST_F(MigrationTest, ValidationNamesTheMissingPair) {
  fleet::EgressPrices one_way;
  ASSERT_TRUE(one_way.Add("us-east-1", "us-west-2", 0.02).ok());
  JobSpec job = Job(10);
  job.egress = &one_way;
  Status s = ValidateMarket(zones_, job);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("from region us-west-2 to us-east-1"), std::string::npos)
      << s.message();
  job.egress = nullptr;
  s = ValidateMarket(zones_, job);
  EXPECT_NE(s.message().find("no egress prices were given"), std::string::npos) << s.message();
  job.checkpoint_gb = -1;
  EXPECT_EQ(ValidateMarket(zones_, job).code(), StatusCode::kInvalidArgument);
  // Without a checkpoint, or within one region, no prices are needed.
  job.checkpoint_gb = 0;
  EXPECT_TRUE(ValidateMarket(zones_, job).ok());
  job.checkpoint_gb = 10;
  EXPECT_TRUE(ValidateMarket(std::span(zones_).first(2), job).ok());
}

TEST(Migration, RegionsFromZoneNames) {
  EXPECT_EQ(fleet::RegionOfZone("us-east-1a"), "us-east-1");
  EXPECT_EQ(fleet::RegionOfZone("ap-northeast-3c"), "ap-northeast-3");
  EXPECT_EQ(fleet::RegionOfZone("us-central1-a"), "us-central1");
  EXPECT_EQ(fleet::RegionOfZone("us-east-1"), "us-east-1");
  EXPECT_EQ(fleet::RegionOfZone("hand"), "hand");
  market::Pool p{.region = "eu-west-1", .zone = "x"};
  EXPECT_EQ(fleet::RegionOf(p), "eu-west-1");
}

TEST(Migration, EgressCsvNamesTheBadRow) {
  const auto dir = std::filesystem::path(::testing::TempDir()) / "egress_test";
  std::filesystem::create_directories(dir);
  const std::string good = (dir / "good.csv").string();
  std::ofstream(good) << "from_region,to_region,price_usd_per_gb\n"
                         "us-east-1,us-west-2,0.02\nus-west-2,us-east-1,0.03\n";
  auto e = fleet::LoadEgressCsv(good);
  ASSERT_TRUE(e.ok()) << e.status().message();
  EXPECT_EQ(e->UsdPerGb("us-west-2", "us-east-1"), 0.03);
  EXPECT_EQ(e->UsdPerGb("us-east-1", "us-east-1"), 0.0);
  EXPECT_FALSE(e->UsdPerGb("us-east-1", "eu-west-1").has_value());
  const std::string bad = (dir / "bad.csv").string();
  std::ofstream(bad) << "from_region,to_region,price_usd_per_gb\n"
                        "us-east-1,us-west-2,0.02\nus-west-2,us-east-1,-1\n";
  auto b = fleet::LoadEgressCsv(bad);
  EXPECT_EQ(b.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(b.status().message().find("bad.csv:3: price_usd_per_gb"), std::string::npos)
      << b.status().message();
  const std::string twice = (dir / "twice.csv").string();
  std::ofstream(twice) << "from_region,to_region,price_usd_per_gb\n"
                          "us-east-1,us-west-2,0.02\nus-east-1,us-west-2,0.02\n";
  EXPECT_NE(fleet::LoadEgressCsv(twice).status().message().find("given twice"), std::string::npos);
  EXPECT_EQ(fleet::LoadEgressCsv((dir / "none.csv").string()).status().code(),
            StatusCode::kNotFound);
}

}  // namespace
}  // namespace spot::sim
