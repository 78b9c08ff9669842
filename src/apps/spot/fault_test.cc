// Fault campaign: `spot train` SIGKILLed at random moments while it saves a
// checkpoint every step (so nearly every kill lands in a snapshot, an encode,
// a write, a commit, a retention pass or a replication), then resumed.
// After each kill: every version visible in either tier verifies completely
// (never a torn or half-visible one), and the resumed run is bit for bit the
// uninterrupted one. SPOT_FAULT_TRIALS sets the number of trials (default 4;
// `make fault` runs 24).
#include <fmt/format.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <random>

#include "apps/spot/e2e_support.h"
#include "ckpt/store.h"

namespace spot {
namespace {

namespace fs = std::filesystem;
using testing::ChildProcess;
using testing::LastLoggedStep;
using testing::ProcessResult;
using testing::ReadStepLog;
using testing::SmallJobYaml;
using testing::StepLog;

using FaultTest = testing::E2eTest;

int Trials() {
  const char* v = std::getenv("SPOT_FAULT_TRIALS");
  return v ? std::max(1, std::atoi(v)) : 4;
}

TEST_F(FaultTest, KillsDuringSavesNeverTearAVersionAndResumeBitForBit) {
  constexpr int64_t kSteps = 160;
  auto yaml = [&](const std::string& name) {
    return SmallJobYaml(dir_ / name, kSteps,
                        fmt::format("checkpoint: {{interval_steps: 1, keep: 3, full_every: 4, "
                                    "durable_dir: {}}}\n",
                                    (dir_ / (name + "_durable")).string()));
  };
  ProcessResult ref = Train(WriteJob("ref", yaml("ref")), dir_ / "ref.csv", "ref");
  ASSERT_EQ(ref.exit_code, 0) << ref.err;
  StepLog reference = ReadStepLog(dir_ / "ref.csv");
  ASSERT_EQ(reference.size(), static_cast<size_t>(kSteps));

  std::mt19937 rng(20261130);
  std::uniform_int_distribution<int64_t> pick_step(2, kSteps - 20);
  std::uniform_int_distribution<int> jitter_us(0, 4000);
  const int trials = Trials();
  int versions_checked = 0;
  for (int trial = 0; trial < trials; ++trial) {
    SCOPED_TRACE(fmt::format("trial {}", trial));
    std::string name = fmt::format("t{}", trial);
    fs::path job = WriteJob(name, yaml(name));
    fs::path log_a = dir_ / (name + "_a.csv"), log_b = dir_ / (name + "_b.csv");
    int64_t kill_at = pick_step(rng);
    {
      ChildProcess p(TrainArgs(job, log_a), (dir_ / (name + "_a")).string());
      while (p.Running() && LastLoggedStep(log_a) < kill_at) ::usleep(200);
      ::usleep(static_cast<useconds_t>(jitter_us(rng)));
      p.Kill(SIGKILL);
      ProcessResult r = p.Wait();
      ASSERT_EQ(r.term_signal, SIGKILL) << "finished before the kill\n" << r.err;
    }
    // Whatever is visible is whole: every copy with a manifest, in either
    // tier, passes the full check (an interrupted save leaves at most a data
    // file without its manifest: uncommitted, never loaded).
    {
      auto store =
          ckpt::CheckpointStore::Open({.dir = (dir_ / name / "checkpoints").string(),
                                       .durable_dir = (dir_ / (name + "_durable")).string(),
                                       .read_only = true});
      ASSERT_TRUE(store.ok()) << store.status().ToString();
      for (const ckpt::VersionCheck& v : (*store)->Inspect(ckpt::CheckDepth::kFull)) {
        for (const ckpt::CopyCheck& c : v.copies) {
          EXPECT_NE(c.state, ckpt::CopyState::kDamaged)
              << "version " << v.id << " (" << ckpt::TierName(c.tier)
              << ") is visible but damaged: " << c.problem;
          if (c.state == ckpt::CopyState::kOk) ++versions_checked;
        }
      }
    }
    StepLog before = ReadStepLog(log_a);
    int64_t killed_after = before.empty() ? 0 : before.rbegin()->first;
    ProcessResult resumed = Train(job, log_b, name + "_b");
    ASSERT_EQ(resumed.exit_code, 0) << resumed.err;
    StepLog after = ReadStepLog(log_b);
    ASSERT_FALSE(after.empty());
    int64_t resume_step = after.begin()->first - 1;
    std::cerr << fmt::format("  trial {}: killed after step {}, resumed from step {}\n", trial,
                             killed_after, resume_step);
    // At most two saves are in flight, so at most two steps are lost.
    EXPECT_GE(resume_step, killed_after - 3);
    EXPECT_LE(resume_step, killed_after);
    for (const StepLog* log : {&before, &after}) {
      for (const auto& [step, text] : *log) {
        ASSERT_EQ(text, reference.at(step)) << "step " << step;
      }
    }
    EXPECT_EQ(after.rbegin()->first, kSteps);
  }
  std::cerr << fmt::format("  {} trials, {} visible versions verified\n", trials, versions_checked);
}

}  // namespace
}  // namespace spot
