// End-to-end tests of `spot train`: the real binary as child processes,
// SIGKILLed from outside, resumed, compared bit for bit.
#include <fmt/format.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <random>
#include <sstream>

#include "apps/spot/e2e_support.h"
#include "apps/spot/test_process.h"
#include "ckpt/store.h"
#include "core/file_io.h"
#include "core/temp_dir.h"

namespace spot {
namespace {

namespace fs = std::filesystem;
using testing::ChildProcess;
using testing::ProcessResult;
using testing::RunProcess;

using testing::kDataset;

struct Job {
  std::string model = "cnn";
  std::string optimizer = "adam";
  double lr = 0.002;
  std::string schedule = "cosine";
  int64_t warmup = 30;
  int64_t steps = 150;
  int64_t batch = 16;
  int64_t train_limit = 1600;  // 100 steps an epoch at batch 16: runs cross an epoch
  int64_t test_limit = 500;
  int64_t interval = 20;
  int64_t keep = 3;
  int64_t threads = 1;
};

std::string JobYaml(const Job& j, const fs::path& out) {
  std::string opt = j.optimizer == "sgd" ? "  momentum: 0.9\n" : "";
  return fmt::format(
      "name: e2e\nmodel: {}\ndataset:\n  path: {}\n  train_limit: {}\n  test_limit: {}\n"
      "batch_size: {}\nsteps: {}\nseed: 7\nthreads: {}\n"
      "optimizer:\n  type: {}\n  lr: {}\n{}"
      "schedule:\n  type: {}\n  warmup_steps: {}\n"
      "checkpoint:\n  interval_steps: {}\n  keep: {}\n"
      "output_dir: {}\n",
      j.model, kDataset, j.train_limit, j.test_limit, j.batch, j.steps, j.threads, j.optimizer,
      j.lr, opt, j.schedule, j.warmup, j.interval, j.keep, out.string());
}

using SpotTrainTest = testing::E2eTest;
using testing::LastLoggedStep;
using testing::ReadStepLog;
using testing::StepLog;

struct ResumeCase {
  const char* name;
  const char* model;
  const char* optimizer;
};

class BitwiseResumeTest : public SpotTrainTest, public ::testing::WithParamInterface<ResumeCase> {};

TEST_P(BitwiseResumeTest, KilledRunsContinueBitForBit) {
  Job job;
  job.model = GetParam().model;
  job.optimizer = GetParam().optimizer;
  if (job.optimizer == "sgd") job.lr = 0.05;

  // The uninterrupted reference.
  fs::path base_job = WriteJob("base", JobYaml(job, dir_ / "base"));
  ProcessResult base = Train(base_job, dir_ / "base.csv", "base");
  ASSERT_EQ(base.exit_code, 0) << base.err;
  StepLog reference = ReadStepLog(dir_ / "base.csv");
  ASSERT_EQ(reference.size(), static_cast<size_t>(job.steps));

  std::mt19937 rng(20261130 + std::hash<std::string>{}(GetParam().name) % 1000);
  std::uniform_int_distribution<int64_t> pick(job.interval + 1, job.steps - 25);
  std::uniform_int_distribution<int> jitter_us(0, 20000);  // lands anywhere in a step or a save
  for (int trial = 0; trial < 3; ++trial) {
    SCOPED_TRACE(fmt::format("trial {}", trial));
    int64_t kill_at = pick(rng);
    fs::path out = dir_ / fmt::format("kill{}", trial);
    fs::path job_path = WriteJob(fmt::format("kill{}", trial), JobYaml(job, out));
    fs::path log_a = dir_ / fmt::format("kill{}_a.csv", trial);
    fs::path log_b = dir_ / fmt::format("kill{}_b.csv", trial);
    {
      ChildProcess p(TrainArgs(job_path, log_a), (dir_ / fmt::format("kill{}_a", trial)).string());
      while (p.Running() && LastLoggedStep(log_a) < kill_at) ::usleep(500);
      ::usleep(static_cast<useconds_t>(jitter_us(rng)));
      p.Kill(SIGKILL);
      ProcessResult r = p.Wait();
      ASSERT_EQ(r.term_signal, SIGKILL) << "finished before the kill at step " << kill_at << "\n"
                                        << r.err;
    }
    StepLog before = ReadStepLog(log_a);
    int64_t killed_after = before.empty() ? 0 : before.rbegin()->first;
    ProcessResult resumed = Train(job_path, log_b, fmt::format("kill{}_b", trial));
    ASSERT_EQ(resumed.exit_code, 0) << resumed.err;
    EXPECT_NE(resumed.out.find("resumed from step"), std::string::npos) << resumed.out;
    StepLog after = ReadStepLog(log_b);
    ASSERT_FALSE(after.empty());
    int64_t resume_step = after.begin()->first - 1;
    std::cerr << fmt::format("  trial {}: killed after step {}, resumed from checkpoint at {}\n",
                             trial, killed_after, resume_step);
    // Saves are asynchronous with at most two in flight: on a loaded machine
    // the kill can find the last two submitted versions still being written,
    // so the newest complete one is at most two intervals behind.
    EXPECT_GE(resume_step, std::max<int64_t>(0, (killed_after / job.interval - 2) * job.interval));
    EXPECT_LE(resume_step, killed_after);
    EXPECT_EQ(resume_step % job.interval, 0);
    EXPECT_EQ(after.rbegin()->first, job.steps);
    // Every step either run printed is bitwise the reference's (loss and lr).
    int64_t compared = 0;
    for (const StepLog* log : {&before, &after}) {
      for (const auto& [step, text] : *log) {
        ASSERT_EQ(text, reference.at(step)) << "step " << step;
        ++compared;
      }
    }
    EXPECT_EQ(after.size(), static_cast<size_t>(job.steps - resume_step));
    testing::ExpectSameNewestCheckpoint(dir_ / "base" / "checkpoints", out / "checkpoints");
    auto s1 = nlohmann::json::parse(*ReadFile((dir_ / "base" / "summary.json").string()));
    auto s2 = nlohmann::json::parse(*ReadFile((out / "summary.json").string()));
    EXPECT_EQ(s1["test_accuracy"], s2["test_accuracy"]);
    EXPECT_EQ(s1["test_loss"], s2["test_loss"]);
  }
}

INSTANTIATE_TEST_SUITE_P(Optimizers, BitwiseResumeTest,
                         ::testing::Values(ResumeCase{"adam_cnn", "cnn", "adam"},
                                           ResumeCase{"sgd_cnn", "cnn", "sgd"},
                                           ResumeCase{"sgd_mlp", "mlp", "sgd"}),
                         [](const auto& info) { return std::string(info.param.name); });

// A finished run with versions 1-4 at steps 0 (rollback's starting point),
// 20, 40 and 60 (deltas against their predecessors), then damage.
class CorruptionTest : public SpotTrainTest {
 protected:
  void SetUp() override {
    SpotTrainTest::SetUp();
    job_.model = "mlp";
    job_.steps = 60;
    job_.keep = 5;
    ProcessResult r = Train(WriteJob("pristine", JobYaml(job_, dir_ / "pristine")), "", "pristine");
    ASSERT_EQ(r.exit_code, 0) << r.err;
  }
  // Copies the pristine checkpoints into a new run dir, damages them, resumes to step 80.
  ProcessResult ResumeAfter(const std::string& tag,
                            const std::function<void(const fs::path& ckpt_dir)>& damage) {
    fs::path out = dir_ / tag;
    fs::create_directories(out);
    fs::copy(dir_ / "pristine" / "checkpoints", out / "checkpoints", fs::copy_options::recursive);
    damage(out / "checkpoints");
    Job longer = job_;
    longer.steps = 80;
    return Train(WriteJob(tag, JobYaml(longer, out)), "", tag);
  }
  Job job_;
};

TEST_F(CorruptionTest, DamagedNewestIsSkippedForThePreviousOne) {
  using ckpt::CheckpointStore;
  struct Case {
    const char* tag;
    std::function<void(const fs::path&)> damage;
    const char* reason;
  };
  const Case cases[] = {
      {"truncated",
       [](const fs::path& d) {
         fs::path f = d / CheckpointStore::DataFileName(4);
         fs::resize_file(f, fs::file_size(f) - 100);
       },
       "truncated"},
      {"flipped",
       [](const fs::path& d) {
         std::fstream f(d / CheckpointStore::DataFileName(4),
                        std::ios::in | std::ios::out | std::ios::binary);
         f.seekp(5000);
         f.put('\x5a');
       },
       "checksum"},
      {"no_manifest",
       [](const fs::path& d) { fs::remove(d / CheckpointStore::ManifestFileName(4)); },
       "no manifest"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.tag);
    ProcessResult r = ResumeAfter(c.tag, c.damage);
    ASSERT_EQ(r.exit_code, 0) << r.err;
    EXPECT_NE(r.err.find("skipping checkpoint"), std::string::npos) << r.err;
    EXPECT_NE(r.err.find("ckpt-000004"), std::string::npos) << r.err;
    EXPECT_NE(r.err.find(c.reason), std::string::npos) << r.err;
    EXPECT_NE(r.err.find("resuming from checkpoint 3 (local tier; step 40"), std::string::npos)
        << r.err;
    EXPECT_NE(r.out.find("80 steps (40 this run, resumed from step 40)"), std::string::npos)
        << r.out;
  }
}

TEST_F(CorruptionTest, NoValidCheckpointStartsFreshAndSaysSo) {
  ProcessResult r = ResumeAfter("all_bad", [](const fs::path& d) {
    for (int id = 1; id <= 4; ++id)
      fs::resize_file(d / ckpt::CheckpointStore::DataFileName(id), 64);
  });
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.err.find("no valid checkpoint; starting fresh"), std::string::npos) << r.err;
  EXPECT_NE(r.out.find("80 steps (80 this run)"), std::string::npos) << r.out;
}

TEST_F(CorruptionTest, EmptyDirectoryStartsFresh) {
  ProcessResult r = ResumeAfter("empty", [](const fs::path& d) { fs::remove_all(d); });
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.err.find("no checkpoint in"), std::string::npos) << r.err;
}

// One training loop: the single-process trainer and one elastic worker run
// the same step (the same rollback included), so their step logs are bitwise
// equal, and so are the models they end with.
TEST_F(SpotTrainTest, OneProcessAndOneElasticWorkerTrainBitForBitTheSame) {
  Job j;
  j.steps = 120;
  auto yaml = [&](const std::string& name) {
    return JobYaml(j, dir_ / name) + "faults: {nan_loss_at_step: 57}\n";
  };
  ProcessResult single = Train(WriteJob("single", yaml("single")), dir_ / "single.csv", "single");
  ASSERT_EQ(single.exit_code, 0) << single.err;
  ProcessResult elastic = Spot({"train", WriteJob("elastic", yaml("elastic")).string(), "--nproc",
                                "1", "--plain", "--step-log", (dir_ / "elastic.csv").string()},
                               "elastic");
  ASSERT_EQ(elastic.exit_code, 0) << elastic.err;
  const StepLog a = ReadStepLog(dir_ / "single.csv");
  const StepLog b = ReadStepLog(dir_ / "elastic.csv");
  ASSERT_EQ(a.size(), 120u);
  ASSERT_EQ(b.size(), 120u);
  for (int64_t s = 1; s <= 120; ++s) EXPECT_EQ(a.at(s), b.at(s)) << "step " << s;
  EXPECT_NE(elastic.err.find("loss is nan at step 57: rolled back to checkpoint"),
            std::string::npos)
      << elastic.err;
  std::ifstream events(dir_ / "elastic" / "events.jsonl");
  std::string line;
  ASSERT_TRUE(std::getline(events, line));
  EXPECT_EQ(nlohmann::json::parse(line)["skipped_batches"], nlohmann::json::array({56}));
  EXPECT_EQ(*ReadFile((dir_ / "single" / "model.pt").string()),
            *ReadFile((dir_ / "elastic" / "model.pt").string()));
}

// Fine-tuning: a fresh run starts from a safetensors file's weights, by name,
// with prefixes renamed and a replaced head left out; a file that does not
// fit the model is refused before training, naming what does not fit.
TEST_F(SpotTrainTest, AFreshRunStartsFromPretrainedWeights) {
  Job j;
  j.steps = 150;
  j.schedule = "constant";
  j.warmup = 0;
  ASSERT_EQ(Train(WriteJob("base", JobYaml(j, dir_ / "base")), "", "base").exit_code, 0);
  const nlohmann::json base =
      nlohmann::json::parse(*ReadFile((dir_ / "base" / "summary.json").string()));
  const fs::path weights = dir_ / "base.safetensors";
  ProcessResult exported =
      Spot({"ckpt", "export", std::to_string(base["last_checkpoint_version"].get<int64_t>()),
            "--dir", (dir_ / "base" / "checkpoints").string(), "--out", weights.string()},
           "export");
  ASSERT_EQ(exported.exit_code, 0) << exported.err;

  auto run = [&](const std::string& name, const std::string& init, const std::string& model) {
    Job k = j;
    k.model = model;
    k.steps = 1;
    k.lr = 1e-6;  // one step that barely moves: what it evaluates is what it loaded
    return Train(WriteJob(name, JobYaml(k, dir_ / name) + init), "", name);
  };
  auto accuracy = [&](const std::string& name) {
    return nlohmann::json::parse(
               *ReadFile((dir_ / name / "summary.json").string()))["test_accuracy"]
        .get<double>();
  };
  ProcessResult whole =
      run("whole", fmt::format("init: {{weights: {}}}\n", weights.string()), "cnn");
  ASSERT_EQ(whole.exit_code, 0) << whole.err;
  EXPECT_NE(whole.err.find("init: 16 tensors from"), std::string::npos) << whole.err;
  EXPECT_NEAR(accuracy("whole"), base["test_accuracy"].get<double>(), 0.01);
  ProcessResult fresh = run("fresh", "", "cnn");
  ASSERT_EQ(fresh.exit_code, 0);
  EXPECT_LT(accuracy("fresh"), accuracy("whole") - 0.2) << "the weights made the difference";

  // The file's names under another prefix, and a new head.
  ProcessResult renamed =
      RunProcess({"/usr/bin/python3", "-c",
                  "import json, struct, sys\n"
                  "b = open(sys.argv[1], 'rb').read(); n = struct.unpack('<Q', b[:8])[0]\n"
                  "h = json.loads(b[8:8 + n])\n"
                  "h = {('backbone.' + k if k != '__metadata__' else k): v for k, v in h.items()}\n"
                  "t = json.dumps(h).encode()\n"
                  "open(sys.argv[2], 'wb').write(struct.pack('<Q', len(t)) + t + b[8 + n:])\n",
                  weights.string(), (dir_ / "prefixed.safetensors").string()},
                 (dir_ / "prefix").string());
  ASSERT_EQ(renamed.exit_code, 0) << renamed.err;
  ProcessResult head = run("head",
                           fmt::format("init:\n  weights: {}\n  rename: {{\"backbone.\": \"\"}}\n"
                                       "  skip: [fc2.]\n",
                                       (dir_ / "prefixed.safetensors").string()),
                           "cnn");
  ASSERT_EQ(head.exit_code, 0) << head.err;
  EXPECT_NE(head.err.find("init: 14 tensors from"), std::string::npos) << head.err;
  EXPECT_NE(head.err.find("init: left as initialized: fc2.weight, fc2.bias"), std::string::npos)
      << head.err;

  // Weights of another model: refused, with what does not fit.
  ProcessResult other =
      run("other", fmt::format("init: {{weights: {}}}\n", weights.string()), "mlp");
  EXPECT_EQ(other.exit_code, 2);
  EXPECT_NE(other.err.find("init.weights: " + weights.string()), std::string::npos) << other.err;
  EXPECT_NE(other.err.find("fc1.weight is [128, 3136], the model's fc1.weight is [256, 784]"),
            std::string::npos)
      << other.err;
  ProcessResult loose = run("loose",
                            fmt::format("init: {{weights: {}, strict: true, skip: [fc]}}\n",
                                        (dir_ / "prefixed.safetensors").string()),
                            "mlp");
  EXPECT_EQ(loose.exit_code, 2);
  EXPECT_NE(loose.err.find("does not fit the model (init.strict): unused: backbone."),
            std::string::npos)
      << loose.err;
}

TEST_F(SpotTrainTest, CheckpointOfAnotherJobIsRefused) {
  Job job;
  job.model = "mlp";
  job.steps = 20;
  ASSERT_EQ(Train(WriteJob("a", JobYaml(job, dir_ / "run")), "", "a").exit_code, 0);
  job.batch = 32;
  ProcessResult r = Train(WriteJob("b", JobYaml(job, dir_ / "run")), "", "b");
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("made by a different job"), std::string::npos) << r.err;
}

// Bad input: each case gets its own clear message and exit code 2.
TEST_F(SpotTrainTest, BadInputIsRejectedWithClearMessages) {
  const std::string good = JobYaml(Job{}, dir_ / "out");
  auto replace = [&](const std::string& from, const std::string& to) {
    std::string y = good;
    size_t at = y.find(from);
    EXPECT_NE(at, std::string::npos) << from;
    return y.replace(at, from.size(), to);
  };
  struct Case {
    const char* name;
    std::string yaml;
    std::string expected;
  };
  const Case cases[] = {
      {"missing_field", replace("model: cnn\n", ""), "model: required field is missing"},
      {"wrong_type", replace("batch_size: 16", "batch_size: sixteen"),
       "batch_size: expected an integer (got 'sixteen')"},
      {"negative_batch", replace("batch_size: 16", "batch_size: -8"),
       "batch_size: must be >= 1 (got -8)"},
      {"unknown_model", replace("model: cnn", "model: resnet"),
       "model: unknown value 'resnet' (expected one of: cnn, mlp, gpt)"},
      {"missing_dataset", replace(kDataset, "/nonexistent/fashion"),
       "dataset.path: /nonexistent/fashion: missing train-images-idx3-ubyte.gz"},
      {"unknown_field", replace("seed: 7", "sead: 7"),
       "sead: unknown field (did you mean 'seed'?)"},
      {"wrong_optimizer_field", replace("type: adam", "type: adam\n  momentum: 0.9"),
       "optimizer.momentum: applies to sgd only"},
      {"bad_lr", replace("lr: 0.002", "lr: -1"), "optimizer.lr: must be > 0 (got -1)"},
      {"no_length", replace("steps: 150", "steps: 0"), "give epochs or steps"},
      {"bad_schedule", replace("type: cosine", "type: linear"),
       "schedule.type: unknown value 'linear'"},
      {"bad_yaml", replace("batch_size: 16", "batch_size: [16"), "invalid YAML"},
      {"not_a_mapping", "- a\n- b\n", "expected a mapping of fields at the top level"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    fs::path job = WriteJob(c.name, c.yaml);
    ProcessResult r = Train(job, "", c.name);
    EXPECT_EQ(r.exit_code, 2) << r.err;
    EXPECT_NE(r.err.find(job.string()), std::string::npos) << "names the file:\n" << r.err;
    EXPECT_NE(r.err.find(c.expected), std::string::npos) << r.err;
    EXPECT_FALSE(fs::exists(dir_ / "out")) << "nothing is written for bad input";
  }
  // The line is named too.
  ProcessResult r =
      Train(WriteJob("line", replace("batch_size: 16", "batch_size: -8")), "", "line");
  EXPECT_NE(r.err.find("line.yaml:7:13: batch_size"), std::string::npos) << r.err;
  // A file that does not exist, and command-line misuse.
  r = Train(dir_ / "absent.yaml", "", "absent");
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("absent.yaml: no such file"), std::string::npos) << r.err;
  r = RunProcess({SPOT_BIN, "train"}, (dir_ / "nojob").string());
  EXPECT_EQ(r.exit_code, 2);
  r = RunProcess({SPOT_BIN, "train", "--help"}, (dir_ / "help").string());
  EXPECT_EQ(r.exit_code, 0);
  EXPECT_NE(r.out.find("--step-log"), std::string::npos);
}

// The model spot train writes loads in Python PyTorch with the same accuracy.
TEST_F(SpotTrainTest, PythonLoadsTheModelWithTheSameAccuracy) {
  if (!fs::exists("/usr/bin/python3")) GTEST_SKIP() << "no /usr/bin/python3";
  Job job;
  job.batch = 64;
  job.steps = 120;
  job.train_limit = 0;
  job.test_limit = 0;  // the whole test set, as the Python side evaluates it
  job.threads = 2;
  ProcessResult r = Train(WriteJob("interop", JobYaml(job, dir_ / "run")), "", "interop");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  auto summary = nlohmann::json::parse(*ReadFile((dir_ / "run" / "summary.json").string()));
  double cpp_accuracy = summary["test_accuracy"];
  ProcessResult py =
      RunProcess({"/usr/bin/python3", SPOT_SOURCE_DIR "/python/eval_model.py", "--model", "cnn",
                  "--state", (dir_ / "run" / "model.pt").string(), "--data", kDataset},
                 (dir_ / "python").string());
  ASSERT_EQ(py.exit_code, 0) << py.err;
  auto got = nlohmann::json::parse(py.out);
  EXPECT_EQ(got["count"], 10000);
  double py_accuracy = got["accuracy"];
  std::cerr << fmt::format("  C++ accuracy {:.4f}, Python accuracy {:.4f}\n", cpp_accuracy,
                           py_accuracy);
  EXPECT_GT(cpp_accuracy, 0.5);  // it trained
  EXPECT_NEAR(py_accuracy, cpp_accuracy, 0.001);
  EXPECT_NEAR(double(got["loss"]), double(summary["test_loss"]), 1e-3);
}

}  // namespace
}  // namespace spot
