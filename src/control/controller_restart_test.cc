// The controller end to end on this machine (controller_testing.h): a
// restarted controller adopts the fleet and keeps the ledger whole, and
// workers that keep failing fail the job.
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

TEST_F(ControllerTest, RestartAdoptsTheFleetAndKeepsTheLedgerWhole) {
  SetMarket(OneLoss());
  spec_ = Spec(1.5, 12);
  StartTraining();
  // Crash once the gang was moved to zone b (tick 40) and runs there.
  auto job = CrashFirstController([&] { return GangRunsAfter(50); });
  ASSERT_TRUE(job.has_value());
  auto before = store_->Instances(spec_.name, true);
  ASSERT_TRUE(before.ok());
  ASSERT_EQ(before->size(), static_cast<size_t>(kNodes));
  for (const InstanceRecord& r : *before) {
    EXPECT_EQ(r.zone, 1);
    EXPECT_TRUE(CheckProcess(Pid(r.provider_data)).running) << r.id;
  }
  std::this_thread::sleep_for(milliseconds(150));  // nobody watches for a few ticks

  cloud::LocalProvider& b = NewProvider(job->wall_epoch_unix_s);
  Controller second(spec_, Deps(&b, &b));
  auto out = RunToEnd(second);
  ASSERT_TRUE(out.ok()) << out.status().ToString();
  EXPECT_TRUE(out->resumed);
  EXPECT_EQ(out->state, JobState::kSucceeded) << out->message;
  EXPECT_EQ(out->launches, 0);  // the adopted gang finished the job

  auto events = store_->Events(spec_.name);
  ASSERT_TRUE(events.ok());
  int resumes = 0;
  for (const EventRecord& e : *events) {
    EXPECT_NE(e.kind, "lost") << e.detail;
    if (e.kind == "resume") {
      ++resumes;
      EXPECT_EQ(e.detail, "2 instances adopted");
    }
  }
  EXPECT_EQ(resumes, 1);
  for (const InstanceRecord& r : *before) {
    bool adopted = false;
    for (const cloud::InstanceView& v : b.List()) {
      if (v.spec.id != r.id) continue;
      adopted = true;
      EXPECT_EQ(v.provider_data, r.provider_data);
      EXPECT_EQ(v.state, cloud::InstanceState::kTerminated);
    }
    EXPECT_TRUE(adopted) << r.id;
  }
  auto decisions = store_->Decisions(spec_.name);
  ASSERT_TRUE(decisions.ok());
  for (size_t t = 0; t < decisions->size(); ++t) {
    ASSERT_EQ((*decisions)[t].tick, static_cast<int64_t>(t));  // no tick lost or repeated
  }
  ExpectLedgerExact();
}

TEST_F(ControllerTest, RestartAfterAReclaimNobodyWatched) {
  // The first controller stops while the gang is in zone a; zone a is reclaimed
  // (tick 40) before the second starts. The second adopts the gang, learns of
  // the reclaim from its provider, bills it up to the boundary, and moves on.
  SetMarket(OneLoss());
  spec_ = Spec(1, 12);
  StartTraining();
  auto job = CrashFirstController([&] { return GangRunsAfter(10); });
  ASSERT_TRUE(job.has_value());
  auto before = store_->Instances(spec_.name, true);
  ASSERT_TRUE(before.ok());
  ASSERT_EQ(before->size(), static_cast<size_t>(kNodes));
  for (const InstanceRecord& r : *before) EXPECT_EQ(r.zone, 0);
  const double epoch = job->wall_epoch_unix_s;
  ASSERT_TRUE(WaitFor([&] { return (WallNow() - epoch) * kCompression > 45 * kGap; }));

  cloud::LocalProvider& b = NewProvider(epoch);
  Controller second(spec_, Deps(&b, &b));
  auto out = RunToEnd(second);
  ASSERT_TRUE(out.ok()) << out.status().ToString();
  EXPECT_TRUE(out->resumed);
  EXPECT_EQ(out->state, JobState::kSucceeded) << out->message;
  EXPECT_EQ(out->launches, kNodes);  // the new gang in zone b
  EXPECT_EQ(out->preemptions, 1);
  for (const InstanceRecord& r : *before) {
    auto all = store_->Instances(spec_.name, false);
    ASSERT_TRUE(all.ok());
    for (const InstanceRecord& now : *all) {
      if (now.id != r.id) continue;
      EXPECT_EQ(now.end_reason, "preempted");
      EXPECT_EQ(now.ended_s, 40 * kGap);
    }
    EXPECT_FALSE(CheckProcess(Pid(r.provider_data)).running);  // the reclaim killed it
  }
  const std::vector<std::string> want = {"PENDING -> PROVISIONING", "PROVISIONING -> RUNNING",
                                         "RUNNING -> RECOVERING", "RECOVERING -> RUNNING",
                                         "RUNNING -> SUCCEEDED"};
  EXPECT_EQ(StateChanges(), want);
  ExpectLedgerExact();
}

TEST_F(ControllerTest, WorkersThatKeepFailingFailTheJob) {
  SetMarket(OneLoss());
  spec_ = Spec(1, 12);
  JobOutcome out = RunJob(/*training=*/false, /*failing_worker=*/true);
  EXPECT_EQ(out.state, JobState::kFailed);
  EXPECT_NE(out.message.find("workers failed"), std::string::npos) << out.message;
  EXPECT_NE(out.message.find("training progress"), std::string::npos) << out.message;
  EXPECT_GT(out.launches, 3 * kNodes + 3);
  auto live = store_->Instances(spec_.name, true);
  ASSERT_TRUE(live.ok());
  EXPECT_TRUE(live->empty());
  ExpectLedgerExact();
}

// The give-up message keeps the last error a worker wrote (a full disk, say)
// when the failures after it say less (a worker that left no words).
TEST_F(ControllerTest, GivingUpNamesTheLastErrorAWorkerWrote) {
  SetMarket(OneLoss());
  spec_ = Spec(1, 12);
  cloud::LocalProvider& p = NewProvider(WallNow(), /*failing_worker=*/true);
  ControllerDeps d = Deps(&p, &p);
  std::set<std::string> asked;
  d.last_error = [&asked](const std::string& instance_id) {
    asked.insert(instance_id);
    return asked.size() == 1 ? std::string("writing step 5: No space left on device")
                             : std::string();
  };
  Controller c(spec_, std::move(d));
  auto out = RunToEnd(c);
  ASSERT_TRUE(out.ok()) << out.status().ToString();
  EXPECT_EQ(out->state, JobState::kFailed);
  EXPECT_GT(asked.size(), 2u);
  EXPECT_NE(out->message.find("the last error a worker wrote: writing step 5: No space left"),
            std::string::npos)
      << out->message;
}

// A command workload ends when its program has finished on every node (rank
// 0 may still evaluate), and a node that finished first gets no replacement.
TEST_F(ControllerTest, ACommandWorkloadEndsWhenItsProgramFinishedOnEveryNode) {
  SetMarket({Zone("us-east-1a", 0.9, {}), Zone("us-east-1b", 1.2, {})});
  spec_ = Spec(1, 12);
  spec_.command.run = "python3 train.py";
  spec_.controller.terminate_grace_s = 30;
  const fs::path last_output = dir_->path() / "last-output";
  // The second node's program ends 1.5 s after the first's, with output.
  cloud::LocalProvider& p = NewProvider(WallNow(), false, [last_output](int launch) {
    if (launch == 0) return std::vector<std::string>{"/bin/sh", "-c", "sleep 0.3"};
    return std::vector<std::string>{
        "/bin/sh", "-c", "sleep 1.8; echo 'test accuracy 0.9' > " + last_output.string()};
  });
  Controller c(spec_, Deps(&p, &p));
  auto out = RunToEnd(c);
  ASSERT_TRUE(out.ok()) << out.status().ToString();
  EXPECT_EQ(out->state, JobState::kSucceeded) << out->message;
  EXPECT_EQ(out->launches, 2);
  EXPECT_TRUE(fs::exists(last_output)) << "the job ended before the second node's program did";
  auto events = store_->Events(spec_.name);
  ASSERT_TRUE(events.ok());
  EXPECT_EQ(std::count_if(events->begin(), events->end(),
                          [](const EventRecord& e) { return e.kind == "program-finished"; }),
            2);
}

}  // namespace
}  // namespace spot::control
