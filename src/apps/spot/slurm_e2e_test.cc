// `spot run` with `provider: slurm` for real: a Slurm cluster of two nodes,
// each slurmd in a network namespace of its own (cloud/slurm_testing.h), the
// controller on this machine advertising its address on the cluster's bridge
// as the rendezvous. A 2-node elastic job trains in the preemptible `spot`
// partition; once both workers train together, the test submits an `urgent`
// job to the node of the checkpoint writer (rank 0). Slurm preempts it: the
// worker gets SIGTERM with the partition's GraceTime, saves and leaves; the
// controller sees the preemption in squeue, launches a replacement (it waits
// for the node, then joins), and the job succeeds with every step logged
// once. A job Slurm cannot start fails `spot run` with Slurm's reason.
//
// Needs root (network namespaces, slurmd) and Debian's Slurm and munge:
// skips loudly without them.
#include <gtest/gtest.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "apps/spot/e2e_support.h"
#include "apps/spot/slurm_run_support.h"
#include "cloud/slurm_testing.h"
#include "control/job_store.h"
#include "core/job_files.h"

namespace spot::testing {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

std::string ReadText(const fs::path& path) {
  std::ifstream in(path);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

class SlurmRunTest : public E2eTest {
 protected:
  static void SetUpTestSuite() {
    skip_ = cloud::SlurmCluster::Unsupported();
    if (!skip_.empty()) return;
    auto c = cloud::SlurmCluster::Start({.nodes = 2, .grace_time_s = 5});
    if (c.ok()) {
      cluster_ = std::move(c).value();
    } else {
      start_error_ = c.status().ToString();
    }
  }
  static void TearDownTestSuite() { cluster_.reset(); }

  void SetUp() override {
    E2eTest::SetUp();
    if (!skip_.empty()) {
      GTEST_SKIP() << "SKIPPED: no Slurm cluster can run here: " << skip_
                   << " (run as root after scripts/install-deps.sh)";
    }
    ASSERT_NE(cluster_, nullptr) << "the Slurm cluster did not start: " << start_error_;
  }
  void TearDown() override {
    if (cluster_ != nullptr) {
      if (HasFailure()) std::cerr << "Slurm logs:\n" << cluster_->LogTail();
      Status st = cluster_->CancelAll(30);
      EXPECT_TRUE(st.ok()) << st.ToString();
    }
    E2eTest::TearDown();
  }

  SlurmRunJob Job(const std::string& name) {
    return {.name = name,
            .dir = dir_,
            .slurm_conf = cluster_->conf_path(),
            .advertise_host = cluster_->host_address()};
  }

  static inline std::string skip_;
  static inline std::string start_error_;
  static inline std::unique_ptr<cloud::SlurmCluster> cluster_;
};

TEST_F(SlurmRunTest, APreemptedWorkerSavesLeavesAndIsReplacedWithNoStepLost) {
  SlurmRunJob spec = Job("slurm");
  spec.checkpoint_extra = "    keep_every: 1\n";  // the victim's version stays to be read
  const fs::path job = WriteSlurmRunJob(spec);
  const fs::path job_dir = dir_ / spec.name;
  const JobFiles files{job_dir.string()};
  ChildProcess controller({SPOT_BIN, "run", job.string()}, (dir_ / "run").string());

  // Once both workers train together past step 300: preempt the writer.
  std::string victim, victim_node;
  for (int i = 0; i < 3000 && controller.Running() && victim.empty(); ++i) {  // 5 minutes
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    if (LastLoggedStep(files.step_log()) < 300) continue;
    const std::map<std::string, std::string> running = RunningSlurmInstances(*cluster_);
    std::optional<std::string> writer = RankZeroOfTwo(running, job_dir / "instances");
    if (!writer) continue;
    victim = *writer;
    victim_node = running.at(victim);
    Result<std::string> urgent = SubmitUrgent(*cluster_, victim_node, 5);
    ASSERT_TRUE(urgent.ok()) << urgent.status().ToString();
  }
  ASSERT_FALSE(victim.empty()) << "the two workers never trained together past step 300\n"
                               << ReadText(dir_ / "run.err");
  ProcessResult r = controller.Wait(420);
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;

  json s = json::parse(ReadText(job_dir / "run-summary.json"));
  EXPECT_EQ(s["state"], "SUCCEEDED") << s.dump();
  EXPECT_EQ(s["steps"], spec.steps) << s.dump();
  EXPECT_GE(s["instances_reclaimed"].get<int>(), 1) << s.dump();
  // The worker had stopped by itself when Slurm ended its job.
  EXPECT_EQ(s["killed_at_reclaim"], 0) << s.dump();
  EXPECT_GE(s["notices"].get<int>(), 1) << s.dump();
  EXPECT_GE(s["launches"].get<int>(), 3) << "no replacement was launched: " << s.dump();
  // The steps redone are the loss-spike guard's replays (its own record,
  // events.jsonl: a spike after the world shrank rolled back 23 steps in one
  // run), none lost to the preemption.
  std::vector<std::pair<int64_t, int64_t>> rollbacks;  // (at_step, restored_step)
  {
    std::ifstream in(job_dir / "events.jsonl");
    for (std::string line; std::getline(in, line);) {
      const json e = json::parse(line, nullptr, /*allow_exceptions=*/false);
      if (e.is_object() && e.value("event", "") == "rollback") {
        rollbacks.emplace_back(e.at("at_step").get<int64_t>(),
                               e.at("restored_step").get<int64_t>());
      }
    }
  }
  int64_t replayed = 0;
  for (auto [at, restored] : rollbacks) replayed += at - 1 - restored;
  EXPECT_EQ(s["steps_redone"], replayed) << s.dump();

  // The controller took Slurm's word: a notice, then a preemption, of the victim.
  auto store = control::JobStore::Open((job_dir / "controller" / "state.db").string());
  ASSERT_TRUE(store.ok()) << store.status().ToString();
  auto events = (*store)->Events(spec.name);
  ASSERT_TRUE(events.ok()) << events.status().ToString();
  bool noticed = false, preempted = false;
  for (const control::EventRecord& e : *events) {
    if (e.instance_id != victim) continue;
    noticed |= e.kind == "notice" && e.detail.find("being preempted") != std::string::npos;
    preempted |= noticed && e.kind == "preempt";
  }
  EXPECT_TRUE(noticed) << "no notice event for " << victim;
  EXPECT_TRUE(preempted) << "no preempt event after the notice for " << victim;
  auto instances = (*store)->Instances(spec.name, false);
  ASSERT_TRUE(instances.ok()) << instances.status().ToString();
  for (const control::InstanceRecord& i : *instances) {
    if (i.id == victim) {
      EXPECT_EQ(i.end_reason, "preempted");
    }
  }

  // The victim got SIGTERM, saved (a failed save or flush is an error exit)
  // and left; Slurm did not have to kill it.
  const std::string victim_log = ReadText(job_dir / "instances" / (victim + ".log"));
  const std::string stopped = "stopped by Terminated at step ";
  const size_t stop = victim_log.find(stopped);
  ASSERT_NE(stop, std::string::npos) << victim_log;
  const int64_t saved_step = LeadingInteger(victim_log.substr(stop + stopped.size()));
  ASSERT_GE(saved_step, 0) << victim_log;
  EXPECT_EQ(victim_log.find("\nerror:"), std::string::npos) << victim_log;
  std::cout << "preempted " << victim << " on " << victim_node << " at step " << saved_step
            << " (bench/slurm_preemption_bench times the save against GraceTime)\n";

  // Every step once, in order, but for the guard's replays: the steps after
  // the preemption continue from the saved one.
  std::ifstream steps_in(files.step_log());
  std::vector<int64_t> steps;
  for (std::string line; std::getline(steps_in, line);) {
    if (!line.empty()) steps.push_back(LeadingInteger(line));
  }
  std::vector<int64_t> expected;
  size_t next_rollback = 0;
  for (int64_t step = 1; step <= spec.steps; ++step) {
    expected.push_back(step);
    for (; next_rollback < rollbacks.size() && rollbacks[next_rollback].first - 1 == step;
         ++next_rollback) {
      for (int64_t k = rollbacks[next_rollback].second + 1; k <= step; ++k) expected.push_back(k);
    }
  }
  ASSERT_EQ(steps.size(), expected.size());
  for (size_t i = 0; i < steps.size(); ++i) {
    ASSERT_EQ(steps[i], expected[i]) << "step log line " << i + 1;
  }
  EXPECT_GT(saved_step, 300);
  EXPECT_LT(saved_step, spec.steps);
  // What it saved is a valid version of that step in the durable tier.
  auto durable = ckpt::CheckpointStore::Open({.dir = (job_dir / "durable").string()});
  ASSERT_TRUE(durable.ok()) << durable.status().ToString();
  auto saved = (*durable)->LoadNewestValid(saved_step + 1);
  ASSERT_TRUE(saved.ok()) << saved.status().ToString();
  EXPECT_EQ(saved->info.step, saved_step);
}

TEST_F(SlurmRunTest, AJobSlurmCannotStartFailsTheRunWithSlurmsReason) {
  // Accepted by sbatch, but larger than any node: Slurm's Reason is
  // PartitionConfig, and the job never starts.
  SlurmRunJob big = Job("big");
  big.steps = 100;
  big.provider_extra = "  cpus_per_task: 64\n";
  ProcessResult r = Spot({"run", WriteSlurmRunJob(big).string()}, "big");
  EXPECT_NE(r.exit_code, 0) << r.out << r.err;
  EXPECT_NE((r.out + r.err).find("cannot start: PENDING (PartitionConfig)"), std::string::npos)
      << r.out << r.err;

  // Refused by sbatch: Slurm's message.
  SlurmRunJob nope = Job("nope");
  nope.steps = 100;
  nope.partition = "nope";
  r = Spot({"run", WriteSlurmRunJob(nope).string()}, "nope");
  EXPECT_NE(r.exit_code, 0) << r.out << r.err;
  EXPECT_NE((r.out + r.err).find("Invalid partition name specified"), std::string::npos)
      << r.out << r.err;
}

}  // namespace
}  // namespace spot::testing
