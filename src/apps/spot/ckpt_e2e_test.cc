// End-to-end tests of the checkpoint engine through the real binary: automatic
// rollback on a NaN loss, the durable tier after the local disk is lost,
// SIGUSR1/SIGTERM checkpoints, and `spot ckpt`.
#include <fmt/format.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "apps/spot/e2e_support.h"
#include "ckpt/store.h"
#include "core/file_io.h"

namespace spot {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;
using testing::ChildProcess;
using testing::LastLoggedStep;
using testing::ProcessResult;
using testing::ReadStepLog;
using testing::RunProcess;
using testing::SmallJobYaml;
using testing::StepLog;

using CkptE2eTest = testing::E2eTest;

json ReadJson(const fs::path& p) { return json::parse(*ReadFile(p.string())); }

using testing::ExpectSameNewestCheckpoint;

TEST_F(CkptE2eTest, NanLossRollsBackSkipsTheBatchAndFinishes) {
  const std::string ck = "checkpoint: {interval_steps: 10}\n";
  fs::path ref_job = WriteJob("ref", SmallJobYaml(dir_ / "ref", 60, ck));
  ASSERT_EQ(Train(ref_job, dir_ / "ref.csv", "ref").exit_code, 0);
  StepLog reference = ReadStepLog(dir_ / "ref.csv");

  const std::string faulty = ck + "faults: {nan_loss_at_step: 35}\n";
  fs::path job = WriteJob("nan", SmallJobYaml(dir_ / "nan", 60, faulty));
  ProcessResult r = Train(job, dir_ / "nan.csv", "nan");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("rollback: loss is nan at step 35; restored checkpoint"), std::string::npos)
      << r.out;
  EXPECT_NE(r.out.find("60 steps"), std::string::npos) << r.out;
  json summary = ReadJson(dir_ / "nan" / "summary.json");
  ASSERT_EQ(summary["rollbacks"].size(), 1u);
  EXPECT_EQ(summary["rollbacks"][0]["restored_step"], 30);
  EXPECT_EQ(summary["rollbacks"][0]["batch"], 34);  // the 35th batch, 0-based
  EXPECT_GT(double(summary["test_accuracy"]), 0.5);
  // The event is on record.
  std::ifstream events(dir_ / "nan" / "events.jsonl");
  std::string line;
  ASSERT_TRUE(std::getline(events, line));
  json e = json::parse(line);
  EXPECT_EQ(e["event"], "rollback");
  EXPECT_EQ(e["skipped_batches"], json::array({34}));

  // Steps 1-34 match the reference; 31-34 ran twice, identically (the step
  // log keeps the replay's line); from 35 on, batch 34 is skipped.
  StepLog got = ReadStepLog(dir_ / "nan.csv");
  ASSERT_EQ(got.size(), 60u);
  for (int64_t s = 1; s <= 34; ++s) EXPECT_EQ(got[s], reference[s]) << "step " << s;
  EXPECT_NE(got[35], reference[35]);

  // Killed after the rollback and resumed: the skip list is part of the
  // checkpoint, so the run ends bit for bit where the uninterrupted one did.
  fs::path job2 = WriteJob("nan2", SmallJobYaml(dir_ / "nan2", 60, faulty));
  {
    ChildProcess p(TrainArgs(job2, dir_ / "nan2.csv"), (dir_ / "nan2_a").string());
    while (p.Running() && LastLoggedStep(dir_ / "nan2.csv") < 52) ::usleep(500);
    p.Kill(SIGKILL);
    p.Wait();
  }
  ProcessResult resumed = Train(job2, dir_ / "nan2.csv", "nan2_b");
  ASSERT_EQ(resumed.exit_code, 0) << resumed.err;
  ExpectSameNewestCheckpoint(dir_ / "nan" / "checkpoints", dir_ / "nan2" / "checkpoints");
}

TEST_F(CkptE2eTest, LossSpikeRollsBackWithALowerLearningRate) {
  fs::path job = WriteJob(
      "spike", SmallJobYaml(dir_ / "spike", 60,
                            "checkpoint: {interval_steps: 10}\n"
                            "rollback: {warmup_steps: 20, lr_factor: 0.5, skip_batches: 2}\n"
                            "faults: {spike_loss_at_step: 44}\n"));
  ProcessResult r = Train(job, "", "spike");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("rollback: loss spike"), std::string::npos) << r.out;
  json summary = ReadJson(dir_ / "spike" / "summary.json");
  ASSERT_EQ(summary["rollbacks"].size(), 1u);
  EXPECT_EQ(summary["rollbacks"][0]["restored_step"], 40);
  EXPECT_EQ(summary["rollbacks"][0]["lr_scale"], 0.5);
  std::ifstream events(dir_ / "spike" / "events.jsonl");
  std::string line;
  ASSERT_TRUE(std::getline(events, line));
  EXPECT_EQ(json::parse(line)["skipped_batches"], json::array({43, 44}));
}

TEST_F(CkptE2eTest, NanWithRollbackOffStopsWithAClearError) {
  fs::path job = WriteJob("off", SmallJobYaml(dir_ / "off", 30,
                                              "rollback: {enabled: false}\n"
                                              "faults: {nan_loss_at_step: 12}\n"));
  ProcessResult r = Train(job, "", "off");
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("loss is nan at step 12"), std::string::npos) << r.err;
}

TEST_F(CkptE2eTest, DurableTierServesWhenTheLocalDiskIsGone) {
  auto yaml = [&](const std::string& name, int64_t steps) {
    return SmallJobYaml(dir_ / name, steps,
                        fmt::format("checkpoint: {{interval_steps: 10, durable_dir: {}}}\n",
                                    (dir_ / (name + "_durable")).string()));
  };
  ASSERT_EQ(Train(WriteJob("ref", yaml("ref", 60)), "", "ref").exit_code, 0);
  fs::path job40 = WriteJob("run40", yaml("run", 40));
  ASSERT_EQ(Train(job40, "", "run40").exit_code, 0);
  // The machine is gone, and with it the local tier.
  fs::remove_all(dir_ / "run" / "checkpoints");
  ProcessResult r = Train(WriteJob("run60", yaml("run", 60)), "", "run60");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.err.find("(durable tier; step 40"), std::string::npos) << r.err;
  ExpectSameNewestCheckpoint(dir_ / "ref" / "checkpoints", dir_ / "run" / "checkpoints");

  // A damaged local copy falls back to the durable copy of the same version.
  auto store = ckpt::CheckpointStore::Open({.dir = (dir_ / "run" / "checkpoints").string(),
                                            .durable_dir = (dir_ / "run_durable").string()});
  ASSERT_TRUE(store.ok());
  auto newest = (*store)->List().front();
  EXPECT_EQ(newest.tiers.size(), 2u);
  fs::resize_file(dir_ / "run" / "checkpoints" / ckpt::CheckpointStore::DataFileName(newest.id),
                  100);
  ProcessResult again = Train(WriteJob("run61", yaml("run", 61)), "", "run61");
  ASSERT_EQ(again.exit_code, 0) << again.err;
  EXPECT_NE(
      again.err.find(fmt::format("resuming from checkpoint {} (durable tier; step 60", newest.id)),
      std::string::npos)
      << again.err;
}

TEST_F(CkptE2eTest, SignalsCheckpointAndStopThenResumeExactly) {
  const std::string ck = "checkpoint: {interval_steps: 100000}\n";
  ASSERT_EQ(Train(WriteJob("ref", SmallJobYaml(dir_ / "ref", 400, ck)), dir_ / "ref.csv", "ref")
                .exit_code,
            0);
  StepLog reference = ReadStepLog(dir_ / "ref.csv");
  fs::path job = WriteJob("run", SmallJobYaml(dir_ / "run", 400, ck));
  fs::path ckdir = dir_ / "run" / "checkpoints";
  ProcessResult stopped;
  {
    ChildProcess p(TrainArgs(job, dir_ / "a.csv"), (dir_ / "a").string());
    while (p.Running() && LastLoggedStep(dir_ / "a.csv") < 30) ::usleep(500);
    p.Kill(SIGUSR1);  // checkpoint now, keep going
    while (p.Running() && !fs::exists(ckdir / ckpt::CheckpointStore::ManifestFileName(2))) {
      ::usleep(1000);
    }
    while (p.Running() && LastLoggedStep(dir_ / "a.csv") < 60) ::usleep(500);
    p.Kill(SIGTERM);  // a termination notice: checkpoint and stop
    stopped = p.Wait();
  }
  ASSERT_EQ(stopped.exit_code, 128 + SIGTERM) << stopped.err;
  EXPECT_NE(stopped.out.find("stopped by"), std::string::npos) << stopped.out;
  StepLog before = ReadStepLog(dir_ / "a.csv");
  int64_t last = before.rbegin()->first;
  ASSERT_LT(last, 400);
  ProcessResult resumed = Train(job, dir_ / "b.csv", "b");
  ASSERT_EQ(resumed.exit_code, 0) << resumed.err;
  StepLog after = ReadStepLog(dir_ / "b.csv");
  // Nothing was lost: the resume starts right after the last step trained.
  EXPECT_EQ(after.begin()->first, last + 1);
  for (const StepLog* log : {&before, &after}) {
    for (const auto& [step, text] : *log) ASSERT_EQ(text, reference.at(step)) << "step " << step;
  }
}

TEST_F(CkptE2eTest, CkptCommandListsVerifiesDiffsRollsBackAndExports) {
  fs::path durable = dir_ / "durable";
  std::string yaml =
      SmallJobYaml(dir_ / "run", 60,
                   fmt::format("checkpoint: {{interval_steps: 10, keep: 10, durable_dir: {}}}\n",
                               durable.string()));
  fs::path job = WriteJob("job", yaml);
  ASSERT_EQ(Train(job, "", "train").exit_code, 0);

  ProcessResult r = Spot({"ckpt", "list", "--job", job.string(), "--format", "json"}, "list");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  json list = json::parse(r.out);
  ASSERT_EQ(list.size(), 7u);  // steps 0, 10, ..., 60
  EXPECT_EQ(list[0]["step"], 60);
  EXPECT_EQ(list[0]["tiers"], json::array({"local", "durable"}));
  EXPECT_GE(int(list[0]["base"]), 1);  // a delta
  r = Spot({"ckpt", "list", "--job", job.string()}, "list_table");
  EXPECT_NE(r.out.find("local+durable"), std::string::npos) << r.out;

  r = Spot({"ckpt", "show", "7", "--job", job.string()}, "show");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("model/fc1.weight"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("sub-delta"), std::string::npos) << r.out;

  r = Spot({"ckpt", "verify", "--job", job.string()}, "verify");
  EXPECT_EQ(r.exit_code, 0) << r.out << r.err;
  EXPECT_NE(r.out.find("14 copies verified, 0 damaged"), std::string::npos) << r.out;
  {
    std::fstream f(durable / ckpt::CheckpointStore::DataFileName(5),
                   std::ios::in | std::ios::out | std::ios::binary);
    f.seekg(300);
    char c = 0;
    f.get(c);
    f.seekp(300);
    f.put(static_cast<char>(c ^ 0x10));
  }
  r = Spot({"ckpt", "verify", "--job", job.string()}, "verify_bad");
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.out.find("DAMAGED version 5 (durable)"), std::string::npos) << r.out;
  // Version 6 is a delta on 5; its durable copy still decodes, with the base
  // taken from the local tier.
  EXPECT_NE(r.out.find("ok      version 6 (durable"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("13 copies verified, 1 damaged"), std::string::npos) << r.out;

  r = Spot({"ckpt", "diff", "6", "7", "--job", job.string()}, "diff");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("model/fc1.weight"), std::string::npos) << r.out;
  r = Spot({"ckpt", "diff", "7", "7", "--job", job.string()}, "diff_same");
  EXPECT_NE(r.out.find("0 record(s) differ"), std::string::npos) << r.out;

  // Export the newest model as safetensors; Python reads it and finds the
  // same tensors as the model.pt `spot train` wrote.
  fs::path st = dir_ / "model.safetensors";
  r = Spot({"ckpt", "export", "7", "--out", st.string(), "--job", job.string()}, "export");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  if (fs::exists("/usr/bin/python3")) {
    const std::string script = R"(
import json, struct, sys, numpy as np, torch
raw = open(sys.argv[1], 'rb').read()
n = struct.unpack('<Q', raw[:8])[0]
header = json.loads(raw[8:8 + n])
data = raw[8 + n:]
sd = torch.load(sys.argv[2])
names = [k for k in header if k != '__metadata__']
for k in names:
    h = header[k]
    assert h['dtype'] == 'F32' or h['dtype'] == 'I64', h
    a = np.frombuffer(data[h['data_offsets'][0]:h['data_offsets'][1]],
                      dtype=np.float32 if h['dtype'] == 'F32' else np.int64).reshape(h['shape'])
    assert np.array_equal(a, sd[k].numpy()), k
print(len(names))
)";
    std::ofstream(dir_ / "check.py") << script;
    r = RunProcess({"/usr/bin/python3", (dir_ / "check.py").string(), st.string(),
                    (dir_ / "run" / "model.pt").string()},
                   (dir_ / "python").string());
    ASSERT_EQ(r.exit_code, 0) << r.err;
    EXPECT_EQ(std::stoi(r.out), 6);  // fc1..fc3, weight and bias
  }

  // Roll back to step 40: a new version, and the next run resumes from it.
  r = Spot({"ckpt", "rollback", "5", "--job", job.string()}, "rollback");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("version 8 is a copy of version 5"), std::string::npos) << r.out;
  ProcessResult t = Train(job, "", "after_rollback");
  ASSERT_EQ(t.exit_code, 0) << t.err;
  EXPECT_NE(t.err.find("resuming from checkpoint 8"), std::string::npos) << t.err;
  EXPECT_NE(t.out.find("resumed from step 40"), std::string::npos) << t.out;

  r = Spot({"ckpt", "gc", "--dry-run", "--keep", "2", "--job", job.string()}, "gc");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("local tier: would delete"), std::string::npos) << r.out;
  r = Spot({"ckpt", "show", "99", "--job", job.string()}, "missing");
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("no version 99"), std::string::npos) << r.err;
  r = Spot({"ckpt", "list", "--dir", (dir_ / "nowhere").string()}, "nowhere");
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("no such checkpoint directory"), std::string::npos) << r.err;
}

}  // namespace
}  // namespace spot
