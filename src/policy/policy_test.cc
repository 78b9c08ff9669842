// Registry and the decision rules of the rule-based policies on crafted observations.
#include <gtest/gtest.h>

#include "policy/registry.h"
#include "policy/test_traces.h"
#include "policy/uniform_progress.h"

namespace spot::policy {
namespace {

using testing::MakeTrace;

TEST(Registry, BuiltinsByName) {
  PolicyRegistry r;
  RegisterBuiltinPolicies(r);
  EXPECT_EQ(r.Names(), (std::vector<std::string>{"forecast-up", "greedy", "hazard-up", "od",
                                                 "omniscient", "up"}));
  for (const auto& n : r.Names()) {
    auto p = r.Create(n);
    ASSERT_TRUE(p.ok());
    EXPECT_EQ((*p)->name(), n);
  }
  auto bad = r.Create("nope");
  EXPECT_EQ(bad.status().code(), StatusCode::kNotFound);
  EXPECT_NE(bad.status().message().find("known: forecast-up, greedy"), std::string::npos);
  EXPECT_FALSE(r.Register("up", "", [] { return MakeUniformProgressPolicy(); }).ok());
  EXPECT_TRUE((*r.Create("omniscient"))->needs_future());
}

TEST(Fleet, DecisionAsPoolTargets) {
  JobSpec job{.nodes = 4};
  auto f = ToFleet({Placement::Spot(2)}, job);
  ASSERT_EQ(f.size(), 1u);
  EXPECT_EQ(f[0].zone, 2);
  EXPECT_EQ(f[0].spot, 4);
  EXPECT_TRUE(ToFleet({Placement::Idle()}, job).empty());
  EXPECT_EQ(ToFleet({Placement::OnDemand()}, job)[0].on_demand, 4);
}

// UP's rules, one by one, with C = 10, D = 20 (ep(t) = t / 2), d = 0.5.
class UpRules : public ::testing::Test {
 protected:
  UpRules() : up_(MakeUniformProgressPolicy()) {
    zones_[0] = &down_;
    zones_[1] = &live_;
  }
  Decision At(double t, double p, Placement cur, bool spot) {
    const market::Trace* z[] = {spot ? zones_[1] : zones_[0]};
    spans_.assign(z, z + 1);
    Observation o{.tick = static_cast<int64_t>(t), .time_hours = t, .job = job_,
                  .progress_hours = p, .current = cur,
                  .market = MarketView(spans_, static_cast<int64_t>(t), 1)};
    return up_->Decide(o);
  }
  JobSpec job_{.compute_hours = 10, .deadline_hours = 20, .changeover_hours = 0.5};
  market::Trace down_ = MakeTrace(3600, std::vector<int32_t>(30, 0));
  market::Trace live_ = MakeTrace(3600, std::vector<int32_t>(30, 1));
  const market::Trace* zones_[2];
  std::vector<const market::Trace*> spans_;
  std::unique_ptr<Policy> up_;
};

TEST_F(UpRules, TakesSpotEvenWhenAhead) {
  EXPECT_EQ(At(2, 5, Placement::Idle(), true).target, Placement::Spot(0));
}
TEST_F(UpRules, IdleWhenAheadWithoutSpot) {
  EXPECT_EQ(At(4, 2.5, Placement::Idle(), false).target, Placement::Idle());
}
TEST_F(UpRules, OnDemandWhenBehind) {
  EXPECT_EQ(At(4, 1.5, Placement::Idle(), false).target, Placement::OnDemand());
}
TEST_F(UpRules, HysteresisKeepsOnDemandUntilEpOfTPlus2d) {
  // ep(4 + 1) = 2.5 > 2.2: stays on on-demand although spot is back.
  EXPECT_EQ(At(4, 2.2, Placement::OnDemand(), true).target, Placement::OnDemand());
  EXPECT_EQ(At(4, 2.6, Placement::OnDemand(), true).target, Placement::Spot(0));
}
TEST_F(UpRules, SafetyNetLatches) {
  // R = 20 - 10 = 10 < W + 2d = 9.8 + 1: on-demand, and it stays latched.
  EXPECT_EQ(At(10, 0.2, Placement::Idle(), true).target, Placement::OnDemand());
  EXPECT_EQ(At(11, 9.9, Placement::OnDemand(), true).target, Placement::OnDemand());
}

}  // namespace
}  // namespace spot::policy
