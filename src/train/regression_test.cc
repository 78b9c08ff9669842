// loss: mse end to end: float targets from an array file, trained by the
// Trainer to a low error, reported as mse without accuracy; and the errors a
// regression job's data or device can give.
#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>
#include <gtest/gtest.h>
#include <torch/cuda.h>
#include <torch/utils.h>

#include <cstring>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <optional>

#include "core/file_io.h"
#include "core/temp_dir.h"
#include "train/test_replica.h"
#include "train/train_setup.h"
#include "train/trainer.h"

namespace spot::train {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

// `tensors` as a safetensors file (float32 F32, int64 I64).
std::string Safetensors(const std::vector<std::pair<std::string, at::Tensor>>& tensors) {
  json header = json::object();
  std::string data;
  for (const auto& [name, t] : tensors) {
    const at::Tensor c = t.contiguous();
    const size_t begin = data.size();
    data.append(static_cast<const char*>(c.data_ptr()), c.nbytes());
    header[name] = {{"dtype", c.scalar_type() == at::kFloat ? "F32" : "I64"},
                    {"shape", c.sizes().vec()},
                    {"data_offsets", {begin, data.size()}}};
  }
  const std::string h = header.dump();
  std::string out(8, '\0');
  const uint64_t n = h.size();
  std::memcpy(out.data(), &n, 8);
  return out + h + data;
}

class RegressionTest : public ::testing::Test {
 protected:
  void SetUp() override { tmp_.emplace(TempDir::Create("spot_regression_test").value()); }
  fs::path dir() const { return tmp_->path(); }

  // Samples [n, 28, 28] on an 8-dimensional subspace (x = z B), targets
  // [n, 10] a linear function of the same z (y = z C): a linear map of x.
  std::string WriteData(const std::string& name, int64_t k = 10, bool integer_targets = false) {
    at::Generator g = at::detail::createCPUGenerator(11);
    const at::Tensor b = at::randn({8, 784}, g).div(4), c = at::randn({8, k}, g).div(3);
    auto split = [&](int64_t n) {
      const at::Tensor z = at::randn({n, 8}, g);
      at::Tensor y = z.matmul(c);
      return std::pair{z.matmul(b).reshape({n, 28, 28}),
                       integer_targets ? y.round().to(at::kLong) : y};
    };
    auto [xtr, ytr] = split(1024);
    auto [xte, yte] = split(256);
    target_variance_ = yte.to(at::kFloat).var().item<double>();
    const std::string path = (dir() / name).string();
    EXPECT_TRUE(
        WriteFileAtomically(
            path,
            Safetensors({{"x_train", xtr}, {"y_train", ytr}, {"x_test", xte}, {"y_test", yte}}))
            .ok());
    return path;
  }
  Result<TrainSpec> Spec(const std::string& data, const std::string& extra = "") {
    return ParseTrainSpec(
        "name: reg\nmodel: {name: mlp, loss: mse}\n"
        "dataset: {name: safetensors, path: " +
            data +
            "}\nbatch_size: 64\nepochs: 12\nseed: 1\nthreads: 1\n"
            "optimizer: {type: adam, lr: 0.002}\ncheckpoint: {interval_steps: 100}\n"
            "rollback: {enabled: false}\noutput_dir: " +
            (dir() / "out").string() + "\n" + extra,
        (dir() / "job.yaml").string());
  }
  std::optional<TempDir> tmp_;
  double target_variance_ = 0;
};

TEST_F(RegressionTest, AnMlpLearnsALinearMapToALowMse) {
  auto spec = Spec(WriteData("lin.safetensors"));
  ASSERT_TRUE(spec.ok()) << spec.status().ToString();
  auto trainer = Trainer::Create(*spec, {});
  ASSERT_TRUE(trainer.ok()) << trainer.status().ToString();
  auto summary = (*trainer)->Run();
  ASSERT_TRUE(summary.ok()) << summary.status().ToString();
  ASSERT_EQ(summary->epochs.size(), 12u);
  const double first = summary->epochs.front().test_loss, last = summary->test_loss;
  EXPECT_LT(last, 0.05 * target_variance_)
      << "first epoch " << first << ", var " << target_variance_;
  EXPECT_LT(last, 0.5 * first);
  const json j = json::parse(*ReadFile((dir() / "out" / "summary.json").string()));
  EXPECT_TRUE(j["test_accuracy"].is_null()) << "mse reports no accuracy";
  EXPECT_NEAR(j["test_loss"].get<double>(), last, 1e-12);
}

TEST_F(RegressionTest, TargetsThatAreNotFloatsOrDoNotFitAreErrors) {
  auto ints = Spec(WriteData("int.safetensors", 10, /*integer_targets=*/true));
  ASSERT_TRUE(ints.ok());
  auto t = Trainer::Create(*ints, {});
  ASSERT_FALSE(t.ok());
  EXPECT_EQ(t.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(t.status().message().find("dataset.path"), std::string::npos) << t.status().message();
  EXPECT_NE(
      t.status().message().find("int.safetensors: y_train has dtype i8; loss mse needs float32 "
                                "or float64 targets"),
      std::string::npos)
      << t.status().message();

  auto three = Spec(WriteData("three.safetensors", 3));
  ASSERT_TRUE(three.ok());
  t = Trainer::Create(*three, {});
  ASSERT_FALSE(t.ok());
  EXPECT_NE(t.status().message().find("model.loss: mse compares model mlp's outputs [2, 10] (for 2 "
                                      "samples) with the targets y_train [2, 3]"),
            std::string::npos)
      << t.status().message();
  EXPECT_FALSE(fs::exists(dir() / "out")) << "nothing written";

  // A float target under a classification loss stays an error.
  auto ce = ParseTrainSpec(
      "model: mlp\ndataset: {name: safetensors, path: " + (dir() / "three.safetensors").string() +
          "}\nbatch_size: 8\nsteps: 1\noptimizer: {type: adam}\n",
      "ce.yaml");
  ASSERT_TRUE(ce.ok());
  EXPECT_NE(LoadSplit(*ce, Split::kTrain, 0).status().message().find("labels must be integers"),
            std::string::npos);
}

// Both trainers check, before training, that the model's outputs fit the
// targets (CheckLossTargets), and the message names the shapes.
TEST(RegressionStepTest, TargetsThatDoNotFitAreRefusedBeforeTraining) {
  TrainSpec spec = testing::ReplicaSpec("mlp", "fp32");
  spec.loss = "mse";
  testing::Replica r(spec);
  r.data.labels = at::zeros({64, 3});
  const Status bad = CheckLossTargets(spec, *r.model, r.data);
  EXPECT_EQ(bad.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(bad.message().find("mse compares model mlp's outputs [2, 10] (for 2 samples) with "
                               "the targets y_train [2, 3]"),
            std::string::npos)
      << bad.message();
  r.data.labels = at::zeros({64, 10});
  EXPECT_TRUE(CheckLossTargets(spec, *r.model, r.data).ok());
  r.data.labels = at::zeros({64});
  EXPECT_FALSE(CheckLossTargets(spec, *r.model, r.data).ok()) << "[b] targets need [b, 1] outputs";
  spec.loss = "cross_entropy";
  EXPECT_TRUE(CheckLossTargets(spec, *r.model, r.data).ok()) << "only mse is checked";
}

// This LibTorch has no CUDA: device: cuda stops at setup, naming the field,
// before anything is loaded or written.
TEST_F(RegressionTest, DeviceCudaWithoutCudaIsABadInputAndWritesNothing) {
  if (torch::cuda::is_available()) GTEST_SKIP() << "this LibTorch sees a GPU";
  auto spec = Spec(WriteData("lin.safetensors"), "device: cuda\n");
  ASSERT_TRUE(spec.ok()) << spec.status().ToString();
  auto t = Trainer::Create(*spec, {});
  ASSERT_FALSE(t.ok());
  EXPECT_EQ(t.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(t.status().message().find("job.yaml: device: cuda: this LibTorch has no CUDA "
                                      "(torch::cuda::is_available() is false"),
            std::string::npos)
      << t.status().message();
  EXPECT_FALSE(fs::exists(dir() / "out"));
}

}  // namespace
}  // namespace spot::train
