// End-to-end tests of the checkpoint engine through the real binary: automatic
// rollback on a NaN loss, the durable tier after the local disk is lost,
// SIGUSR1/SIGTERM checkpoints, and `spot ckpt` (damaged versions judged as a
// resume judges them).
#include <fmt/format.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <functional>
#include <nlohmann/json.hpp>
#include <set>

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

// A damaged version is marked by `spot ckpt list` (not dropped), DAMAGED to
// `spot ckpt verify`, and skipped, with the same reason, by a resume.
TEST_F(CkptE2eTest, ListVerifyAndResumeAgreeOnADamagedVersion) {
  const std::string ck = "checkpoint: {interval_steps: 10}\n";
  ASSERT_EQ(Train(WriteJob("run", SmallJobYaml(dir_ / "run", 30, ck)), "", "run").exit_code, 0);
  struct Case {
    const char* name;
    std::function<void(json&)> edit;  // of version 4's manifest (step 30)
    const char* reason;
    bool quick_sees_it;  // list's check reads the indexes, not every byte
  };
  const Case cases[] = {
      {"step", [](json& j) { j["step"] = 5; }, "holds step 30 (its trainer/state record)", true},
      {"id", [](json& j) { j["id"] = 3; }, "id 3 does not match the file name's 4", true},
      {"index_checksum", [](json& j) { j["index_checksum"] = "xxh3-64:00000000000000ff"; },
       "does not match the manifest's 00000000000000ff", true},
      // A manifest written before index checksums: the whole file is
      // checked against its checksum, which only a full check reads.
      {"checksum",
       [](json& j) {
         j.erase("index_checksum");
         j["checksum"] = "xxh3-64:00000000000000ff";
       },
       "does not match the manifest's 00000000000000ff", false},
      {"truncated", nullptr, "malformed manifest", true},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    const fs::path ckdir = dir_ / c.name / "checkpoints";
    fs::create_directories(ckdir.parent_path());
    fs::copy(dir_ / "run" / "checkpoints", ckdir);
    const fs::path manifest = ckdir / ckpt::CheckpointStore::ManifestFileName(4);
    std::string text = *ReadFile(manifest.string());
    if (c.edit) {
      json j = json::parse(text);
      c.edit(j);
      text = j.dump(2);
    } else {
      text.resize(text.size() / 2);
    }
    std::ofstream(manifest, std::ios::trunc) << text;

    ProcessResult r = Spot({"ckpt", "list", "--dir", ckdir.string(), "--format", "json"},
                           std::string(c.name) + "_list");
    ASSERT_EQ(r.exit_code, 0) << r.err;
    json list = json::parse(r.out);
    ASSERT_EQ(list.size(), 4u) << r.out;
    EXPECT_EQ(list[0]["id"], 4);
    EXPECT_EQ(list[0]["state"], c.quick_sees_it ? "damaged" : "ok") << list[0];
    if (c.quick_sees_it) {
      EXPECT_NE(list[0]["copies"][0]["problem"].get<std::string>().find(c.reason),
                std::string::npos)
          << list[0];
    }
    r = Spot({"ckpt", "list", "--dir", ckdir.string()}, std::string(c.name) + "_table");
    ASSERT_EQ(r.exit_code, 0) << r.err;
    if (c.quick_sees_it) {
      EXPECT_NE(r.out.find("DAMAGED"), std::string::npos) << r.out;
    }

    r = Spot({"ckpt", "verify", "--dir", ckdir.string()}, std::string(c.name) + "_verify");
    EXPECT_EQ(r.exit_code, 1) << r.out << r.err;
    EXPECT_NE(r.out.find("DAMAGED     version 4 (local): "), std::string::npos) << r.out;
    EXPECT_NE(r.out.find(c.reason), std::string::npos) << r.out;
    EXPECT_NE(r.out.find("4 version(s): 3 intact, 1 damaged"), std::string::npos) << r.out;

    r = Train(WriteJob(c.name, SmallJobYaml(dir_ / c.name, 40, ck)), "",
              std::string(c.name) + "_resume");
    ASSERT_EQ(r.exit_code, 0) << r.err;
    EXPECT_NE(r.err.find("skipping checkpoint"), std::string::npos) << r.err;
    EXPECT_NE(r.err.find(c.reason), std::string::npos) << r.err;
    EXPECT_NE(r.err.find("resuming from checkpoint 3 (local tier; step 20"), std::string::npos)
        << r.err;
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
  // The newest delta and its base (the saver writes a full version where a
  // delta would save little).
  int64_t delta = -1, base = -1;
  for (const json& v : list) {
    EXPECT_EQ(v["state"], "ok") << v;
    if (delta < 0 && int64_t(v["base"]) >= 1) delta = v["id"], base = v["base"];
  }
  ASSERT_GE(delta, 1) << r.out;
  r = Spot({"ckpt", "list", "--job", job.string()}, "list_table");
  EXPECT_NE(r.out.find("local+durable"), std::string::npos) << r.out;

  r = Spot({"ckpt", "show", std::to_string(delta), "--job", job.string()}, "show");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("model/fc1.weight"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("sub-delta"), std::string::npos) << r.out;

  r = Spot({"ckpt", "verify", "--job", job.string()}, "verify");
  EXPECT_EQ(r.exit_code, 0) << r.out << r.err;
  EXPECT_NE(r.out.find("7 version(s): 7 intact, 0 damaged, 0 uncommitted; copies: 14 ok, 0 "
                       "damaged, 0 missing"),
            std::string::npos)
      << r.out;
  auto flip = [](const fs::path& p) {
    std::fstream f(p, std::ios::in | std::ios::out | std::ios::binary);
    f.seekg(300);
    char c = 0;
    f.get(c);
    f.seekp(300);
    f.put(static_cast<char>(c ^ 0x10));
  };
  const fs::path local_base =
      dir_ / "run" / "checkpoints" / ckpt::CheckpointStore::DataFileName(base);
  const fs::path durable_base = durable / ckpt::CheckpointStore::DataFileName(base);
  flip(durable_base);
  // One damaged copy: the version is still intact in the local tier.
  r = Spot({"ckpt", "verify", "--job", job.string()}, "verify_one_copy");
  EXPECT_EQ(r.exit_code, 0) << r.out << r.err;
  EXPECT_NE(r.out.find(fmt::format("DAMAGED     version {} (durable)", base)), std::string::npos)
      << r.out;
  // The delta's durable copy still decodes, with its base taken from the
  // local tier.
  EXPECT_NE(r.out.find(fmt::format("ok          version {} (durable", delta)), std::string::npos)
      << r.out;
  EXPECT_NE(r.out.find("7 version(s): 7 intact, 0 damaged, 0 uncommitted; copies: 13 ok, 1 "
                       "damaged, 0 missing"),
            std::string::npos)
      << r.out;
  // Both copies damaged: the base is lost, and so is the delta on it.
  flip(local_base);
  r = Spot({"ckpt", "verify", "--job", job.string()}, "verify_bad");
  EXPECT_EQ(r.exit_code, 1) << r.out << r.err;
  for (int64_t id : {base, delta}) {
    EXPECT_NE(r.out.find(fmt::format("version {} has no intact copy in any tier", id)),
              std::string::npos)
        << r.out;
  }
  EXPECT_NE(r.out.find(fmt::format("its base version {} is unusable", base)), std::string::npos)
      << r.out;
  std::set<int64_t> lost = {base};  // the base and every delta resting on it
  for (auto v = list.rbegin(); v != list.rend(); ++v) {
    if (lost.count(int64_t((*v)["base"]))) lost.insert(int64_t((*v)["id"]));
  }
  EXPECT_NE(
      r.out.find(fmt::format("7 version(s): {} intact, {} damaged", 7 - lost.size(), lost.size())),
      std::string::npos)
      << r.out;
  r = Spot({"ckpt", "verify", std::to_string(delta), "--job", job.string()}, "verify_delta");
  EXPECT_EQ(r.exit_code, 1) << r.out << r.err;
  EXPECT_NE(r.out.find("1 version(s): 0 intact, 1 damaged"), std::string::npos) << r.out;
  flip(local_base);
  flip(durable_base);

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
  // An unknown id is bad input (exit 2) for every command that takes one.
  for (std::vector<std::string> args : {std::vector<std::string>{"show", "99"},
                                        {"verify", "99"},
                                        {"diff", "99", "7"},
                                        {"diff", "7", "99"},
                                        {"rollback", "99"},
                                        {"export", "99", "--out", st.string()}}) {
    args.insert(args.begin(), "ckpt");
    args.insert(args.end(), {"--job", job.string()});
    r = Spot(args, "missing_" + args[1]);
    EXPECT_EQ(r.exit_code, 2) << args[1] << ": " << r.out << r.err;
    EXPECT_NE(r.err.find("no version 99 in "), std::string::npos) << args[1] << ": " << r.err;
  }
  // Retention keeps at least the newest version.
  for (std::string keep : {"0", "-5", "x"}) {
    r = Spot({"ckpt", "gc", "--keep", keep, "--job", job.string()}, "gc_keep");
    EXPECT_EQ(r.exit_code, 2) << keep << ": " << r.out << r.err;
    EXPECT_NE(r.err.find("--keep"), std::string::npos) << r.err;
    EXPECT_NE(r.err.find("must be a whole number from 1"), std::string::npos) << r.err;
  }

  // The local tier is gone (the machine was preempted), the durable one is
  // complete: every version is intact, its local copy missing. Looking does
  // not create the local directory.
  const fs::path local = dir_ / "run" / "checkpoints";
  fs::remove_all(local);
  r = Spot({"ckpt", "verify", "--job", job.string()}, "verify_durable_only");
  EXPECT_EQ(r.exit_code, 0) << r.out << r.err;
  EXPECT_NE(r.out.find("missing     version 10 (local)"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("ok          version 10 (durable, step 60)"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find(" 0 damaged, 0 uncommitted"), std::string::npos) << r.out;
  r = Spot({"ckpt", "list", "--job", job.string(), "--format", "json"}, "list_durable_only");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  list = json::parse(r.out);
  ASSERT_FALSE(list.empty());
  EXPECT_EQ(list[0]["tiers"], json::array({"durable"}));
  EXPECT_FALSE(fs::exists(local));
  r = Spot({"ckpt", "list", "--dir", (dir_ / "nowhere").string()}, "nowhere");
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("no such checkpoint directory"), std::string::npos) << r.err;
}

}  // namespace
}  // namespace spot
