#include "train/augment.h"

#include <ATen/ATen.h>
#include <gtest/gtest.h>

namespace spot::train {
namespace {

at::Tensor Images(int64_t n) {
  return at::arange(n * 3 * 8 * 8, at::kFloat).reshape({n, 3, 8, 8}).mul(0.001).sin().abs();
}

TEST(AugmentTest, EachSampleDependsOnSeedEpochAndItsPositionOnly) {
  const AugmentSpec spec{
      .crop_padding = 2, .flip = true, .brightness = 0.3, .contrast = 0.3, .saturation = 0.3};
  const at::Tensor x = Images(6);
  const at::Tensor ids = at::tensor({10, 11, 12, 13, 14, 15}, at::kLong);
  const at::Tensor a = Augment(spec, x, ids, 7, 0);
  EXPECT_EQ(a.sizes(), x.sizes());
  EXPECT_TRUE(a.equal(Augment(spec, x, ids, 7, 0))) << "deterministic";
  EXPECT_FALSE(a.equal(Augment(spec, x, ids, 7, 1))) << "another epoch, other draws";
  EXPECT_FALSE(a.equal(Augment(spec, x, ids, 8, 0))) << "another seed, other draws";
  EXPECT_FALSE(a.equal(x));
  // Position 13 alone, as another worker's part of the batch would take it.
  const at::Tensor one = Augment(spec, x.slice(0, 3, 4), ids.slice(0, 3, 4), 7, 0);
  EXPECT_TRUE(one[0].equal(a[3])) << "independent of the batch it is in";
}

TEST(AugmentTest, FlipAndCropMoveThePixelsOnly) {
  const at::Tensor x = Images(64);
  const at::Tensor ids = at::arange(64, at::kLong);
  const at::Tensor f = Augment({.flip = true}, x, ids, 1, 0);
  int flipped = 0;
  for (int64_t i = 0; i < 64; ++i) {
    const bool same = f[i].equal(x[i]);
    if (!same) {
      EXPECT_TRUE(f[i].equal(x[i].flip({2})));
      ++flipped;
    }
  }
  EXPECT_GT(flipped, 16);
  EXPECT_LT(flipped, 48) << "about half";
  const at::Tensor c = Augment({.crop_padding = 3}, x, ids, 1, 0);
  for (int64_t i = 0; i < 64; ++i) {
    EXPECT_LE(c[i].sum().item<float>(), x[i].sum().item<float>() + 1e-3) << "a shifted window";
  }
}

}  // namespace
}  // namespace spot::train
