// Registry and the decision rules of the rule-based policies on crafted observations.
#include <gtest/gtest.h>

#include "core/number_text.h"
#include "policy/registry.h"
#include "policy/test_traces.h"
#include "policy/uniform_progress.h"

namespace spot::policy {
namespace {

using testing::MakeTrace;

TEST(Registry, BuiltinsByName) {
  PolicyRegistry r;
  RegisterBuiltinPolicies(r);
  EXPECT_EQ(r.Names(), (std::vector<std::string>{"fleet-up", "forecast-up", "greedy", "hazard-up",
                                                 "mdp", "mdp-zones", "od", "omniscient", "up"}));
  for (const auto& n : r.Names()) {
    auto p = r.Create(n);
    ASSERT_TRUE(p.ok());
    EXPECT_EQ((*p)->name(), n);
  }
  auto bad = r.Create("nope");
  EXPECT_EQ(bad.status().code(), StatusCode::kNotFound);
  EXPECT_NE(bad.status().message().find("known: fleet-up, forecast-up, greedy"), std::string::npos);
  EXPECT_FALSE(r.Register("up", "", [] { return MakeUniformProgressPolicy(); }).ok());
  EXPECT_TRUE((*r.Create("omniscient"))->needs_future());
}

TEST(Fleet, GangDecisionsAsPoolTargets) {
  auto f = GangDecision(Placement::Spot(2), 4).fleet;
  ASSERT_EQ(f.size(), 1u);
  EXPECT_EQ(f[0].pool, fleet::PoolRef::Spot(2));
  EXPECT_EQ(f[0].count, 4);
  EXPECT_EQ(f[0].min_count, 4);
  EXPECT_TRUE(GangDecision(Placement::Idle(), 4).fleet.empty());
  EXPECT_EQ(GangDecision(Placement::OnDemand(), 4).fleet[0].pool, fleet::PoolRef::OnDemand());
  for (Placement p : {Placement::Idle(), Placement::Spot(3), Placement::OnDemand()}) {
    EXPECT_EQ(AsGang(GangDecision(p, 4).fleet, 4), p);
    EXPECT_EQ(ParseFleetName(PlacementName(p), 4), GangDecision(p, 4).fleet);
  }
  EXPECT_EQ(PlacementName(Placement::Spot(3)), "spot:3");
}

TEST(Fleet, MixedFleetNamesRoundTrip) {
  std::vector<fleet::PoolTarget> f = {
      {.pool = fleet::PoolRef::Spot(1), .count = 3, .min_count = 2, .max_price = 0.75},
      {.pool = fleet::PoolRef::OnDemand(4), .count = 1}};
  EXPECT_FALSE(AsGang(f, 4).has_value());
  const std::string name = FleetName(f, 4);
  EXPECT_EQ(name, "spot:1=3/2@0.75+od:4=1");
  EXPECT_EQ(ParseFleetName(name, 4), f);
  EXPECT_TRUE(ParseFleetName("spot:x", 4).empty());
  EXPECT_TRUE(ParseFleetName("spot:1=3+bogus", 4).empty());
  EXPECT_TRUE(ParseFleetName("idle", 4).empty());
}

TEST(Fleet, GangOfInstances) {
  using fleet::Instance;
  using fleet::PoolRef;
  std::vector<Instance> two_in_zone_1 = {{.id = 1, .pool = PoolRef::Spot(1)},
                                         {.id = 2, .pool = PoolRef::Spot(1)}};
  EXPECT_EQ(GangOf(two_in_zone_1, 2), Placement::Spot(1));
  EXPECT_EQ(GangOf(two_in_zone_1, 3), Placement::Idle());  // a broken gang
  two_in_zone_1[1].state = fleet::InstanceState::kPreempted;
  EXPECT_EQ(GangOf(two_in_zone_1, 2), Placement::Idle());
  EXPECT_EQ(FleetName(FleetOf(two_in_zone_1, 2), 2), "spot:1=1");
  std::vector<Instance> mixed = {{.id = 1, .pool = PoolRef::Spot(0)},
                                 {.id = 2, .pool = PoolRef::OnDemand()}};
  EXPECT_EQ(GangOf(mixed, 2), Placement::Idle());
  EXPECT_EQ(FleetName(FleetOf(mixed, 2), 2), "spot:0=1+od:-1=1");
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
    Observation o{.tick = static_cast<int64_t>(t),
                  .time_hours = t,
                  .job = job_,
                  .progress_hours = p,
                  .current = cur,
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
  EXPECT_EQ(testing::TargetOf(At(2, 5, Placement::Idle(), true)), Placement::Spot(0));
}
TEST_F(UpRules, IdleWhenAheadWithoutSpot) {
  EXPECT_EQ(testing::TargetOf(At(4, 2.5, Placement::Idle(), false)), Placement::Idle());
}
TEST_F(UpRules, OnDemandWhenBehind) {
  EXPECT_EQ(testing::TargetOf(At(4, 1.5, Placement::Idle(), false)), Placement::OnDemand());
}
TEST_F(UpRules, HysteresisKeepsOnDemandUntilEpOfTPlus2d) {
  // ep(4 + 1) = 2.5 > 2.2: stays on on-demand although spot is back.
  EXPECT_EQ(testing::TargetOf(At(4, 2.2, Placement::OnDemand(), true)), Placement::OnDemand());
  EXPECT_EQ(testing::TargetOf(At(4, 2.6, Placement::OnDemand(), true)), Placement::Spot(0));
}
TEST_F(UpRules, SafetyNetLatches) {
  // R = 20 - 10 = 10 < W + 2d = 9.8 + 1: on-demand, and it stays latched.
  EXPECT_EQ(testing::TargetOf(At(10, 0.2, Placement::Idle(), true)), Placement::OnDemand());
  EXPECT_EQ(testing::TargetOf(At(11, 9.9, Placement::OnDemand(), true)), Placement::OnDemand());
}

}  // namespace
}  // namespace spot::policy

namespace spot::policy {
namespace {

TEST(Registry, PoliciesTakeTheirParametersByName) {
  PolicyRegistry r;
  RegisterBuiltinPolicies(r);
  ComponentConfig c{
      .name = "hazard-up", .params = {{"min_runs", "8"}, {"median", "true"}}, .field = "policy"};
  EXPECT_TRUE(r.Create(c).ok());
  c.params["min_runs"] = "0";
  c.params["medain"] = "true";
  auto bad = r.Create(c);
  ASSERT_FALSE(bad.ok());
  const std::string m(bad.status().message());
  EXPECT_NE(m.find("policy.min_runs: must be >= 1 (got 0)"), std::string::npos) << m;
  EXPECT_NE(m.find("policy.medain: unknown parameter of 'hazard-up' (did you mean 'median'?)"),
            std::string::npos)
      << m;
  EXPECT_FALSE(r.Create(ComponentConfig{.name = "up", .params = {{"x", "1"}}}).ok());
  // Every parameter is documented: a help line and, for numbers, its bounds.
  for (const std::string& name : r.Names()) {
    for (const FieldInfo& f : r.Fields(name)) {
      EXPECT_FALSE(f.help.empty()) << name << "." << f.name;
      EXPECT_FALSE(f.default_value.empty()) << name << "." << f.name;
    }
  }
  EXPECT_EQ(r.Fields("forecast-up").back().default_value, "holt-winters");
}

// Tunables: every builtin grid point creates a policy, values[0] is the
// field's default (grid point 0 is the policy as registered), and bad
// declarations are refused.
TEST(RegistryTunables, BuiltinGridsStartAtTheDefaults) {
  PolicyRegistry r;
  RegisterBuiltinPolicies(r);
  EXPECT_TRUE(r.Tunables("up").empty());
  EXPECT_EQ(r.Grid("up"), std::vector<ParamSet>{ParamSet{}});
  for (const char* name : {"hazard-up", "forecast-up"}) {
    ASSERT_FALSE(r.Tunables(name).empty()) << name;
    size_t points = 1;
    for (const TunableParam& p : r.Tunables(name)) {
      points *= p.values.size();
      for (const FieldInfo& f : r.Fields(name)) {
        if (f.name == p.name) {
          Result<double> dflt = ParseNumber(f.default_value), first = ParseNumber(p.values[0]);
          ASSERT_TRUE(dflt.ok() && first.ok()) << name << "." << f.name;
          EXPECT_EQ(*dflt, *first) << name << "." << f.name;
        }
      }
    }
    std::vector<ParamSet> grid = r.Grid(name);
    ASSERT_EQ(grid.size(), points) << name;
    for (const ParamSet& point : grid) EXPECT_TRUE(r.Create(PolicyConfig(name, point)).ok());
  }
  EXPECT_EQ(FormatParams({}), "defaults");
  EXPECT_EQ(FormatParams({{"a", "1"}, {"b", "x"}}), "a=1, b=x");
}

TEST(RegistryTunables, BadDeclarationsAreRefused) {
  PolicyRegistry r;
  RegisterBuiltinPolicies(r);
  EXPECT_EQ(r.SetTunables("nope", {}).code(), StatusCode::kNotFound);
  EXPECT_FALSE(r.SetTunables("hazard-up", {{"no_such_field", {"1"}}}).ok());
  EXPECT_FALSE(r.SetTunables("hazard-up", {{"min_runs", {}}}).ok());
  EXPECT_FALSE(r.SetTunables("hazard-up", {{"min_runs", {"2"}}, {"min_runs", {"3"}}}).ok());
  // Out of bounds: refused, and the old grid stays.
  Status s = r.SetTunables("hazard-up", {{"min_runs", {"5", "0"}}});
  EXPECT_FALSE(s.ok());
  EXPECT_NE(s.message().find("min_runs"), std::string::npos) << s.message();
  EXPECT_EQ(r.Grid("hazard-up").size(), 9u);
  ASSERT_TRUE(r.SetTunables("hazard-up", {{"min_runs", {"5", "8"}}}).ok());
  EXPECT_EQ(r.Grid("hazard-up"), (std::vector<ParamSet>{{{"min_runs", "5"}}, {{"min_runs", "8"}}}));
}

}  // namespace
}  // namespace spot::policy
