#include "train/train_state.h"

#include <ATen/ATen.h>
#include <gtest/gtest.h>
#include <torch/optim/adam.h>
#include <torch/optim/sgd.h>
#include <torch/utils.h>

#include "train/model.h"

namespace spot::train {
namespace {

std::unique_ptr<torch::optim::Optimizer> MakeOpt(const std::string& type, Net& m) {
  if (type == "adam") {
    return std::make_unique<torch::optim::Adam>(m.parameters(), torch::optim::AdamOptions(1e-3));
  }
  return std::make_unique<torch::optim::SGD>(m.parameters(),
                                             torch::optim::SGDOptions(0.05).momentum(0.9));
}

float Step(Net& m, torch::optim::Optimizer& opt, int64_t i) {
  at::Tensor x = at::arange(8 * 784, at::kFloat).reshape({8, 1, 28, 28}).mul(0.001 * (i + 1)).sin();
  at::Tensor y = at::arange(8, at::kLong).remainder(10);
  opt.zero_grad();
  at::Tensor loss = at::cross_entropy_loss(m.forward(x), y);
  loss.backward();
  opt.step();
  return loss.item<float>();
}

class TrainStateTest : public ::testing::TestWithParam<std::string> {};

TEST_P(TrainStateTest, RestoredRunContinuesBitForBit) {
  const std::string type = GetParam();
  torch::manual_seed(1);
  auto a = MakeModel("cnn");
  auto opt_a = MakeOpt(type, *a);
  for (int i = 0; i < 3; ++i) Step(*a, *opt_a, i);
  ckpt::Container c;
  TrainerCounters counters;
  counters.step = 3;
  counters.optimizer = type;
  ASSERT_TRUE(CaptureTrainState(*a, *opt_a, type, counters, &c).ok());

  // `a` continues from where it was captured...
  std::vector<float> losses_a;
  for (int i = 3; i < 6; ++i) losses_a.push_back(Step(*a, *opt_a, i));
  torch::manual_seed(99);
  auto b = MakeModel("cnn");
  auto opt_b = MakeOpt(type, *b);
  for (int i = 0; i < 2; ++i) Step(*b, *opt_b, i);  // b has optimizer state of its own
  // ...and `b`, built with other weights, restores the capture (generator
  // included, so dropout draws the same masks) and must do exactly the same.
  auto restored = RestoreTrainState(c, *b, *opt_b, type);
  ASSERT_TRUE(restored.ok()) << restored.status().ToString();
  EXPECT_EQ(restored->step, 3);
  for (int i = 3; i < 6; ++i) EXPECT_EQ(Step(*b, *opt_b, i), losses_a[i - 3]) << "step " << i;
  auto pb = b->named_parameters();
  for (const auto& p : a->named_parameters()) {
    EXPECT_TRUE(at::equal(p.value(), pb[p.key()])) << p.key();
  }
  auto bb = b->named_buffers();
  for (const auto& p : a->named_buffers()) {
    EXPECT_TRUE(at::equal(p.value(), bb[p.key()])) << p.key();
  }
}

INSTANTIATE_TEST_SUITE_P(Optimizers, TrainStateTest, ::testing::Values("sgd", "adam"));

TEST(TrainStateTest, WrongOptimizerIsRefused) {
  torch::manual_seed(1);
  auto m = MakeModel("mlp");
  auto sgd = MakeOpt("sgd", *m);
  ckpt::Container c;
  TrainerCounters counters;
  counters.optimizer = "sgd";
  ASSERT_TRUE(CaptureTrainState(*m, *sgd, "sgd", counters, &c).ok());
  auto adam = MakeOpt("adam", *m);
  auto r = RestoreTrainState(c, *m, *adam, "adam");
  EXPECT_EQ(r.status().code(), StatusCode::kFailedPrecondition);
}

TEST(TrainStateTest, ModelsHaveTheDocumentedSizes) {
  auto count = [](Net& n) {
    int64_t k = 0;
    for (const auto& p : n.parameters()) k += p.numel();
    return k;
  };
  EXPECT_EQ(count(*MakeModel("cnn")), 421738);
  EXPECT_EQ(count(*MakeModel("mlp")), 235146);
  EXPECT_EQ(MakeModel("rnn"), nullptr);
}

}  // namespace
}  // namespace spot::train
