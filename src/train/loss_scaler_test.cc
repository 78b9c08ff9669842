#include "train/loss_scaler.h"

#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <limits>

namespace spot::train {
namespace {

PrecisionOptions Options(int64_t interval) {
  PrecisionOptions o;
  o.growth_interval = interval;
  return o;
}

// A parameter holding `grad` as its gradient.
at::Tensor WithGrad(const at::Tensor& grad) {
  at::Tensor p = at::zeros_like(grad).requires_grad_(true);
  p.mutable_grad() = grad.clone();
  return p;
}

TEST(LossScalerTest, StartsAtInitScaleAndGrowsAfterTheIntervalOfCleanSteps) {
  const PrecisionOptions o = Options(3);
  LossScale s;
  EXPECT_EQ(CurrentLossScale(o, s), 65536.0);
  s = NextLossScale(o, s, false);
  EXPECT_EQ(s.scale, 65536.0);
  EXPECT_EQ(s.growth_tracker, 1);
  s = NextLossScale(o, s, false);
  EXPECT_EQ(s.growth_tracker, 2);
  s = NextLossScale(o, s, false);
  EXPECT_EQ(s.scale, 131072.0) << "x2 on the third clean step";
  EXPECT_EQ(s.growth_tracker, 0);
}

TEST(LossScalerTest, AnOverflowBacksOffAndRestartsTheCount) {
  const PrecisionOptions o = Options(3);
  LossScale s = NextLossScale(o, NextLossScale(o, {}, false), false);
  ASSERT_EQ(s.growth_tracker, 2);
  s = NextLossScale(o, s, true);
  EXPECT_EQ(s.scale, 32768.0);
  EXPECT_EQ(s.growth_tracker, 0);
  s = NextLossScale(o, s, false);
  s = NextLossScale(o, s, false);
  EXPECT_EQ(s.scale, 32768.0) << "two clean steps are not yet the interval";
  // A scale that would leave float32's range stays, as GradScaler keeps it.
  PrecisionOptions big = Options(1);
  big.init_scale = 2e38;
  EXPECT_EQ(NextLossScale(big, {}, false).scale, 2e38);
}

TEST(LossScalerTest, UnscalingDividesTheGradientsAndFindsInfAndNan) {
  const at::Tensor g1 = at::randn({5, 3}), g2 = at::randn({7});
  std::vector<at::Tensor> params = {WithGrad(g1 * 1024), WithGrad(g2 * 1024),
                                    at::zeros({2}).requires_grad_(true)};  // no gradient
  EXPECT_FALSE(UnscaleGradients(params, 1024));
  EXPECT_TRUE(params[0].grad().equal(g1));
  EXPECT_TRUE(params[1].grad().equal(g2));

  for (double bad : {std::numeric_limits<double>::infinity(), std::nan("")}) {
    at::Tensor g = at::ones({4});
    g[2] = bad;
    std::vector<at::Tensor> p = {WithGrad(at::ones({3})), WithGrad(g)};
    EXPECT_TRUE(UnscaleGradients(p, 2)) << bad;
    EXPECT_EQ(p[0].grad()[0].item<float>(), 0.5f);
  }
}

}  // namespace
}  // namespace spot::train
