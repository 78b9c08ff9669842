#include "train/train_spec.h"

#include <gtest/gtest.h>

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
  auto adam = ParseTrainSpec("model: mlp\nbatch_size: 8\nsteps: 10\noptimizer: {type: adam}\n", "j");
  ASSERT_TRUE(adam.ok());
  EXPECT_DOUBLE_EQ(adam->optimizer.lr, 1e-3);
}

TEST(TrainSpecTest, OptimizerIsRequired) {
  auto s = ParseTrainSpec("model: mlp\nbatch_size: 8\nsteps: 10\n", "j");
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.status().message().find("optimizer: required section is missing"), std::string::npos)
      << s.status().message();
}

}  // namespace
}  // namespace spot::train
