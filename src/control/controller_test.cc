// The controller end to end on this machine (controller_testing.h): its
// decisions against SpotSim's, the ledger, the job's states, stragglers,
// cancellation and the budget.
#include <gtest/gtest.h>

#include <chrono>
#include <string>
#include <thread>
#include <vector>

#include "control/controller_testing.h"

namespace spot::control {
namespace {

using namespace controller_testing;  // NOLINT: the controller tests' world
using std::chrono::milliseconds;

TEST_F(ControllerTest, GreedyDecisionsMatchSpotSim) {
  // a (cheapest) goes at 20, back at 45, gone again 70..75; c goes 50..60;
  // every zone is down 70..75 (idle); b is the dearest.
  SetMarket({Zone("us-east-1a", 0.85, {{20, 45}, {70, 75}}), Zone("us-east-1b", 1.1, {{70, 75}}),
             Zone("us-east-1c", 1.0, {{50, 60}, {70, 75}})});
  spec_ = Spec(1.5, 12);  // the deadline is far: progress never matters to greedy
  JobOutcome out = RunJob();
  EXPECT_EQ(out.state, JobState::kSucceeded) << out.message;

  auto greedy = registry_.Create("greedy");
  ASSERT_TRUE(greedy.ok());
  sim::RunResult sim = sim::SimulateJob(**greedy, zones_, spec_.market.start_tick,
                                        ToPolicyJob(spec_), {.record_timeline = true});
  auto decisions = store_->Decisions(spec_.name);
  ASSERT_TRUE(decisions.ok());
  const size_t common = std::min(decisions->size(), sim.timeline.size());
  ASSERT_GT(common, 80u) << decisions->size() << " decisions, " << sim.timeline.size()
                         << " simulated ticks";
  int moves = 0;
  for (size_t t = 0; t < common; ++t) {
    const DecisionRecord& d = (*decisions)[t];
    const sim::TickRecord& s = sim.timeline[t];
    ASSERT_EQ(d.tick, static_cast<int64_t>(t));
    EXPECT_EQ(d.target, s.fleet) << "tick " << t;
    EXPECT_EQ(d.current, s.current) << "tick " << t;
    EXPECT_EQ(d.preempted, s.preempted) << "tick " << t;
    if (t > 0 && d.target != (*decisions)[t - 1].target) ++moves;
  }
  EXPECT_EQ(sim.preemptions, 3);
  EXPECT_EQ(out.preemptions, 3);
  EXPECT_GE(moves, 4);  // a -> c -> a -> idle -> a
  EXPECT_EQ((*decisions)[75].target, "spot:0");
  ExpectLedgerExact();
}

TEST_F(ControllerTest, LedgerIsContiguousAndPricedFromTheTraces) {
  // Both zones go at tick 10 for long: the safety net moves the job to on-demand.
  SetMarket({Zone("us-east-1a", 0.9, {{10, 300}}), Zone("us-east-1b", 1.0, {{10, 50}})});
  spec_ = Spec(1, 1.4);
  JobOutcome out = RunJob();
  EXPECT_EQ(out.state, JobState::kSucceeded) << out.message;
  auto all = store_->Instances(spec_.name, false);
  ASSERT_TRUE(all.ok());
  std::set<std::string> kinds;
  for (const InstanceRecord& r : *all) kinds.insert((r.spot ? "spot/" : "od/") + r.end_reason);
  EXPECT_TRUE(kinds.count("spot/preempted")) << ::testing::PrintToString(kinds);
  EXPECT_TRUE(kinds.count("od/terminated")) << ::testing::PrintToString(kinds);
  EXPECT_EQ(out.preemptions, 1);
  EXPECT_GT(out.cost_usd, 0);
  ExpectLedgerExact();
}

TEST_F(ControllerTest, StatesFollowALossAndTheRecovery) {
  SetMarket(OneLoss());
  spec_ = Spec(1, 12);
  JobOutcome out = RunJob();
  EXPECT_EQ(out.state, JobState::kSucceeded) << out.message;
  EXPECT_FALSE(out.resumed);
  EXPECT_EQ(out.preemptions, 1);
  EXPECT_EQ(out.instances_reclaimed, kNodes);  // the gang, instance by instance
  EXPECT_EQ(out.notices, kNodes);
  EXPECT_EQ(out.launches, 2 * kNodes);
  const std::vector<std::string> want = {"PENDING -> PROVISIONING", "PROVISIONING -> RUNNING",
                                         "RUNNING -> RECOVERING", "RECOVERING -> RUNNING",
                                         "RUNNING -> SUCCEEDED"};
  EXPECT_EQ(StateChanges(), want);
  // The gang of zone a was reclaimed at tick 40 (notice 2 ticks before), b's given back.
  auto all = store_->Instances(spec_.name, false);
  ASSERT_TRUE(all.ok());
  for (const InstanceRecord& r : *all) {
    EXPECT_EQ(r.end_reason, r.zone == 0 ? "preempted" : "terminated") << r.id;
    if (r.zone == 0) {
      EXPECT_EQ(*r.ended_s, 40 * kGap);
    }
  }
  auto events = store_->Events(spec_.name);
  ASSERT_TRUE(events.ok());
  int notices = 0;
  for (const EventRecord& e : *events) notices += e.kind == "notice" && e.sim_s == 38 * kGap;
  EXPECT_EQ(notices, kNodes);
  ExpectLedgerExact();
}

TEST_F(ControllerTest, TrainingThatEndsWhileRecoveringSucceeds) {
  // An elastic training can finish its last steps on the workers that are
  // left while the controller is still recovering the gang. Here the stand-in
  // reports a few steps while the job runs, and the end of the training as
  // soon as the job is RECOVERING (after the loss of zone a at tick 40).
  SetMarket(OneLoss());
  spec_ = Spec(3, 12);
  cloud::LocalProvider& p = NewProvider(WallNow());
  Controller c(spec_, Deps(&p, &p));
  std::atomic<bool> stop{false};
  std::thread training([&] {
    while (!stop) {
      std::this_thread::sleep_for(milliseconds(2));
      auto job = store_->GetJob(spec_.name);
      if (!job.ok() || !job->has_value()) continue;
      const JobState s = (*job)->state;
      const bool done = s == JobState::kRecovering;
      nlohmann::json j = {{"step", done ? kTotalSteps : 10},
                          {"total_steps", kTotalSteps},
                          {"world", s == JobState::kPending ? 0 : 1},
                          {"done", done}};
      std::ofstream(progress_path_ + ".tmp", std::ios::trunc) << j.dump();
      fs::rename(progress_path_ + ".tmp", progress_path_);
      if (done || IsTerminal(s)) break;
    }
  });
  auto out = RunToEnd(c);
  stop = true;
  training.join();
  ASSERT_TRUE(out.ok()) << out.status().ToString();
  EXPECT_EQ(out->state, JobState::kSucceeded) << out->message;
  const std::vector<std::string> want = {"PENDING -> PROVISIONING", "PROVISIONING -> RUNNING",
                                         "RUNNING -> RECOVERING", "RECOVERING -> RUNNING",
                                         "RUNNING -> SUCCEEDED"};
  EXPECT_EQ(StateChanges(), want);
  auto live = store_->Instances(spec_.name, true);
  ASSERT_TRUE(live.ok());
  EXPECT_TRUE(live->empty());
  ExpectLedgerExact();
}

// Issue 20: a straggler flagged by rank 0 was only reported. With
// controller.replace_stragglers its instance is terminated once and the fleet
// target launches a replacement; the job goes on and the ledger stays whole.
TEST_F(ControllerTest, AFlaggedStragglerIsReplacedOnce) {
  SetMarket({Zone("us-east-1a", 0.9, {}), Zone("us-east-1b", 1.2, {})});
  spec_ = Spec(3, 12);
  spec_.controller.replace_stragglers = true;
  cloud::LocalProvider& p = NewProvider(WallNow());
  Controller c(spec_, Deps(&p, &p));
  std::atomic<bool> stop{false};
  std::string flagged;
  std::thread training([&] {
    int64_t step = 0;
    bool replaced = false;
    while (!stop) {
      std::this_thread::sleep_for(milliseconds(2));
      auto job = store_->GetJob(spec_.name);
      auto live = store_->Instances(spec_.name, true);
      auto all = store_->Instances(spec_.name, false);
      if (!job.ok() || !job->has_value() || !live.ok() || !all.ok()) continue;
      if (IsTerminal((*job)->state)) break;
      // Rank 0 flags the first instance of the first full gang, for as long as
      // the training goes on (as a worker keeps listing it), and the training
      // ends once a gang without it has run a while.
      if (flagged.empty() && live->size() == kNodes) flagged = live->front().id;
      replaced = replaced || (all->size() > kNodes && live->size() == kNodes &&
                              std::none_of(live->begin(), live->end(),
                                           [&](const auto& r) { return r.id == flagged; }));
      step = std::min<int64_t>(kTotalSteps, step + (replaced ? 20 : 1));
      nlohmann::json j = {{"step", step},
                          {"total_steps", kTotalSteps},
                          {"world", static_cast<int>(live->size())},
                          {"generation", 1},
                          {"done", step >= kTotalSteps}};
      if (!flagged.empty()) j["stragglers"] = {flagged};
      std::ofstream(progress_path_ + ".tmp", std::ios::trunc) << j.dump();
      fs::rename(progress_path_ + ".tmp", progress_path_);
      if (step >= kTotalSteps) break;
    }
  });
  auto out = RunToEnd(c);
  stop = true;
  training.join();
  ASSERT_TRUE(out.ok()) << out.status().ToString();
  EXPECT_EQ(out->state, JobState::kSucceeded) << out->message;
  ASSERT_FALSE(flagged.empty());
  auto events = store_->Events(spec_.name);
  ASSERT_TRUE(events.ok());
  int straggler_events = 0;
  for (const EventRecord& e : *events) {
    if (e.kind != "straggler") continue;
    ++straggler_events;
    EXPECT_EQ(e.instance_id, flagged);
    EXPECT_NE(e.detail.find("flagged by rank 0"), std::string::npos) << e.detail;
  }
  EXPECT_EQ(straggler_events, 1) << "replaced once, though still listed";
  auto all = store_->Instances(spec_.name, false);
  ASSERT_TRUE(all.ok());
  EXPECT_EQ(all->size(), static_cast<size_t>(kNodes + 1)) << "one replacement launched";
  for (const InstanceRecord& r : *all) {
    if (r.id == flagged) {
      EXPECT_EQ(r.end_reason, "terminated");
    }
  }
  EXPECT_EQ(out->launches, kNodes + 1);
  ExpectLedgerExact();
}

TEST_F(ControllerTest, CancelFromAnotherThreadTerminatesEverything) {
  SetMarket(OneLoss());
  spec_ = Spec(3, 12);
  cloud::LocalProvider& p = NewProvider(WallNow());
  StartTraining();
  Controller c(spec_, Deps(&p, &p));
  std::thread canceller([&] {
    EXPECT_TRUE(WaitFor([&] {
      auto job = store_->GetJob(spec_.name);
      return job.ok() && job->has_value() && (*job)->state == JobState::kRunning;
    }));
    EXPECT_TRUE(c.RequestCancel().ok());
  });
  auto out = RunToEnd(c);
  canceller.join();
  ASSERT_TRUE(out.ok()) << out.status().ToString();
  EXPECT_EQ(out->state, JobState::kCancelled);
  EXPECT_EQ(StateChanges().back(), "RUNNING -> CANCELLED");
  auto live = store_->Instances(spec_.name, true);
  ASSERT_TRUE(live.ok());
  EXPECT_TRUE(live->empty());
  for (const cloud::InstanceView& v : p.List()) EXPECT_NE(v.state, cloud::InstanceState::kRunning);
  EXPECT_TRUE(WaitFor([&] {
    (void)p.Poll(out->sim_hours * 3600);
    for (const cloud::InstanceView& v : p.List()) {
      if (v.process_running) return false;
    }
    return true;
  })) << "instance processes still run";
  ExpectLedgerExact();
}

TEST_F(ControllerTest, BudgetStopsTheJob) {
  SetMarket(OneLoss());
  spec_ = Spec(2, 12);
  spec_.budget_usd = 0.3;  // ~1.8 $/h for the gang: about 10 simulated minutes
  JobOutcome out = RunJob();
  EXPECT_EQ(out.state, JobState::kFailed);
  EXPECT_NE(out.message.find("budget of $0.30"), std::string::npos) << out.message;
  // The job stops before the budget is spent, looking ahead twice the longest
  // recent time between passes: a pass is about 10 ms of wall time, 36
  // simulated seconds here, and a loaded machine's slow pass makes it stop
  // earlier. The exact bounds, in virtual time, are
  // VirtualTimeTest.ABudgetIsNeverOverspent's; here a tick's cost ($0.03) of
  // slack for a pass more than twice slower than any before it.
  EXPECT_GT(out.cost_usd, 0);
  EXPECT_LE(out.cost_usd, 0.3 + 0.03);
  auto live = store_->Instances(spec_.name, true);
  ASSERT_TRUE(live.ok());
  EXPECT_TRUE(live->empty());
  ExpectLedgerExact();
}

}  // namespace
}  // namespace spot::control
