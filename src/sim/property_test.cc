// Properties over generated traces: the omniscient DP is the exact optimum on
// tiny markets (checked against brute force over every decision sequence),
// and a lower bound on every policy everywhere; up, greedy and ours meet
// every deadline that can be met.
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <random>
#include <tuple>

#include "fleet/migration.h"
#include "policy/mdp_policy.h"
#include "policy/omniscient.h"
#include "policy/registry.h"
#include "policy/test_traces.h"
#include "sim/spot_sim.h"

namespace spot::sim {
namespace {

using policy::testing::RandomTrace;

class FixedPolicy final : public policy::Policy {
 public:
  explicit FixedPolicy(const std::vector<Placement>* s) : s_(s) {}
  std::string_view name() const override { return "fixed"; }
  policy::Decision Decide(const policy::Observation& o) override {
    return o.Gang(o.tick < static_cast<int64_t>(s_->size()) ? (*s_)[o.tick]
                                                            : Placement::OnDemand());
  }

 private:
  const std::vector<Placement>* s_;
};

// Minimum cost over all 4^T sequences of {idle, spot z0, spot z1, od} that
// meet the deadline (or +inf).
double BruteForce(std::span<const market::Trace* const> zones, const JobSpec& job, int T) {
  std::vector<Placement> choices = {Placement::Idle(), Placement::OnDemand()};
  for (int z = 0; z < static_cast<int>(zones.size()); ++z) choices.push_back(Placement::Spot(z));
  std::vector<Placement> seq(T);
  double best = 1e300;
  std::function<void(int)> rec = [&](int i) {
    if (i == T) {
      FixedPolicy p(&seq);
      RunResult r = SimulateJob(p, zones, 0, job);
      if (r.met_deadline) best = std::min(best, r.cost);
      return;
    }
    for (const Placement& c : choices) seq[i] = c, rec(i + 1);
  };
  rec(0);
  return best;
}

TEST(Omniscient, EqualsBruteForceOnTinyMarkets) {
  std::mt19937_64 rng(11);
  // g = 600 s, d = 0.2 h (changeover over two ticks), C = 0.6 h, D = 1.25 h: 8 ticks.
  JobSpec job{
      .compute_hours = 0.6, .deadline_hours = 1.25, .changeover_hours = 0.2, .ondemand_price = 3};
  for (int trial = 0; trial < 12; ++trial) {
    auto a = RandomTrace(rng, 600, 10, 3, 2, trial % 2 == 0);
    auto b = RandomTrace(rng, 600, 10, 2, 2, true);
    std::vector<const market::Trace*> zones = {&a};
    if (trial >= 8) zones.push_back(&b);
    int T = 8;
    double brute = BruteForce(zones, job, T);
    auto plan = policy::SolveOmniscient({zones, 0}, job);
    ASSERT_TRUE(plan.ok());
    ASSERT_TRUE(plan->feasible);
    EXPECT_TRUE(plan->exact);
    EXPECT_NEAR(plan->cost, brute, 1e-9) << "trial " << trial;
    // Its own plan, replayed in the simulator, costs exactly the bound.
    auto p = policy::MakeOmniscientPolicy();
    RunResult r = SimulateJob(*p, zones, 0, job);
    EXPECT_NEAR(r.cost, plan->cost, 1e-9);
    EXPECT_TRUE(r.met_deadline);
  }
}

// The same against brute force with every shape of changeover the DP folds
// differently (none; within one tick; exactly two ticks; a partial third
// tick), on two zones with prices, in one region and then in two regions
// with a $1 move between them (the simulator bills it on a launch in the
// other region than the job's state; the DP carries where the state is).
TEST(Omniscient, EqualsBruteForceForEveryChangeoverShape) {
  std::mt19937_64 rng(29);
  fleet::EgressPrices egress;
  ASSERT_TRUE(egress.Add("us-east-1", "us-west-2", 0.02).ok());
  ASSERT_TRUE(egress.Add("us-west-2", "us-east-1", 0.02).ok());
  for (bool moves : {false, true}) {
    for (double d : {0.0, 0.1, 1.0 / 3, 0.45}) {
      JobSpec job{.compute_hours = 0.6,
                  .deadline_hours = 1.25,
                  .changeover_hours = d,
                  .ondemand_price = 3,
                  .checkpoint_gb = moves ? 50.0 : 0.0,
                  .egress = moves ? &egress : nullptr};
      for (int trial = 0; trial < 4; ++trial) {
        auto a = RandomTrace(rng, 600, 10, 3, 2, true);
        auto b = RandomTrace(rng, 600, 10, 2, 1, trial % 2 == 0);
        a.pool.zone = "us-east-1a";
        b.pool.zone = "us-west-2a";
        std::vector<const market::Trace*> zones = {&a, &b};
        double brute = BruteForce(zones, job, 8);
        auto plan = policy::SolveOmniscient({zones, 0}, job);
        ASSERT_TRUE(plan.ok());
        ASSERT_TRUE(plan->feasible);
        EXPECT_TRUE(plan->exact);
        EXPECT_NEAR(plan->cost, brute, 1e-9)
            << "moves " << moves << " d " << d << " trial " << trial;
        auto p = policy::MakeOmniscientPolicy();
        RunResult r = SimulateJob(*p, zones, 0, job);
        EXPECT_NEAR(r.cost, plan->cost, 1e-9)
            << "moves " << moves << " d " << d << " trial " << trial;
        EXPECT_TRUE(r.met_deadline) << "moves " << moves << " d " << d << " trial " << trial;
      }
    }
  }
}

// Where a move through a third region costs less than the direct one, the
// DP prices the cheaper path: still a lower bound, no longer called exact.
TEST(Omniscient, DearDirectMovesStayABound) {
  std::mt19937_64 rng(31);
  fleet::EgressPrices egress;
  for (auto [from, to, usd] :
       {std::tuple{"us-east-1", "us-west-2", 0.001}, std::tuple{"us-west-2", "eu-west-1", 0.001},
        std::tuple{"us-east-1", "eu-west-1", 0.04}}) {
    ASSERT_TRUE(egress.Add(from, to, usd).ok());
    ASSERT_TRUE(egress.Add(to, from, usd).ok());
  }
  JobSpec job{.compute_hours = 0.6,
              .deadline_hours = 7.0 / 6,
              .changeover_hours = 0.1,
              .ondemand_price = 3,
              .checkpoint_gb = 50,
              .egress = &egress};
  for (int trial = 0; trial < 2; ++trial) {
    auto a = RandomTrace(rng, 600, 10, 2, 1, true);
    auto b = RandomTrace(rng, 600, 10, 2, 1, true);
    auto c = RandomTrace(rng, 600, 10, 2, 1, true);
    a.pool.zone = "us-east-1a";
    b.pool.zone = "us-west-2a";
    c.pool.zone = "eu-west-1a";
    std::vector<const market::Trace*> zones = {&a, &b, &c};
    double brute = BruteForce(zones, job, 7);
    auto plan = policy::SolveOmniscient({zones, 0}, job);
    ASSERT_TRUE(plan.ok());
    ASSERT_TRUE(plan->feasible);
    EXPECT_FALSE(plan->exact);
    EXPECT_LE(plan->cost, brute + 1e-9) << "trial " << trial;
  }
}

// A move between regions the egress prices do not name is refused, as the
// simulator refuses the market.
// Spot entered from on-demand make before break, by hand: 10-minute ticks,
// d = 15 min, spot (1/h) back from tick 3, on-demand 3/h, C = 1 h, D = 80
// min. On-demand from tick 0 (ready in tick 1) with spot started beside it
// at tick 3 (ready in tick 4, when on-demand goes) finishes at 80 min for
// 4 x 0.5 + 5 x 1/6 = $2.8333; one group at a time, only on-demand alone
// ($3.75, done at 75 min) meets the deadline: a switch to spot loses 15
// minutes. The bound with overlap entries is that schedule's cost, the
// one-group bound on-demand's.
TEST(Omniscient, OverlapEntriesBoundMakeBeforeBreak) {
  market::Trace t = policy::testing::MakeTrace(600, {0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1, 1});
  const market::Trace* zones[] = {&t};
  const JobSpec job{.compute_hours = 1,
                    .deadline_hours = 80.0 / 60,
                    .changeover_hours = 0.25,
                    .ondemand_price = 3};
  auto plain = policy::SolveOmniscient({zones, 0}, job);
  auto overlap = policy::SolveOmniscient({zones, 0}, job, {.overlap_entries = true});
  ASSERT_TRUE(plain.ok() && overlap.ok());
  ASSERT_TRUE(plain->feasible && overlap->feasible);
  EXPECT_NEAR(plain->cost, 3.75, 1e-9);
  EXPECT_NEAR(overlap->cost, 2 + 5.0 / 6, 1e-9);
  EXPECT_TRUE(overlap->placements.empty());  // a cost, no plan
  // The schedule itself, replayed by the simulator.
  class MakeBeforeBreak final : public policy::Policy {
   public:
    std::string_view name() const override { return "mbb"; }
    void Start(const policy::JobStart&) override {}
    policy::Decision Decide(const policy::Observation& obs) override {
      if (obs.tick < 3) return obs.Gang(Placement::OnDemand());
      if (obs.tick == 3) return policy::OnDemandWhileSpotStarts(0, 1);
      return obs.Gang(Placement::Spot(0));
    }
  } mbb;
  const RunResult r = SimulateJob(mbb, zones, 0, job);
  EXPECT_TRUE(r.met_deadline);
  EXPECT_NEAR(r.cost, overlap->cost, 1e-9);
  EXPECT_NEAR(r.finish_hours, job.deadline_hours, 1e-9);
}

TEST(Omniscient, AMoveWithoutAPriceIsRefused) {
  std::mt19937_64 rng(37);
  fleet::EgressPrices egress;
  auto a = RandomTrace(rng, 600, 10, 2, 1, true);
  auto b = RandomTrace(rng, 600, 10, 2, 1, true);
  a.pool.zone = "us-east-1a";
  b.pool.zone = "eu-west-1a";
  std::vector<const market::Trace*> zones = {&a, &b};
  JobSpec job{.compute_hours = 0.6,
              .deadline_hours = 1.25,
              .changeover_hours = 0.1,
              .checkpoint_gb = 50,
              .egress = &egress};
  auto plan = policy::SolveOmniscient({zones, 0}, job);
  ASSERT_FALSE(plan.ok());
  EXPECT_EQ(plan.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(plan.status().message().find("eu-west-1"), std::string::npos)
      << plan.status().message();
}

struct Market {
  double gap_s;
  int zones;
  bool prices;
  double mean_up, mean_down;
};

class PropertyTest : public ::testing::TestWithParam<Market> {};

TEST_P(PropertyTest, BoundAndDeadlines) {
  const Market m = GetParam();
  policy::PolicyRegistry registry;
  policy::RegisterBuiltinPolicies(registry);
  std::mt19937_64 rng(1234 + m.zones * 7 + static_cast<int>(m.gap_s));
  std::uniform_real_distribution<double> u(0, 1);
  int compared = 0;
  for (int trial = 0; trial < 40; ++trial) {
    std::vector<market::Trace> traces;
    for (int z = 0; z < m.zones; ++z) {
      traces.push_back(RandomTrace(rng, m.gap_s, 400, m.mean_up, m.mean_down, m.prices));
    }
    std::vector<const market::Trace*> zones;
    for (auto& t : traces) zones.push_back(&t);
    // C in [2, 8] h, D / C in [1.02, 1.6], d in whole minutes in [g, 0.5 h] (the
    // 2d net needs g <= d; whole minutes keep the DP's grid exact, so its
    // "feasible" is exact too: a coarse grid may call a hopeless job feasible).
    double gap_min = m.gap_s / 60;
    double d_min = std::ceil(gap_min + (30 - gap_min) * u(rng));
    JobSpec job{.compute_hours = 2 + 6 * u(rng),
                .deadline_hours = 0,
                .changeover_hours = d_min / 60,
                .ondemand_price = 3};
    job.deadline_hours = job.compute_hours * (1.02 + 0.58 * u(rng));
    int64_t start = static_cast<int64_t>(u(rng) * 100);
    auto plan = policy::SolveOmniscient({zones, start}, job);
    ASSERT_TRUE(plan.ok());
    ASSERT_TRUE(plan->exact);
    for (const char* name : {"od", "greedy", "up", "hazard-up", "forecast-up"}) {
      auto p = registry.Create(name);
      RunResult r = SimulateJob(**p, zones, start, job);
      if (plan->feasible) {
        EXPECT_LE(plan->cost, r.cost + 1e-9) << name << " trial " << trial;
        if (std::string(name) != "od") {
          EXPECT_TRUE(r.met_deadline) << name << " missed a feasible deadline, trial " << trial;
        }
        ++compared;
      } else {
        EXPECT_FALSE(r.met_deadline) << name << " met a deadline the bound calls infeasible";
      }
    }
  }
  EXPECT_GT(compared, 0);
}

INSTANTIATE_TEST_SUITE_P(Markets, PropertyTest,
                         ::testing::Values(Market{600, 1, false, 12, 6}, Market{600, 1, true, 4, 8},
                                           Market{195, 1, true, 30, 10}, Market{600, 2, true, 6, 6},
                                           Market{300, 3, false, 10, 20}));

}  // namespace
}  // namespace spot::sim
