// GPU checks (GpuTest.*; scripts/gpu-check.sh runs them against a CUDA
// LibTorch). Every test skips, loudly, when torch::cuda::is_available()
// is false, as on the CPU-only build `make test` uses.
#include <ATen/ATen.h>
#include <gtest/gtest.h>
#include <torch/cuda.h>

#include "train/test_replica.h"

namespace spot::train {
namespace {

using testing::Replica;
using testing::ReplicaSpec;

class GpuTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!torch::cuda::is_available()) {
      GTEST_SKIP() << "\n*** NO GPU: torch::cuda::is_available() is false; this GPU check did "
                      "NOT run (build against a CUDA LibTorch: scripts/gpu-check.sh) ***";
    }
  }
  static TrainSpec OnCuda(const std::string& model, const std::string& precision) {
    TrainSpec s = ReplicaSpec(model, precision);
    s.device = "cuda";
    return s;
  }
};

// The model and its batches live on the GPU, and it learns; the first loss
// agrees with the CPU's (the same initial weights, other kernels).
TEST_F(GpuTest, CnnAndGptTrainOnCuda) {
  for (const char* model : {"cnn", "gpt"}) {
    Replica gpu(OnCuda(model, "fp32")), cpu(ReplicaSpec(model, "fp32"));
    ASSERT_TRUE(gpu.model->parameters()[0].is_cuda()) << model;
    const std::vector<double> g = gpu.Steps(8), c = cpu.Steps(1);
    // cuDNN may convolve in TF32 (its default in 1.13): close, not equal.
    EXPECT_NEAR(g[0], c[0], 1e-2 * c[0]) << model;
    EXPECT_LT(g[7], g[0]) << model << " learned";
    const EvalSums e = EvaluateRange(*gpu.model, gpu.data, 0, 32, gpu.spec);
    EXPECT_TRUE(std::isfinite(e.loss_sum)) << model;
  }
}

// fp16 autocast with dynamic loss scaling trains close to float32.
TEST_F(GpuTest, Fp16WithLossScalingTrains) {
  for (const char* model : {"cnn", "gpt"}) {
    Replica fp16(OnCuda(model, "fp16")), fp32(OnCuda(model, "fp32"));
    const std::vector<double> h = fp16.Steps(8), f = fp32.Steps(8);
    EXPECT_NE(h[0], f[0]) << model << ": fp16 ran in half precision";
    for (int i = 0; i < 8; ++i) EXPECT_NEAR(h[i], f[i], 0.05 * f[i]) << model << " step " << i;
    EXPECT_GT(fp16.counters.loss_scale, 0) << "the scaler ran";
  }
}

// Captured on the GPU (the CUDA generator included) and restored into a
// fresh replica, a run continues bit for bit, in fp32 and fp16 alike.
TEST_F(GpuTest, ARestoredRunContinuesBitForBitOnCuda) {
  for (const char* precision : {"fp32", "fp16"}) {
    TrainSpec spec = OnCuda("gpt", precision);
    spec.gpt.dropout = 0.1;  // draws from the CUDA generator
    Replica whole(spec), first(spec);
    const std::vector<double> losses = whole.Steps(8);
    first.Steps(4);
    const ckpt::Container saved = first.Capture();
    ASSERT_NE(saved.Find("rng/cuda"), nullptr);
    Replica resumed(spec);
    resumed.Steps(1);  // state of its own, replaced by the restore
    resumed.Restore(saved);
    EXPECT_EQ(resumed.Steps(4), std::vector<double>(losses.begin() + 4, losses.end())) << precision;
    EXPECT_TRUE(resumed.State().equal(whole.State())) << precision;
  }
}

}  // namespace
}  // namespace spot::train
