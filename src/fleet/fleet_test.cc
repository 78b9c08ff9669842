// The fleet model's rules one by one, on hand-made traces.
#include "fleet/fleet.h"

#include <gtest/gtest.h>

namespace spot::fleet {
namespace {

market::Trace Zone(std::vector<int32_t> available, std::vector<double> price = {}) {
  market::Trace t;
  t.name = "z";
  t.gap_seconds = 3600;
  t.available = std::move(available);
  t.price = std::move(price);
  return t;
}

class FleetModelTest : public ::testing::Test {
 protected:
  FleetModelTest() : a_(Zone({4, 2, 0, 4})), b_(Zone({1, 1, 1, 1}, {0.3, 0.6, 0.3, 0.3})) {
    zones_ = {&a_, &b_};
  }
  FleetModel Make(FleetJob job) { return FleetModel(zones_, UniformTypes(zones_, 3), job); }
  market::Trace a_, b_;
  std::vector<const market::Trace*> zones_;
};

TEST_F(FleetModelTest, ReclaimTakesTheNewestAboveCapacity) {
  FleetModel m = Make({.nodes = 4, .min_nodes = 1, .startup_hours = 0});
  EXPECT_EQ(m.Apply(std::vector<PoolTarget>{{.pool = PoolRef::Spot(0), .count = 4}}, 0), 4);
  EXPECT_EQ(m.Reclaim(1), 2);  // capacity 2
  ASSERT_EQ(m.instances().size(), 4u);
  EXPECT_EQ(m.instances()[0].state, InstanceState::kRunning);
  EXPECT_EQ(m.instances()[1].state, InstanceState::kRunning);
  EXPECT_EQ(m.instances()[2].state, InstanceState::kPreempted);
  EXPECT_EQ(m.instances()[3].state, InstanceState::kPreempted);
  EXPECT_EQ(m.Held(PoolRef::Spot(0)), 2);
  EXPECT_EQ(m.Reclaim(2), 2);  // capacity 0; the preempted ones are gone now
  EXPECT_EQ(m.instances().size(), 2u);
  EXPECT_EQ(m.Held(PoolRef::Spot(0)), 0);
}

TEST_F(FleetModelTest, ApplyTerminatesNewestAndIgnoresBadPools) {
  FleetModel m = Make({.nodes = 2});
  m.Apply(std::vector<PoolTarget>{{.pool = PoolRef::Spot(0), .count = 3}}, 0);
  const std::vector<PoolTarget> fewer = {{.pool = PoolRef::Spot(0), .count = 1},
                                         {.pool = PoolRef::Spot(7), .count = 5},
                                         {.pool = PoolRef::Spot(-1), .count = 5},
                                         {.pool = PoolRef::Spot(0), .count = 9}};  // named twice
  EXPECT_EQ(m.Apply(fewer, 0), 0);
  ASSERT_EQ(m.instances().size(), 1u);
  EXPECT_EQ(m.instances()[0].id, 1);
  // Pools not named hold nothing; on-demand has no capacity limit.
  EXPECT_EQ(m.Apply(std::vector<PoolTarget>{{.pool = PoolRef::OnDemand(), .count = 6}}, 2), 6);
  EXPECT_EQ(m.Held(PoolRef::Spot(0)), 0);
  EXPECT_EQ(m.Held(PoolRef::OnDemand()), 6);
}

TEST_F(FleetModelTest, BidsGateLaunchesAndReclaim) {
  FleetModel m = Make({.nodes = 1});
  const std::vector<PoolTarget> bid = {{.pool = PoolRef::Spot(1), .count = 1, .max_price = 0.5}};
  EXPECT_EQ(m.Apply(bid, 1), 0);  // 0.6 > 0.5
  EXPECT_EQ(m.Apply(bid, 0), 1);
  EXPECT_EQ(m.Reclaim(1), 1);
  EXPECT_EQ(m.Reclaim(2), 0);
}

TEST_F(FleetModelTest, StartupThenProgressAndPerPoolBilling) {
  // 2 spot in zone 0 (1 $/h, no prices) and 1 on-demand (3 $/h), N = 2, d = 0.25:
  // ready at 0.25 h: 0.75 h x 3/2 = 1.125 compute-hours; $ (2 x 1 + 3) x 1.
  FleetModel m = Make({.nodes = 2, .min_nodes = 1, .startup_hours = 0.25, .compute_hours = 10});
  m.Apply(std::vector<PoolTarget>{{.pool = PoolRef::Spot(0), .count = 2},
                                  {.pool = PoolRef::OnDemand(), .count = 1}},
          0);
  EXPECT_EQ(m.instances()[0].state, InstanceState::kStarting);
  TickOutcome o = m.RunTick(0, 0);
  EXPECT_NEAR(o.progress, 1.125, 1e-12);
  EXPECT_NEAR(o.cost, 5, 1e-12);
  EXPECT_NEAR(o.spot_hours, 1, 1e-12);
  EXPECT_NEAR(o.od_hours, 0.5, 1e-12);
  EXPECT_EQ(m.instances()[0].state, InstanceState::kRunning);
  // Completion inside the next tick: 10 - 1.125 left at 1.5 per hour is past
  // the tick; with C = 2, 0.875 / 1.5 h of it is used and billed.
  FleetModel n = Make({.nodes = 2, .min_nodes = 1, .startup_hours = 0.25, .compute_hours = 2});
  n.Apply(std::vector<PoolTarget>{{.pool = PoolRef::Spot(0), .count = 2},
                                  {.pool = PoolRef::OnDemand(), .count = 1}},
          0);
  (void)n.RunTick(0, 0);
  TickOutcome done = n.RunTick(1, 1.125);
  EXPECT_TRUE(done.done);
  EXPECT_NEAR(done.used_hours, 0.875 / 1.5, 1e-12);
  EXPECT_NEAR(done.cost, 5 * 0.875 / 1.5, 1e-12);
}

TEST_F(FleetModelTest, MinNodesAndLockstep) {
  FleetModel gang = Make({.nodes = 3, .min_nodes = 3, .startup_hours = 0});
  gang.Apply(std::vector<PoolTarget>{{.pool = PoolRef::Spot(0), .count = 2}}, 0);
  EXPECT_EQ(gang.RunTick(0, 0).progress, 0);  // 2 of a gang of 3: no progress, still billed
  EXPECT_NEAR(gang.RunTick(0, 0).cost, 2, 1e-12);
  std::vector<TypeFacts> types = UniformTypes(zones_, 3);
  types[0].throughput = 3;
  FleetModel lockstep(zones_, types, {.nodes = 2, .min_nodes = 1, .balanced = false});
  const Instance* fast[] = {nullptr};
  Instance i{.pool = PoolRef::Spot(0)};
  Instance j{.pool = PoolRef::OnDemand()};
  fast[0] = &i;
  EXPECT_NEAR(lockstep.Rate(fast), 1.5, 1e-12);
  const Instance* both[] = {&i, &j};
  EXPECT_NEAR(lockstep.Rate(both), 1.0, 1e-12);  // 2 x the slowest (1) / 2
}

TEST(ReclaimedInPool, BidsFirstThenTheNewestAboveCapacity) {
  const double bids[] = {0, 0.5, 0, 0, 2.0};
  // Price 1.0: the bid of 0.5 loses; 4 left for a capacity of 2: the two newest
  // of those (indices 4 and 3) go too.
  EXPECT_EQ(ReclaimedInPool(bids, 2, 1.0), (std::vector<size_t>{1, 3, 4}));
  EXPECT_EQ(ReclaimedInPool(bids, 5, 0.4), (std::vector<size_t>{}));
  EXPECT_EQ(ReclaimedInPool(bids, 0, 0.4), (std::vector<size_t>{0, 1, 2, 3, 4}));
  EXPECT_EQ(ReclaimedInPool({}, 0, 1.0), (std::vector<size_t>{}));
}

}  // namespace
}  // namespace spot::fleet
