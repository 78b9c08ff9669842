// End-to-end tests of the built-in language model: a character-level GPT on
// Genesis (Debian's bible-kjv) through `spot prepare-text`, `spot train`
// (one process and --nproc 2) and `spot generate`, compared step for step with
// the same model in Python PyTorch (examples/gpt-bible/reference.py).
#include <fmt/format.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "apps/spot/e2e_support.h"
#include "apps/spot/test_process.h"
#include "core/file_io.h"
#include "core/job_files.h"

namespace spot {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;
using testing::ProcessResult;
using testing::ReadStepLog;
using testing::RunProcess;
using testing::StepLog;

constexpr const char* kPython = "/usr/bin/python3";
constexpr const char* kReference = SPOT_SOURCE_DIR "/examples/gpt-bible/reference.py";
constexpr const char* kBible = "/usr/bin/bible";

class GptTest : public testing::E2eTest {
 protected:
  void SetUp() override {
    E2eTest::SetUp();
    ASSERT_TRUE(fs::exists(kBible)) << "no " << kBible << ": run scripts/install-deps.sh";
    ProcessResult text = RunProcess({kBible, "-f", "Gen1:1-Gen50:26"}, (dir_ / "bible").string());
    ASSERT_EQ(text.exit_code, 0) << text.err;
    std::ofstream(dir_ / "genesis.txt") << text.out;
    ProcessResult prep = Spot({"prepare-text", (dir_ / "genesis.txt").string(), "--out",
                               data().string(), "--val-fraction", "0.1"},
                              "prepare");
    ASSERT_EQ(prep.exit_code, 0) << prep.err;
  }
  fs::path data() const { return dir_ / "data"; }
  std::string Job(const std::string& name, int64_t steps, const std::string& extra = "") {
    return fmt::format(
        "name: {}\nmodel: {{name: gpt, layers: 2, heads: 2, width: 32, context: 32}}\n"
        "dataset: {{name: tokens, path: {}, train_limit: 2000, test_limit: 64}}\n"
        "batch_size: 16\nsteps: {}\nseed: 3\nthreads: 1\n"
        "optimizer: {{type: adam, lr: 0.003}}\nschedule: {{type: cosine, warmup_steps: 2}}\n"
        "checkpoint: {{interval_steps: 5}}\noutput_dir: {}\n{}",
        name, data().string(), steps, (dir_ / name).string(), extra);
  }
  json Summary(const std::string& run) {
    return json::parse(*ReadFile((dir_ / run / "summary.json").string()));
  }
  // Returns the resumed run.
  ProcessResult KillAndResume(const std::string& precision);
  ProcessResult Generate(const fs::path& job, const std::string& prompt, const std::string& tag) {
    return Spot({"generate", job.string(), "--prompt", prompt, "--tokens", "40", "--seed", "7"},
                tag);
  }
};

// The same weights (Python's initialization, loaded through init.weights) and
// the same batches give the same losses in C++ and Python, and the weights
// spot train writes load back into the Python model with its validation loss.
TEST_F(GptTest, TrainsAsInPythonStepForStepAndLoadsBack) {
  const fs::path init = dir_ / "init.pt";
  const fs::path job =
      WriteJob("eq", Job("eq", 8, fmt::format("init: {{weights: {}}}\n", init.string())));
  ProcessResult py = RunProcess(
      {kPython, kReference, job.string(), "--init-out", init.string(), "--threads", "1", "--json"},
      (dir_ / "python").string());
  ASSERT_EQ(py.exit_code, 0) << py.err;
  const json ref = json::parse(py.out);
  ProcessResult r = Train(job, dir_ / "eq.csv", "eq");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.err.find("init: 28 tensors"), std::string::npos) << r.err;
  EXPECT_NE(r.out.find("perplexity"), std::string::npos) << r.out;
  const std::vector<StepLogRow> cpp = spot::ReadStepLog((dir_ / "eq.csv").string());
  ASSERT_EQ(cpp.size(), 8u);
  for (int s = 1; s <= 8; ++s) {
    ASSERT_EQ(cpp[s - 1].step, s);
    EXPECT_NEAR(cpp[s - 1].loss, ref["losses"][s - 1].get<double>(), 1e-5) << "step " << s;
  }
  const double val = Summary("eq")["test_loss"].get<double>();
  EXPECT_NEAR(val, ref["val_loss"].get<double>(), 1e-5);
  EXPECT_LT(val, cpp[0].loss) << "it learned";

  ProcessResult back = RunProcess({kPython, kReference, job.string(), "--state",
                                   (dir_ / "eq" / "model.pt").string(), "--threads", "1"},
                                  (dir_ / "back").string());
  ASSERT_EQ(back.exit_code, 0) << back.err;
  EXPECT_NEAR(json::parse(back.out)["val_loss"].get<double>(), val, 1e-5);
}

// Killed with SIGKILL mid-run and resumed, the GPT continues bit for bit, in
// float32, bf16 and auto alike.
ProcessResult GptTest::KillAndResume(const std::string& precision) {
  auto job = [&](const std::string& name) {
    return WriteJob(name, Job(name, 30, "precision: " + precision + "\n"));
  };
  ProcessResult ref = Train(job("ref"), dir_ / "ref.csv", "ref");
  EXPECT_EQ(ref.exit_code, 0) << ref.err;
  if (precision == "auto") {
    EXPECT_NE(ref.err.find("precision auto: 5 of 16 layers stay float32"), std::string::npos)
        << ref.err;
  }
  {
    testing::ChildProcess p(TrainArgs(job("cut"), dir_ / "cut.csv"), (dir_ / "cut_a").string());
    while (p.Running() && testing::LastLoggedStep(dir_ / "cut.csv") < 13) ::usleep(500);
    p.Kill(SIGKILL);
    p.Wait();
  }
  EXPECT_LT(testing::LastLoggedStep(dir_ / "cut.csv"), 30) << "killed mid-run";
  ProcessResult resumed = Train(job("cut"), dir_ / "cut.csv", "cut_b");
  EXPECT_EQ(resumed.exit_code, 0) << resumed.err;
  EXPECT_NE(resumed.err.find("resuming from checkpoint"), std::string::npos) << resumed.err;
  const StepLog full = ReadStepLog(dir_ / "ref.csv"), cut = ReadStepLog(dir_ / "cut.csv");
  EXPECT_EQ(cut.size(), 30u);
  for (int64_t s = 1; s <= 30 && cut.size() == 30; ++s) {
    EXPECT_EQ(cut.at(s), full.at(s)) << "step " << s;
  }
  testing::ExpectSameNewestCheckpoint(dir_ / "ref" / "checkpoints", dir_ / "cut" / "checkpoints");
  return resumed;
}

TEST_F(GptTest, AKilledGptResumesBitForBit) { KillAndResume("fp32"); }

// precision: auto measures its layers once, before the first step, and keeps
// the choice in the checkpoint: the resumed run measures nothing and
// continues bit for bit.
TEST_F(GptTest, AKilledAutoPrecisionGptResumesBitForBit) {
  ProcessResult resumed = KillAndResume("auto");
  EXPECT_EQ(resumed.err.find("precision auto:"), std::string::npos) << resumed.err;
}

// bf16 autocast computes other numbers (close to float32's) and resumes bit
// for bit too.
TEST_F(GptTest, AKilledBf16GptResumesBitForBit) {
  KillAndResume("bf16");
  ASSERT_EQ(Train(WriteJob("fp32", Job("fp32", 1)), dir_ / "fp32.csv", "fp32").exit_code, 0);
  const auto bf16 = spot::ReadStepLog((dir_ / "ref.csv").string());
  const auto fp32 = spot::ReadStepLog((dir_ / "fp32.csv").string());
  ASSERT_FALSE(bf16.empty() || fp32.empty());
  EXPECT_NE(bf16[0].loss, fp32[0].loss) << "bf16 ran in bf16";
  EXPECT_NEAR(bf16[0].loss, fp32[0].loss, 0.01 * fp32[0].loss);
}

// Two elastic workers train it (evaluating every 10 steps), and `spot
// generate` samples from their checkpoint: the same seed gives the same text.
TEST_F(GptTest, TwoWorkersTrainItAndGenerateSamplesFromTheCheckpoint) {
  const fs::path job = WriteJob(
      "two", Job("two", 30, "eval_every: 10\ndistributed: {max_workers: 2, join_window_s: 60}\n"));
  ProcessResult none = Generate(job, "And God", "none");
  EXPECT_EQ(none.exit_code, 1);
  EXPECT_NE(none.err.find("no checkpoint"), std::string::npos) << none.err;
  EXPECT_FALSE(fs::exists(dir_ / "two")) << "generate writes nothing for a job never trained";

  ProcessResult r = Spot({"train", job.string(), "--nproc", "2", "--plain"}, "two");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(Summary("two")["world"], 2);
  for (const char* at : {"step 10: val loss", "step 20: val loss", "step 30: val loss"}) {
    EXPECT_NE(r.err.find(at), std::string::npos) << at << "\n" << r.err;
  }
  ProcessResult a = Generate(job, "And God", "gen_a");
  ASSERT_EQ(a.exit_code, 0) << a.err;
  EXPECT_NE(a.err.find("(step 30"), std::string::npos) << a.err;
  EXPECT_EQ(a.out.rfind("And God", 0), 0u) << a.out;
  EXPECT_EQ(a.out.size(), std::string("And God").size() + 40 + 1) << a.out;
  EXPECT_EQ(Generate(job, "And God", "gen_b").out, a.out) << "the same seed, the same text";

  ProcessResult bad = Generate(job, "And God~", "gen_bad");
  EXPECT_EQ(bad.exit_code, 2);
  EXPECT_NE(bad.err.find("--prompt: byte 126 at offset 7 is not in the vocabulary"),
            std::string::npos)
      << bad.err;
}

// init.weights takes what torch.save writes: a state dict, or a training
// checkpoint holding one under "model"; an OrderedDict, which LibTorch 1.13's
// unpickler cannot read, is an error that says how to save it instead.
TEST_F(GptTest, InitTakesTorchSaveCheckpointsAndExplainsOrderedDicts) {
  const fs::path job_file = dir_ / "plain.yaml";
  WriteJob("plain", Job("plain", 1));
  ASSERT_EQ(RunProcess({kPython, kReference, job_file.string(), "--init-out",
                        (dir_ / "sd.pt").string(), "--steps", "1", "--threads", "1"},
                       (dir_ / "python").string())
                .exit_code,
            0);
  ProcessResult wrap = RunProcess(
      {kPython, "-c",
       "import sys, collections, torch\n"
       "sd = torch.load(sys.argv[1])\n"
       "torch.save({'model': sd, 'iter_num': 5}, sys.argv[2])\n"
       "torch.save(collections.OrderedDict(sd), sys.argv[3])\n",
       (dir_ / "sd.pt").string(), (dir_ / "ckpt.pt").string(), (dir_ / "od.pt").string()},
      (dir_ / "wrap").string());
  ASSERT_EQ(wrap.exit_code, 0) << wrap.err;
  auto job = [&](const std::string& name, const std::string& weights) {
    return WriteJob(name, Job(name, 2, "init: {weights: " + (dir_ / weights).string() + "}\n"));
  };
  ProcessResult nested = Train(job("nested", "ckpt.pt"), "", "nested");
  ASSERT_EQ(nested.exit_code, 0) << nested.err;
  EXPECT_NE(nested.err.find("init: 28 tensors from " + (dir_ / "ckpt.pt").string()),
            std::string::npos)
      << nested.err;
  ProcessResult od = Train(job("od", "od.pt"), "", "od");
  EXPECT_EQ(od.exit_code, 2);
  EXPECT_NE(od.err.find("init.weights: " + (dir_ / "od.pt").string() +
                        ": an OrderedDict (model.state_dict() as it is), which LibTorch 1.13 "
                        "cannot read: save a plain dict"),
            std::string::npos)
      << od.err;
}

// Transfer learning: a GPT pretrained on Genesis and fine-tuned on Exodus
// (its embeddings frozen for the first steps) reaches a lower validation loss
// on Exodus than the same steps from scratch. Both books are tokenized in the
// vocabulary of the whole Bible; Genesis's own lacks two of Exodus's bytes.
TEST_F(GptTest, FineTuningAPretrainedGptBeatsTrainingFromScratch) {
  auto book = [&](const std::string& range, const std::string& name) {
    ProcessResult t = RunProcess({kBible, "-f", range}, (dir_ / (name + "_text")).string());
    EXPECT_EQ(t.exit_code, 0) << t.err;
    std::ofstream(dir_ / (name + ".txt")) << t.out;
    return (dir_ / (name + ".txt")).string();
  };
  const std::string exodus = book("Exo1:1-Exo40:38", "exodus");
  ProcessResult narrow = Spot({"prepare-text", exodus, "--out", (dir_ / "narrow").string(),
                               "--vocab", (data() / "vocab.json").string()},
                              "narrow");
  EXPECT_EQ(narrow.exit_code, 2);
  EXPECT_NE(narrow.err.find(exodus + ": byte 86 at offset"), std::string::npos) << narrow.err;

  ASSERT_EQ(Spot({"prepare-text", book("Gen1:1-Rev22:21", "all"), "--out", (dir_ / "all").string()},
                 "all")
                .exit_code,
            0);
  const std::string vocab = (dir_ / "all" / "vocab.json").string();
  for (const auto& [text, out] :
       {std::pair{(dir_ / "genesis.txt").string(), "gen"}, std::pair{exodus, "exo"}}) {
    ASSERT_EQ(Spot({"prepare-text", text, "--out", (dir_ / out).string(), "--vocab", vocab}, out)
                  .exit_code,
              0);
  }
  auto job = [&](const std::string& name, const std::string& data_dir, int64_t steps,
                 const std::string& extra) {
    std::string yaml = Job(name, steps, extra);
    const std::string from = data().string(), to = (dir_ / data_dir).string();
    yaml.replace(yaml.find(from), from.size(), to);
    return WriteJob(name, yaml);
  };
  ASSERT_EQ(Train(job("pre", "gen", 80, ""), "", "pre").exit_code, 0);
  const std::string tune = "init: {weights: " + (dir_ / "pre" / "model.pt").string() +
                           "}\nparam_groups:\n  \"transformer.wte.\": {frozen_until: 10}\n"
                           "  \"transformer.wpe.\": {frozen_until: 10, lr_scale: 0.5}\n";
  ProcessResult tuned = Train(job("tuned", "exo", 20, tune), "", "tuned");
  ASSERT_EQ(tuned.exit_code, 0) << tuned.err;
  EXPECT_NE(tuned.err.find("init: 28 tensors"), std::string::npos) << tuned.err;
  ASSERT_EQ(Train(job("scratch", "exo", 20, ""), "", "scratch").exit_code, 0);
  const double t = Summary("tuned")["test_loss"], s = Summary("scratch")["test_loss"];
  std::cerr << fmt::format("  Exodus val loss after 20 steps: fine-tuned {:.4f}, scratch {:.4f}\n",
                           t, s);
  EXPECT_LT(t, s * 0.95);
}

TEST_F(GptTest, BadTokenFilesAreClearErrors) {
  const fs::path job = WriteJob("bad", Job("bad", 4));
  const std::string val = (data() / "val.bin").string();
  std::string bytes = *ReadFile(val);
  std::ofstream(val, std::ios::binary) << bytes.substr(0, bytes.size() - 1);
  ProcessResult odd = Train(job, "", "odd");
  EXPECT_EQ(odd.exit_code, 2);
  EXPECT_NE(odd.err.find(val + ": " + std::to_string(bytes.size() - 1) +
                         " bytes is not a whole number of uint16 tokens"),
            std::string::npos)
      << odd.err;

  bytes[6] = 70;  // token 3: outside the vocabulary of Genesis's characters
  bytes[7] = 0;
  std::ofstream(val, std::ios::binary) << bytes;
  ProcessResult outside = Train(job, "", "outside");
  EXPECT_EQ(outside.exit_code, 2);
  EXPECT_NE(outside.err.find(val + ": token 3 is 70, outside the vocabulary"), std::string::npos)
      << outside.err;
  EXPECT_FALSE(fs::exists(dir_ / "bad" / "checkpoints")) << "nothing written for bad data";

  fs::remove(val);
  ProcessResult missing = Train(job, "", "missing");
  EXPECT_EQ(missing.exit_code, 2);
  EXPECT_NE(missing.err.find("dataset.path: " + data().string() + ": no val.bin"),
            std::string::npos)
      << missing.err;

  ProcessResult heads =
      Train(WriteJob("heads",
                     "name: h\nmodel: {name: gpt, heads: 3, width: 32}\ndataset: {name: tokens, "
                     "path: " +
                         data().string() +
                         "}\nbatch_size: 4\nsteps: 1\n"
                         "optimizer: {type: adam}\n"),
            "", "heads");
  EXPECT_EQ(heads.exit_code, 2);
  EXPECT_NE(heads.err.find("model.heads: must divide width"), std::string::npos) << heads.err;
}

}  // namespace
}  // namespace spot
