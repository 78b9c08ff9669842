// SpotSim with fleet decisions: partial reclaims, mixed spot and on-demand,
// two instance types of different throughput, bids. Every figure is worked
// out by hand in the comment above its test.
#include <gtest/gtest.h>

#include "policy/test_traces.h"
#include "sim/spot_sim.h"

namespace spot::sim {
namespace {

using fleet::PoolRef;
using fleet::PoolTarget;
using policy::testing::MakeTrace;

// Holds one fixed fleet at every tick.
class FixedFleet final : public policy::Policy {
 public:
  explicit FixedFleet(std::vector<PoolTarget> f) : fleet_(std::move(f)) {}
  std::string_view name() const override { return "fixed-fleet"; }
  policy::Decision Decide(const policy::Observation& o) override {
    seen_.push_back(o);  // its spans are valid during Decide only: copy what is kept
    held_.push_back(std::vector<fleet::Instance>(o.fleet.begin(), o.fleet.end()));
    types_.push_back(std::vector<fleet::TypeFacts>(o.types.begin(), o.types.end()));
    return {.fleet = fleet_};
  }
  std::vector<policy::Observation> seen_;
  std::vector<std::vector<fleet::Instance>> held_;    // o.fleet at each tick
  std::vector<std::vector<fleet::TypeFacts>> types_;  // o.types at each tick

 private:
  std::vector<PoolTarget> fleet_;
};

RunResult Sim(policy::Policy& p, std::vector<const market::Trace*> zones, const JobSpec& job,
              std::vector<fleet::TypeFacts> types = {}, int64_t start = 0) {
  EXPECT_TRUE(ValidateMarket(zones, job).ok());
  return SimulateJob(p, zones, start, job, {.record_timeline = true, .types = std::move(types)});
}

// g = 1 h, N = 2 reference nodes (1 compute-hour per hour together), elastic
// (min 1), d = 0.5, C = 3, spot 1 $/h, capacity 2 1 2 2 2 2.
//   tick 0: 2 launched, ready at 0.5: +0.5 -> 0.5; $2.
//   tick 1: capacity 1: the newer one is reclaimed; the other runs alone at
//           rate 1/2: +0.5 -> 1.0; $1.
//   tick 2: one launched again, ready at 0.5: 0.5 h x 1/2 + 0.5 h x 1 -> 1.75; $2.
//   tick 3: -> 2.75; $2.   tick 4: 0.25 h -> done at 4.25 h; $0.5.  Total $7.5.
TEST(FleetSim, PartialReclaimKeepsTheSurvivorTraining) {
  auto t = MakeTrace(3600, {2, 1, 2, 2, 2, 2});
  JobSpec job{.compute_hours = 3,
              .deadline_hours = 6,
              .changeover_hours = 0.5,
              .nodes = 2,
              .ondemand_price = 3,
              .min_nodes = 1};
  FixedFleet p({{.pool = PoolRef::Spot(0), .count = 2}});
  RunResult r = Sim(p, {&t}, job);
  EXPECT_NEAR(r.cost, 7.5, 1e-9);
  EXPECT_NEAR(r.finish_hours, 4.25, 1e-9);
  EXPECT_EQ(r.preemptions, 1);
  EXPECT_EQ(r.instances_reclaimed, 1);
  EXPECT_EQ(r.changeovers, 2);
  EXPECT_NEAR(r.spot_hours, 7.5 / 2, 1e-9);  // instance-hours / N
  ASSERT_EQ(r.timeline.size(), 5u);
  EXPECT_NEAR(r.timeline[1].progress, 1.0, 1e-9);
  EXPECT_EQ(r.timeline[1].current, "spot:0=1");
  EXPECT_EQ(r.timeline[2].fleet, "spot:0");  // the gang is whole again
  // The policy saw the reclaimed instance (the newer one) at tick 1.
  ASSERT_EQ(p.held_[1].size(), 2u);
  EXPECT_EQ(p.held_[1][1].state, fleet::InstanceState::kPreempted);
  EXPECT_EQ(p.held_[1][1].id, 2);
  EXPECT_EQ(p.held_[1][0].state, fleet::InstanceState::kRunning);
  EXPECT_TRUE(p.seen_[1].preempted_now);
}

// The same market and fleet as a gang (min 2): at tick 1 the survivor is
// billed ($1) but the job makes no progress; work in ticks 0 (0.5 h), 2
// (0.5 h, the joiner's startup), 3 and 4: done at 5 h, $2+1+2+2+2 = 9.
TEST(FleetSim, PartialReclaimStopsAGang) {
  auto t = MakeTrace(3600, {2, 1, 2, 2, 2, 2});
  JobSpec job{.compute_hours = 3,
              .deadline_hours = 6,
              .changeover_hours = 0.5,
              .nodes = 2,
              .ondemand_price = 3};
  FixedFleet p({{.pool = PoolRef::Spot(0), .count = 2}});
  RunResult r = Sim(p, {&t}, job);
  EXPECT_NEAR(r.cost, 9.0, 1e-9);
  EXPECT_NEAR(r.finish_hours, 5.0, 1e-9);
}

// Two instance types: zone 0 is a fast type (throughput 2) on spot at 1.5 $/h,
// and the on-demand pool of zone 1 a reference type (throughput 1) at 2 $/h.
// N = 2, d = 0, C = 4. Balanced: (2 + 1) / 2 = 1.5 compute-hours per hour,
// done at 8/3 h, (1.5 + 2) x 8/3 = 28/3 $. Unbalanced: both at the slow pace,
// 2 x 1 / 2 = 1 per hour: done at 4 h, 3.5 x 4 = 14 $.
TEST(FleetSim, MixedSpotAndOnDemandOfTwoTypes) {
  auto fast = MakeTrace(3600, std::vector<int32_t>(8, 5), std::vector<double>(8, 1.5), "fast");
  auto slow = MakeTrace(3600, std::vector<int32_t>(8, 0), {}, "slow");
  std::vector<fleet::TypeFacts> types = {{.instance_type = "fast", .throughput = 2},
                                         {.instance_type = "slow", .ondemand_price = 2},
                                         {.instance_type = "reference", .ondemand_price = 3}};
  std::vector<PoolTarget> f = {{.pool = PoolRef::Spot(0), .count = 1},
                               {.pool = PoolRef::OnDemand(1), .count = 1}};
  JobSpec job{.compute_hours = 4,
              .deadline_hours = 6,
              .changeover_hours = 0,
              .nodes = 2,
              .ondemand_price = 3,
              .min_nodes = 1};
  FixedFleet balanced(f);
  RunResult r = Sim(balanced, {&fast, &slow}, job, types);
  EXPECT_NEAR(r.finish_hours, 8.0 / 3, 1e-9);
  EXPECT_NEAR(r.cost, 28.0 / 3, 1e-9);
  EXPECT_NEAR(r.spot_hours, 4.0 / 3, 1e-9);
  EXPECT_NEAR(r.od_hours, 4.0 / 3, 1e-9);
  EXPECT_EQ(r.timeline[0].fleet, "spot:0=1+od:1=1");
  EXPECT_EQ(balanced.types_[0][0].throughput, 2);
  job.balanced = false;
  FixedFleet lockstep(f);
  RunResult slow_run = Sim(lockstep, {&fast, &slow}, job, types);
  EXPECT_NEAR(slow_run.finish_hours, 4.0, 1e-9);
  EXPECT_NEAR(slow_run.cost, 14.0, 1e-9);
}

// A bid of 0.8 $/h, prices 0.5 0.5 0.9 0.5 ..., N = 1, d = 0, C = 3.
//   ticks 0, 1: on spot, $0.5 each; tick 2: the price passes the bid, the
//   instance is reclaimed and none is launched; tick 3: launched again, done
//   at 4 h, $1.5 in all. Started at tick 2 (price 0.9) nothing is launched
//   until the price falls: done at 4 h of the job, $1.5.
TEST(FleetSim, BidAboveThePriceOnly) {
  auto t = MakeTrace(3600, std::vector<int32_t>(8, 1), {0.5, 0.5, 0.9, 0.5, 0.5, 0.5, 0.5, 0.5});
  JobSpec job{.compute_hours = 3, .deadline_hours = 5, .changeover_hours = 0, .ondemand_price = 3};
  FixedFleet p({{.pool = PoolRef::Spot(0), .count = 1, .max_price = 0.8}});
  RunResult r = Sim(p, {&t}, job);
  EXPECT_NEAR(r.cost, 1.5, 1e-9);
  EXPECT_NEAR(r.finish_hours, 4.0, 1e-9);
  EXPECT_EQ(r.preemptions, 1);
  EXPECT_EQ(r.timeline[2].fleet, "idle");
  EXPECT_EQ(r.changeovers, 2);
  FixedFleet late({{.pool = PoolRef::Spot(0), .count = 1, .max_price = 0.8}});
  RunResult s = Sim(late, {&t}, job, {}, 2);
  EXPECT_EQ(s.timeline[0].fleet, "idle");
  EXPECT_NEAR(s.finish_hours, 4.0, 1e-9);
  EXPECT_NEAR(s.cost, 1.5, 1e-9);
  EXPECT_EQ(s.preemptions, 0);
  // Without a bid the price does not matter: 0.5 + 0.5 + 0.9 = 1.9 $ in 3 h.
  FixedFleet no_bid({{.pool = PoolRef::Spot(0), .count = 1}});
  RunResult n = Sim(no_bid, {&t}, job);
  EXPECT_NEAR(n.cost, 1.9, 1e-9);
  EXPECT_NEAR(n.finish_hours, 3.0, 1e-9);
}

// Asking for more than the pool has gets what it has, unless the target's
// min_count is not met: then nothing (a gang is all or none).
TEST(FleetSim, CapacityAndMinCount) {
  auto t = MakeTrace(3600, std::vector<int32_t>(6, 3));
  JobSpec job{.compute_hours = 2,
              .deadline_hours = 6,
              .changeover_hours = 0,
              .nodes = 4,
              .ondemand_price = 3,
              .min_nodes = 1};
  FixedFleet some({{.pool = PoolRef::Spot(0), .count = 4}});
  RunResult r = Sim(some, {&t}, job);
  EXPECT_EQ(r.timeline[0].fleet, "spot:0=3");  // 3 of 4: rate 3/4
  EXPECT_NEAR(r.finish_hours, 8.0 / 3, 1e-9);
  FixedFleet gang({{.pool = PoolRef::Spot(0), .count = 4, .min_count = 4}});
  RunResult g = Sim(gang, {&t}, job);
  EXPECT_EQ(g.timeline[0].fleet, "idle");
  EXPECT_FALSE(g.met_deadline);  // the traces end: finished on demand
}

}  // namespace
}  // namespace spot::sim
