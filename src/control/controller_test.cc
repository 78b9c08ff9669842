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

// Make before break on a real cloud (ControllerDeps::group_members): `mdp`
// (acting as `up`, with a young market's rule: leaving on-demand for spot
// make before break) starts the spot gang beside on-demand when spot comes
// back at tick 40, and the model lets on-demand go in the tick the gang is
// ready by changeover_hours. Here the gang boots slower: its workers are not
// with the training group until the test says so. On-demand is kept until
// they are (`handover_joined`), or until controller.handover_timeout_s.
class HandoverTest : public ControllerTest {
 protected:
  struct Run {
    JobOutcome out;
    int64_t release_tick = -1;  // the decision that let on-demand go
    std::vector<EventRecord> events;
  };

  // `joins_after_wall_s`: when the spot workers join, in wall seconds after
  // the first hold (< 0: never). `members`: false runs without the
  // predicate (the model's word alone). `regroup`: when they join, a new
  // generation forms of them alone, the training not yet in it (the
  // on-demand workers are out of the group before the newcomers count as
  // with it).
  Run RunHandover(double timeout_s, double joins_after_wall_s, bool members = true,
                  bool regroup = false) {
    SetMarket({Zone("us-east-1a", 0.9, {{0, 40}}, 300, 0)});
    spec_ = Spec(2, 2.6, "mdp");
    spec_.controller.handover_timeout_s = timeout_s;
    cloud::LocalProvider& p = NewProvider(WallNow());
    StartTraining();
    ControllerDeps deps = Deps(&p, &p);
    auto first_hold_wall = std::make_shared<std::atomic<double>>(-1);
    if (members) {
      deps.group_members = [this, joins_after_wall_s, first_hold_wall,
                            regroup]() -> std::optional<GroupMembers> {
        auto live = store_->Instances(spec_.name, true);
        auto events = store_->Events(spec_.name);
        if (!live.ok() || !events.ok()) return std::nullopt;
        for (const EventRecord& e : *events) {
          if (e.kind == "handover-wait" && *first_hold_wall < 0) *first_hold_wall = e.wall_unix_s;
        }
        const bool spot_joined = *first_hold_wall >= 0 && joins_after_wall_s >= 0 &&
                                 WallNow() - *first_hold_wall >= joins_after_wall_s;
        GroupMembers m;  // generation 0: the stand-in training reports none
        if (regroup && spot_joined) m.generation = 1;
        for (const InstanceRecord& r : *live) {
          if (regroup && spot_joined ? r.spot : !r.spot || spot_joined) m.formed.insert(r.id);
        }
        return m;
      };
    }
    Controller c(spec_, std::move(deps));
    Run run;
    auto out = RunToEnd(c);
    EXPECT_TRUE(out.ok()) << out.status().ToString();
    if (out.ok()) run.out = *out;
    auto decisions = store_->Decisions(spec_.name);
    auto events = store_->Events(spec_.name);
    EXPECT_TRUE(decisions.ok() && events.ok());
    if (!decisions.ok() || !events.ok()) return run;
    for (const DecisionRecord& d : *decisions) {
      if (run.release_tick < 0 && d.current.find("od") != std::string::npos &&
          d.current.find("spot") != std::string::npos && d.target == "spot:0") {
        run.release_tick = d.tick;
      }
    }
    run.events = *events;
    return run;
  }

  // Every on-demand instance kept past the tick the model let it go (by the
  // 1 wall s, a simulated hour, its newcomers took to join), then handed
  // over: one "handover-wait" and one "handover" each, no timeout.
  void ExpectKeptUntilHandedOver(const Run& run) {
    EXPECT_EQ(run.out.state, JobState::kSucceeded) << run.out.message;
    ASSERT_GE(run.release_tick, 40) << "no make before break: the scenario is wrong";
    EXPECT_EQ(Count(run.events, "handover-wait"), kNodes);
    EXPECT_EQ(Count(run.events, "handover"), kNodes);
    EXPECT_EQ(Count(run.events, "handover-timeout"), 0);
    const double released_s = static_cast<double>(run.release_tick) * kGap;
    std::vector<double> ends = OnDemandEnds();
    ASSERT_EQ(ends.size(), static_cast<size_t>(kNodes));
    for (double end : ends) EXPECT_GE(end, released_s + 3600 - kGap) << released_s;
    ExpectLedgerExact();
  }

  // The on-demand instances' ends, in simulated seconds.
  std::vector<double> OnDemandEnds() {
    std::vector<double> ends;
    auto all = store_->Instances(spec_.name, false);
    EXPECT_TRUE(all.ok());
    for (const InstanceRecord& r : all.ok() ? *all : std::vector<InstanceRecord>{}) {
      if (!r.spot) ends.push_back(r.ended_s.value_or(-1));
    }
    return ends;
  }

  static int Count(const std::vector<EventRecord>& events, const std::string& kind) {
    return static_cast<int>(std::count_if(events.begin(), events.end(),
                                          [&](const EventRecord& e) { return e.kind == kind; }));
  }
};

// A newcomer is with the group once it waits for room (an agent's group is
// full until the old gang leaves), or once it is in the formed generation
// and the training has reported a step in that generation: before, the
// generation's process group is being built, and killing its old members
// then stalled the formation until Gloo's connect timeout (five times the
// group's timeout: 15 s at the e2e jobs' 3 s, docs/elastic.md).
TEST(GroupMembersTest, AFormedNewcomerCountsOnceTheTrainingReportsItsGeneration) {
  GroupMembers m{.generation = 3, .formed = {"od-1", "spot-1"}, .waiting = {"spot-2"}};
  EXPECT_FALSE(m.With("spot-1", 2));
  EXPECT_TRUE(m.With("spot-1", 3));
  EXPECT_TRUE(m.With("spot-2", 0));
  EXPECT_FALSE(m.With("spot-3", 3));
}

TEST_F(HandoverTest, OnDemandIsKeptUntilTheSpotGangJoinsTheTraining) {
  ExpectKeptUntilHandedOver(RunHandover(/*timeout_s=*/30, /*joins_after_wall_s=*/1));
}

// The group re-forms of the newcomers before the training reports a step in
// it: the kept on-demand workers are out of it, so they go, each with its
// "handover" (the e2e handover run once let one go without a word).
TEST_F(HandoverTest, KeptOnDemandLeftOutOfANewGroupGoesAndSaysSo) {
  ExpectKeptUntilHandedOver(
      RunHandover(/*timeout_s=*/30, /*joins_after_wall_s=*/1, true, /*regroup=*/true));
}

TEST_F(HandoverTest, AGangThatNeverJoinsIsWaitedForUpToTheTimeout) {
  Run run = RunHandover(/*timeout_s=*/0.3, /*joins_after_wall_s=*/-1);
  EXPECT_EQ(run.out.state, JobState::kSucceeded) << run.out.message;
  ASSERT_GE(run.release_tick, 40);
  EXPECT_EQ(Count(run.events, "handover-wait"), kNodes);
  EXPECT_EQ(Count(run.events, "handover-timeout"), kNodes);
  EXPECT_EQ(Count(run.events, "handover"), 0);
  const double released_s = static_cast<double>(run.release_tick) * kGap;
  for (double end : OnDemandEnds()) {
    EXPECT_GE(end, released_s + 0.3 * 3600 - kGap);
    EXPECT_LT(end, released_s + 0.3 * 3600 + 0.3 * 3600) << "held long past the timeout";
  }
  ExpectLedgerExact();
}

TEST_F(HandoverTest, WithoutMembershipOnDemandGoesWhenTheModelSays) {
  Run run = RunHandover(/*timeout_s=*/30, /*joins_after_wall_s=*/-1, /*members=*/false);
  EXPECT_EQ(run.out.state, JobState::kSucceeded) << run.out.message;
  ASSERT_GE(run.release_tick, 40);
  EXPECT_EQ(Count(run.events, "handover-wait"), 0);
  const double released_s = static_cast<double>(run.release_tick) * kGap;
  EXPECT_EQ(Count(run.events, "handover"), 0);
  EXPECT_EQ(Count(run.events, "handover-timeout"), 0);
  // Let go in the pass after the release (a slow pass, under a sanitizer,
  // lags a few ticks; the hold above lasts an hour).
  for (double end : OnDemandEnds()) EXPECT_LT(end, released_s + 0.5 * 3600);
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
