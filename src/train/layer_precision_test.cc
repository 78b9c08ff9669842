#include "train/layer_precision.h"

#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>
#include <gtest/gtest.h>
#include <torch/utils.h>

#include <algorithm>
#include <mutex>

#include "train/gpt_model.h"
#include "train/model.h"
#include "train/train_setup.h"

namespace spot::train {
namespace {

// Images whose pixels sum to zero in each sample.
at::Tensor ZeroMeanImages(int64_t n) {
  at::Tensor x = at::arange(n * 784, at::kFloat).reshape({n, 1, 28, 28}).mul(0.013).sin();
  return x - x.mean({1, 2, 3}, /*keepdim=*/true);
}

double ErrorOf(const std::vector<LayerError>& errors, const std::string& name) {
  for (const LayerError& e : errors) {
    if (e.name == name) return e.error;
  }
  ADD_FAILURE() << "no layer " << name;
  return -1;
}

// A layer made numerically fragile in bf16 is kept float32: fc1's weights
// all carry +10, which the zero-sum inputs cancel exactly in float32, while
// bf16's rounding of those weights (and inputs) leaves errors as large as the
// output itself. fc2 and fc3 round like any layer (under 1%).
TEST(LayerPrecisionTest, ALayerWithALargeBf16ErrorStaysFloat32) {
  torch::manual_seed(1);
  std::shared_ptr<Net> mlp = MakeModel("mlp");
  {
    at::NoGradGuard no_grad;
    mlp->named_parameters()["fc1.weight"].add_(10.0);
  }
  const std::vector<LayerError> errors =
      MeasureLayerErrors(*mlp, {ZeroMeanImages(16), ZeroMeanImages(32).slice(0, 16)});
  ASSERT_EQ(errors.size(), 3u);
  EXPECT_EQ(errors[0].name, "fc1") << "in forward order";
  EXPECT_GT(ErrorOf(errors, "fc1"), 0.1);
  EXPECT_LT(ErrorOf(errors, "fc2"), 1e-2);
  EXPECT_LT(ErrorOf(errors, "fc3"), 1e-2);
  EXPECT_GT(ErrorOf(errors, "fc2"), 0) << "bf16 rounds";
  EXPECT_EQ(Float32Layers(errors, 1e-2), std::vector<std::string>{"fc1"});
  EXPECT_EQ(Float32Layers(errors, 10), std::vector<std::string>{}) << "a generous budget";
  EXPECT_NE(DescribeSelection(errors, {"fc1"}, 1e-2).find("1 of 3 layers stay float32"),
            std::string::npos);
}

TEST(LayerPrecisionTest, NormalizationLayersAlwaysStayFloat32) {
  torch::manual_seed(2);
  std::shared_ptr<Net> cnn = MakeModel("cnn");
  const std::vector<LayerError> errors = MeasureLayerErrors(*cnn, {ZeroMeanImages(8)});
  std::vector<std::string> names;
  for (const LayerError& e : errors) names.push_back(e.name);
  EXPECT_EQ(names, (std::vector<std::string>{"conv1", "bn1", "conv2", "bn2", "fc1", "fc2"}));
  EXPECT_EQ(Float32Layers(errors, 1), (std::vector<std::string>{"bn1", "bn2"}));

  torch::manual_seed(3);
  std::shared_ptr<Net> gpt =
      MakeGpt({.layers = 2, .heads = 2, .width = 32, .context = 16, .vocab = 50});
  const at::Tensor ids = at::arange(32, at::kLong).remainder(50).reshape({2, 16});
  const std::vector<LayerError> g = MeasureLayerErrors(*gpt, {ids});
  EXPECT_EQ(g.size(), 2u * 7 + 2) << "per block: 2 norms, c_attn, core, c_proj, c_fc, c_proj";
  EXPECT_EQ(Float32Layers(g, 1),
            (std::vector<std::string>{"transformer.h.0.ln_1", "transformer.h.0.ln_2",
                                      "transformer.h.1.ln_1", "transformer.h.1.ln_2",
                                      "transformer.ln_f"}));
  for (const LayerError& e : g) EXPECT_LT(e.error, 0.05) << e.name;
}

// Measuring runs in eval mode without gradients: weights, batch-norm
// statistics and the generator are as they were, and so is the mode; the
// same model and batches give the same errors.
TEST(LayerPrecisionTest, MeasuringChangesNothingAndRepeatsExactly) {
  torch::manual_seed(4);
  std::shared_ptr<Net> cnn = MakeModel("cnn");
  std::vector<at::Tensor> before;
  for (const auto& t : cnn->parameters()) before.push_back(t.clone());
  for (const auto& t : cnn->buffers()) before.push_back(t.clone());
  at::Generator gen = at::detail::getDefaultCPUGenerator();
  const at::Tensor rng = gen.get_state();
  const std::vector<LayerError> a = MeasureLayerErrors(*cnn, {ZeroMeanImages(8)});
  const std::vector<LayerError> b = MeasureLayerErrors(*cnn, {ZeroMeanImages(8)});
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i) EXPECT_EQ(a[i].error, b[i].error) << a[i].name;
  size_t k = 0;
  for (const auto& t : cnn->parameters()) EXPECT_TRUE(t.equal(before[k++]));
  for (const auto& t : cnn->buffers()) EXPECT_TRUE(t.equal(before[k++]));
  EXPECT_TRUE(gen.get_state().equal(rng));
  EXPECT_TRUE(cnn->is_training());
}

// Under autocast a kept layer runs in float32: with every layer kept the
// output is float32's bit for bit; with none, it is not.
TEST(LayerPrecisionTest, KeptLayersRunInFloat32UnderAutocast) {
  torch::manual_seed(5);
  std::shared_ptr<Net> mlp = MakeModel("mlp");
  mlp->eval();
  at::NoGradGuard no_grad;
  const at::Tensor x = ZeroMeanImages(4);
  const at::Tensor fp32 = mlp->forward(x);
  auto under_auto = [&] {
    PrecisionScope scope("auto");
    return mlp->forward(x).to(at::kFloat);
  };
  EXPECT_FALSE(under_auto().equal(fp32)) << "none kept: bf16";
  mlp->layer_precision()->KeepFloat32({"fc3", "fc1", "fc2"});
  EXPECT_EQ(mlp->layer_precision()->kept(), (std::vector<std::string>{"fc1", "fc2", "fc3"}));
  EXPECT_TRUE(under_auto().equal(fp32));
  mlp->layer_precision()->KeepFloat32({"fc1"});
  EXPECT_FALSE(under_auto().equal(fp32));
}

}  // namespace
}  // namespace spot::train
