#include "train/train_spec.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <limits>

#include "core/temp_dir.h"
#include "train/step_runner.h"

namespace spot::train {
namespace {

TEST(TrainSpecTest, TheExampleJobLoads) {
  auto s = LoadTrainSpec(SPOT_SOURCE_DIR "/examples/fashion-mnist.yaml");
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  EXPECT_EQ(s->model, "cnn");
  EXPECT_EQ(s->epochs, 2);
  EXPECT_EQ(s->optimizer.type, "adam");
  EXPECT_EQ(s->schedule.type, "cosine");
  EXPECT_EQ(s->checkpoint.dir, s->output_dir + "/checkpoints");
}

TEST(TrainSpecTest, DefaultsFollowTheOptimizer) {
  auto sgd = ParseTrainSpec("model: mlp\nbatch_size: 8\nsteps: 10\noptimizer: {type: sgd}\n", "j");
  ASSERT_TRUE(sgd.ok()) << sgd.status().ToString();
  EXPECT_DOUBLE_EQ(sgd->optimizer.lr, 0.01);
  EXPECT_DOUBLE_EQ(sgd->optimizer.momentum, 0.9);
  EXPECT_EQ(sgd->output_dir, "runs/train");
  EXPECT_EQ(sgd->resume, "auto");
  auto adam =
      ParseTrainSpec("model: mlp\nbatch_size: 8\nsteps: 10\noptimizer: {type: adam}\n", "j");
  ASSERT_TRUE(adam.ok());
  EXPECT_DOUBLE_EQ(adam->optimizer.lr, 1e-3);
}

TEST(TrainSpecTest, OptimizerIsRequired) {
  auto s = ParseTrainSpec("model: mlp\nbatch_size: 8\nsteps: 10\n", "j");
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.status().message().find("optimizer: required section is missing"), std::string::npos)
      << s.status().message();
}

// Why a job with `extra` lines fails (every problem of the file), or "".
std::string Why(const std::string& extra, const std::string& model = "model: mlp\n") {
  auto s = ParseTrainSpec(model + "batch_size: 8\nsteps: 10\noptimizer: {type: adam}\n" + extra,
                          "j.yaml");
  return s.ok() ? "" : s.status().message();
}

TEST(TrainSpecTest, AnElasticWorkerHoldsTheWholeImageFolderUnlessToldOwn) {
  TempDir dir = TempDir::Create("spec_hold").value();
  std::filesystem::create_directories(dir.path() / "train");
  std::filesystem::create_directories(dir.path() / "test");
  const std::string job = "model: cnn\nbatch_size: 8\nsteps: 10\noptimizer: {type: adam}\n";
  const std::string d = dir.path().string();
  auto dflt = ParseTrainSpec(job + "dataset: {name: images, path: " + d + "}\n", "j.yaml");
  ASSERT_TRUE(dflt.ok()) << dflt.status().ToString();
  EXPECT_EQ(dflt->cache.hold, "whole");
  auto own = ParseTrainSpec(job + "dataset: {name: images, path: " + d + ", cache: {hold: own}}\n",
                            "j.yaml");
  ASSERT_TRUE(own.ok()) << own.status().ToString();
  EXPECT_EQ(own->cache.hold, "own");
  const std::string bad =
      Why("dataset: {name: images, path: " + d + ", cache: {hold: half}}\n", "model: cnn\n");
  EXPECT_NE(bad.find("dataset.cache.hold"), std::string::npos) << bad;
  EXPECT_NE(bad.find("half"), std::string::npos) << bad;
  const std::string stratified =
      Why("dataset: {name: images, path: " + d + ", cache: {hold: own}, sampling: stratified}\n",
          "model: cnn\n");
  EXPECT_NE(stratified.find("dataset.sampling: cache.hold: own"), std::string::npos) << stratified;
}

TEST(TrainSpecTest, DurableMaxChainIsBounded) {
  const std::string job = "model: mlp\nbatch_size: 8\nsteps: 10\noptimizer: {type: adam}\n";
  auto dflt = ParseTrainSpec(job, "j.yaml");
  ASSERT_TRUE(dflt.ok()) << dflt.status().ToString();
  EXPECT_EQ(dflt->checkpoint.durable_max_chain, 1);
  auto zero = ParseTrainSpec(job + "checkpoint: {durable_max_chain: 0}\n", "j.yaml");
  ASSERT_TRUE(zero.ok()) << zero.status().ToString();
  EXPECT_EQ(zero->checkpoint.durable_max_chain, 0);
  const std::string neg = Why("checkpoint: {durable_max_chain: -1}\n");
  EXPECT_NE(neg.find("j.yaml:5:33: checkpoint.durable_max_chain: must be >= 0 (got -1)"),
            std::string::npos)
      << neg;
  const std::string big = Why("checkpoint: {durable_max_chain: 5000}\n");
  EXPECT_NE(big.find("checkpoint.durable_max_chain: must be <= 1000 (got 5000)"), std::string::npos)
      << big;
  EXPECT_NE(Why("checkpoint: {durable_max_chain: deep}\n").find("checkpoint.durable_max_chain"),
            std::string::npos);
}

// epochs: 9223372036854775807 once passed, and epochs x steps per epoch
// wrapped around: "-10 steps", nothing trained, exit 0. Counts are bounded
// where they are read, and the product saturates all the same.
TEST(TrainSpecTest, CountsAreBoundedSoStepArithmeticCannotOverflow) {
  auto Error = [](const std::string& counts) {
    auto s =
        ParseTrainSpec("model: mlp\nbatch_size: 8\noptimizer: {type: adam}\n" + counts, "j.yaml");
    return s.ok() ? std::string() : std::string(s.status().message());
  };
  EXPECT_NE(Error("epochs: 9223372036854775807\n")
                .find("j.yaml:4:9: epochs: must be <= 1e+06 (got 9.22337e+18)"),
            std::string::npos)
      << Error("epochs: 9223372036854775807\n");
  EXPECT_NE(Error("steps: 10000000000000\n").find("steps: must be <= 1e+12"), std::string::npos);
  EXPECT_NE(
      Error("epochs: 99999999999999999999\n").find("epochs: is out of range for a 64-bit integer"),
      std::string::npos);
  EXPECT_NE(Why("eval_every: 10000000000000\n").find("eval_every: must be <= 1e+12"),
            std::string::npos);
  EXPECT_NE(Why("schedule: {warmup_steps: 10000000000000}\n")
                .find("schedule.warmup_steps: must be <= 1e+12"),
            std::string::npos);
  EXPECT_EQ(Error("epochs: 1000000\nsteps: 1000000000000\n"), "");

  TrainSpec spec;
  spec.batch_size = 1;
  spec.epochs = 1000000;
  EXPECT_EQ(TotalSteps(spec, 60000), 60000000000);
  spec.steps = 5;
  EXPECT_EQ(TotalSteps(spec, 60000), 5);
  spec.steps = 0;
  spec.epochs = std::numeric_limits<int64_t>::max();  // past the spec's bounds
  EXPECT_EQ(TotalSteps(spec, 60000), std::numeric_limits<int64_t>::max());
}

// A value out of bounds is not stored: heads: 0 reached `width % heads`.
TEST(TrainSpecTest, OutOfBoundsValuesReachNoLaterCheck) {
  const std::string why = Why("", "model: {name: gpt, heads: 0}\n");
  EXPECT_NE(why.find("j.yaml:1:27: model.heads: must be >= 1 (got 0)"), std::string::npos) << why;
}

// Numbers are plain: "64" is a string, 010 is ambiguous (YAML 1.1 reads 8).
TEST(TrainSpecTest, QuotedAndLeadingZeroNumbersAreRefused) {
  auto s = ParseTrainSpec("model: mlp\nbatch_size: \"64\"\nsteps: 010\noptimizer: {type: adam}\n",
                          "j.yaml");
  ASSERT_FALSE(s.ok());
  const std::string m(s.status().message());
  EXPECT_NE(m.find("j.yaml:2:13: batch_size: expected an integer, got the string \"64\""),
            std::string::npos)
      << m;
  EXPECT_NE(m.find("j.yaml:3:8: steps: '010' has a leading zero"), std::string::npos) << m;
}

TEST(TrainSpecTest, PrecisionDeviceAndTheirOptions) {
  auto s = ParseTrainSpec(
      "model: mlp\nbatch_size: 8\nsteps: 10\noptimizer: {type: adam}\nprecision: auto\n"
      "precision_options: {budget: 0.05, probe_batches: 2}\n",
      "j.yaml");
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  EXPECT_EQ(s->device, "cpu");
  EXPECT_EQ(s->precision_options.budget, 0.05);
  EXPECT_EQ(s->precision_options.probe_batches, 2);
  EXPECT_EQ(s->precision_options.init_scale, 65536);

  EXPECT_NE(
      Why("precision: fp16\n").find("j.yaml:5:12: precision: fp16 needs a GPU (device: cuda)"),
      std::string::npos)
      << Why("precision: fp16\n");
  EXPECT_EQ(Why("precision: fp16\ndevice: cuda\nprecision_options: {init_scale: 1024, "
                "growth_interval: 100}\n"),
            "")
      << "fp16 on cuda passes the reader; setup checks the GPU";
  EXPECT_NE(
      Why("precision: auto\ndevice: cuda\n").find("precision: auto measures layers under CPU"),
      std::string::npos);
  EXPECT_NE(Why("precision: fp8\n").find("precision: unknown value 'fp8' (expected one of"),
            std::string::npos)
      << Why("precision: fp8\n");
  EXPECT_NE(Why("device: tpu\n").find("device: unknown value 'tpu'"), std::string::npos);
  EXPECT_NE(Why("precision: bf16\nprecision_options: {init_scale: 1024}\n")
                .find("precision_options.init_scale: loss scaling applies to precision: fp16 only"),
            std::string::npos)
      << Why("precision: bf16\nprecision_options: {init_scale: 1024}\n");
  EXPECT_NE(Why("precision: fp16\ndevice: cuda\nprecision_options: {backoff_factor: 1}\n")
                .find("precision_options.backoff_factor: must be < 1"),
            std::string::npos)
      << Why("precision: fp16\ndevice: cuda\nprecision_options: {backoff_factor: 1}\n");
  EXPECT_NE(Why("precision: bf16\nprecision_options: {budget: 0.1}\n")
                .find("precision_options.budget: applies to precision: auto only"),
            std::string::npos);
  auto ts = ParseTrainSpec(
      "model: {torchscript: /nonexistent/m.pt}\nbatch_size: 8\nsteps: 10\n"
      "optimizer: {type: adam}\nprecision: auto\n",
      "j.yaml");
  ASSERT_FALSE(ts.ok());
  EXPECT_NE(ts.status().message().find("precision: auto selects the precision of each layer of the "
                                       "built-in models"),
            std::string::npos)
      << ts.status().message();
}

TEST(TrainSpecTest, MseNeedsFloatTargets) {
  const std::string why = Why("", "model: {name: mlp, loss: mse}\n");
  EXPECT_NE(why.find("dataset.name: loss mse needs float targets"), std::string::npos) << why;
  EXPECT_NE(Why("", "model: {name: mlp, loss: lm}\n").find("model.loss: unknown value 'lm'"),
            std::string::npos);
  EXPECT_EQ(EvalText("mse", 0, 0.012345), "test mse 0.012345");
}

}  // namespace
}  // namespace spot::train
