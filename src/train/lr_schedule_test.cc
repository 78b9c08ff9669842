#include "train/lr_schedule.h"

#include <gtest/gtest.h>

namespace spot::train {
namespace {

TEST(LrScheduleTest, Constant) {
  ScheduleSpec s;
  EXPECT_DOUBLE_EQ(LearningRate(s, 0.1, 0, 100), 0.1);
  EXPECT_DOUBLE_EQ(LearningRate(s, 0.1, 99, 100), 0.1);
}

TEST(LrScheduleTest, StepWithWarmup) {
  ScheduleSpec s{.type = "step", .warmup_steps = 10, .step_size = 20, .gamma = 0.5};
  EXPECT_DOUBLE_EQ(LearningRate(s, 1.0, 0, 100), 0.1);
  EXPECT_DOUBLE_EQ(LearningRate(s, 1.0, 9, 100), 1.0);
  EXPECT_DOUBLE_EQ(LearningRate(s, 1.0, 10, 100), 1.0);
  EXPECT_DOUBLE_EQ(LearningRate(s, 1.0, 29, 100), 1.0);
  EXPECT_DOUBLE_EQ(LearningRate(s, 1.0, 30, 100), 0.5);
  EXPECT_DOUBLE_EQ(LearningRate(s, 1.0, 50, 100), 0.25);
}

TEST(LrScheduleTest, CosineWithWarmup) {
  ScheduleSpec s{.type = "cosine", .warmup_steps = 10, .min_lr = 0.01};
  EXPECT_DOUBLE_EQ(LearningRate(s, 1.0, 4, 110), 0.5);
  EXPECT_DOUBLE_EQ(LearningRate(s, 1.0, 10, 110), 1.0);
  EXPECT_NEAR(LearningRate(s, 1.0, 60, 110), 0.505, 1e-12);  // halfway
  EXPECT_NEAR(LearningRate(s, 1.0, 110, 110), 0.01, 1e-12);
  EXPECT_NEAR(LearningRate(s, 1.0, 500, 110), 0.01, 1e-12);  // past the end: the floor
  // Monotone after warm-up.
  for (int64_t t = 10; t < 110; ++t) {
    EXPECT_GE(LearningRate(s, 1.0, t, 110), LearningRate(s, 1.0, t + 1, 110));
  }
}

}  // namespace
}  // namespace spot::train
