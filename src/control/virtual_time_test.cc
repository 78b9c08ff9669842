// The controller in virtual time: a ManualClock, the FakeProvider standing in
// for the cloud and for the training, the real SQLite store and ledger. A
// 60-hour job over a market with dozens of preemptions runs in seconds and
// makes, tick for tick, the decisions SpotSim makes on the same market; a
// controller that dies half-way is replaced and the job goes on as if it had
// not.
#include <gtest/gtest.h>

#include <chrono>
#include <cstdio>
#include <random>

#include "cloud/fake_provider.h"
#include "control/controller.h"
#include "control/crashing_provider_testing.h"
#include "control/markov_zone_testing.h"
#include "core/clock.h"
#include "core/temp_dir.h"
#include "policy/registry.h"
#include "sim/spot_sim.h"

namespace spot::control {
namespace {

constexpr double kGap = testing::kMarkovZoneGap;
constexpr double kInterval = 65;  // three reconcile passes a tick
constexpr char kHash[] = "virtual";

class VirtualTimeTest : public ::testing::Test {
 protected:
  void SetUp() override {
    policy::RegisterBuiltinPolicies(registry_);
    auto dir = TempDir::Create("spot_virtual_time_test");
    ASSERT_TRUE(dir.ok());
    dir_.emplace(std::move(dir).value());
    auto store = JobStore::Open((dir_->path() / "jobs.db").string());
    ASSERT_TRUE(store.ok()) << store.status().ToString();
    store_ = std::move(store).value();
    traces_ = {testing::MarkovZone(11, "us-east-1a", 1400, 30, 6),
               testing::MarkovZone(12, "us-east-1b", 1400, 20, 10)};
    for (const market::Trace& t : traces_) zones_.push_back(&t);
    spec_.source = "job.yaml";
    spec_.name = "virtual";
    spec_.compute_hours = 48;
    spec_.deadline_hours = 60;
    spec_.resources.nodes = 2;
    spec_.resources.ondemand_price = 3.06;
    spec_.resources.changeover_hours = 0.2;
    spec_.market.time_compression = 1;  // virtual time is market time
    spec_.market.start_tick = 17;
    spec_.controller.reconcile_interval_s = kInterval;
    spec_.controller.terminate_grace_s = 0;
  }

  cloud::FakeProvider& World() {
    if (!world_) {
      world_ = std::make_unique<cloud::FakeProvider>(
          cloud::FakeProviderOptions{.zones = zones_,
                                     .job = policy::ToFleetJob(ToPolicyJob(spec_)),
                                     .start_tick = spec_.market.start_tick});
    }
    return *world_;
  }

  ControllerDeps Deps(cloud::Provider* provider, const std::string& policy) {
    auto p = registry_.Create(policy);
    EXPECT_TRUE(p.ok());
    ControllerDeps d{.store = store_.get(),
                     .provider = provider,
                     .zones = zones_,
                     .policy = std::move(p).value(),
                     .clock = &clock_,
                     .new_job_epoch_unix_s = epoch_};
    d.read_progress = [this] {
      return KnownProgress(World().Progress(clock_.NowUnixS() - epoch_));
    };
    return d;
  }

  Result<JobOutcome> Run(const std::string& policy) {
    Controller c(spec_, Deps(&World(), policy));
    return c.Run(kHash);
  }

  sim::RunResult Simulate(const std::string& policy) {
    auto p = registry_.Create(policy);
    EXPECT_TRUE(p.ok());
    return sim::SimulateJob(**p, zones_, spec_.market.start_tick, ToPolicyJob(spec_),
                            {.record_timeline = true});
  }

  void RunAndCompare(const std::string& policy);

  // The controller's decisions, ledger and counts against SpotSim's run.
  void ExpectSameAsSpotSim(const sim::RunResult& sim, const JobOutcome& out) {
    auto decisions = store_->Decisions(spec_.name);
    ASSERT_TRUE(decisions.ok());
    ASSERT_EQ(decisions->size(), sim.timeline.size());
    for (size_t t = 0; t < sim.timeline.size(); ++t) {
      const DecisionRecord& d = (*decisions)[t];
      const sim::TickRecord& s = sim.timeline[t];
      ASSERT_EQ(d.target, s.fleet) << "tick " << t;
      ASSERT_EQ(d.current, s.current) << "tick " << t;
      ASSERT_EQ(d.preempted, s.preempted) << "tick " << t;
      const double sim_progress = t > 0 ? sim.timeline[t - 1].progress : 0;
      ASSERT_NEAR(d.progress_hours, sim_progress, 1e-6) << "tick " << t;
    }
    EXPECT_EQ(out.preemptions, sim.preemptions);
    // The ledger bills to the pass that saw the end (at most one interval
    // after it, on the gang of 2 at its price); SpotSim to the second.
    auto total = store_->TotalCost(spec_.name);
    ASSERT_TRUE(total.ok());
    EXPECT_GE(*total, sim.cost - 1e-6);
    EXPECT_LE(*total, sim.cost + 2 * 3.06 * kInterval / 3600 + 1e-6);
    EXPECT_NEAR(out.sim_hours, sim.finish_hours, kInterval / 3600 + 1e-9);
  }

  policy::PolicyRegistry registry_;
  std::optional<TempDir> dir_;
  std::unique_ptr<JobStore> store_;
  std::vector<market::Trace> traces_;
  std::vector<const market::Trace*> zones_;
  RunSpec spec_;
  ManualClock clock_{1.7e9};
  const double epoch_ = 1.7e9;
  std::unique_ptr<cloud::FakeProvider> world_;
};

// A 60-hour job (C = 48 h, D = 60 h, a gang of 2) under `policy`.
void VirtualTimeTest::RunAndCompare(const std::string& policy) {
  const auto wall = std::chrono::steady_clock::now();
  auto out = Run(policy);
  ASSERT_TRUE(out.ok()) << out.status().ToString();
  EXPECT_EQ(out->state, JobState::kSucceeded) << out->message;
  const sim::RunResult sim = Simulate(policy);
  EXPECT_GE(sim.preemptions, 24) << "the market should preempt dozens of times";
  EXPECT_GE(sim.instances_reclaimed, sim.preemptions);
  ExpectSameAsSpotSim(sim, *out);
  std::printf(
      "[ virtual  ] %s: %.1f simulated hours, %d preemptions, %d decisions, $%.2f, in %.2f s\n",
      policy.c_str(), out->sim_hours, out->preemptions, out->decisions, out->cost_usd,
      std::chrono::duration<double>(std::chrono::steady_clock::now() - wall).count());
}

TEST_F(VirtualTimeTest, UniformProgressDecisionForDecisionAsSpotSim) { RunAndCompare("up"); }
TEST_F(VirtualTimeTest, GreedyDecisionForDecisionAsSpotSim) { RunAndCompare("greedy"); }
TEST_F(VirtualTimeTest, HazardUpDecisionForDecisionAsSpotSim) { RunAndCompare("hazard-up"); }

TEST_F(VirtualTimeTest, AControllerThatDiesIsReplacedWithoutADifference) {
  {
    testing::CrashingProvider mortal(&World(), 1500);  // dies about half-way
    Controller first(spec_, Deps(&mortal, "up"));
    EXPECT_THROW((void)first.Run(kHash), testing::SimulatedCrash);
  }
  clock_.Advance(3 * kInterval);  // the world goes on while no controller watches
  auto out = Run("up");
  ASSERT_TRUE(out.ok()) << out.status().ToString();
  EXPECT_TRUE(out->resumed);
  EXPECT_EQ(out->state, JobState::kSucceeded) << out->message;
  const sim::RunResult sim = Simulate("up");
  // The gap without a controller delays what it would have done at the
  // ticks it missed; compare the decisions it did take as SpotSim's until
  // then, and the whole ledger's continuity.
  auto decisions = store_->Decisions(spec_.name);
  ASSERT_TRUE(decisions.ok());
  for (size_t t = 0; t < 400 && t < decisions->size(); ++t) {
    ASSERT_EQ((*decisions)[t].target, sim.timeline[t].fleet) << "tick " << t;
  }
  // Every instance alive when the first controller died was adopted.
  auto events = store_->Events(spec_.name);
  ASSERT_TRUE(events.ok());
  int resumes = 0;
  for (const EventRecord& e : *events) {
    EXPECT_NE(e.kind, "lost") << e.instance_id << ": " << e.detail;
    resumes += e.kind == "resume" ? 1 : 0;
  }
  EXPECT_EQ(resumes, 1);
  auto all = store_->Instances(spec_.name, false);
  auto ledger = store_->Ledger(spec_.name);
  ASSERT_TRUE(all.ok() && ledger.ok());
  for (const InstanceRecord& r : *all) {
    ASSERT_TRUE(r.ended_s.has_value()) << r.id;
    double at = r.launched_s;
    for (const LedgerEntry& e : *ledger) {
      if (e.instance_id != r.id) continue;
      EXPECT_DOUBLE_EQ(e.from_s, at) << r.id;  // no gap, no double count
      at = e.to_s;
    }
    EXPECT_DOUBLE_EQ(at, *r.ended_s) << r.id;
  }
}

// A budget is a ceiling: the job stops before it would spend more, looking
// one pass ahead (twice the time between passes, at the rate that runs), so
// it ends within those passes' cost below it and never above.
TEST_F(VirtualTimeTest, ABudgetIsNeverOverspent) {
  spec_.budget_usd = 20;
  auto out = Run("up");
  ASSERT_TRUE(out.ok()) << out.status().ToString();
  EXPECT_EQ(out->state, JobState::kFailed);
  EXPECT_NE(out->message.find("budget of $20.00"), std::string::npos) << out->message;
  auto total = store_->TotalCost(spec_.name);
  ASSERT_TRUE(total.ok());
  EXPECT_DOUBLE_EQ(*total, out->cost_usd);
  EXPECT_LE(*total, 20 + 1e-9);
  // The gang at on-demand price, for three passes (the two looked ahead and
  // the one before the check).
  EXPECT_GE(*total, 20 - 3 * 2 * 3.06 * kInterval / 3600);
  auto live = store_->Instances(spec_.name, true);
  ASSERT_TRUE(live.ok());
  EXPECT_TRUE(live->empty());
}

}  // namespace
}  // namespace spot::control
