#include "train/augment.h"

#include <ATen/ATen.h>

#include <vector>

#include "train/sampler.h"

namespace spot::train {

at::Tensor Augment(const AugmentSpec& spec, const at::Tensor& x, const at::Tensor& positions,
                   uint64_t seed, int64_t epoch) {
  const int64_t b = x.size(0), c = x.size(1), h = x.size(2), w = x.size(3);
  const int64_t pad = spec.crop_padding;
  const at::Tensor padded = pad > 0 ? at::constant_pad_nd(x, {pad, pad, pad, pad}, 0) : x;
  std::vector<at::Tensor> out;
  std::vector<float> bright(b, 1), contrast(b, 1), saturation(b, 1);
  const at::Tensor at_positions = positions.contiguous();
  const auto* ids = at_positions.data_ptr<int64_t>();
  for (int64_t i = 0; i < b; ++i) {
    SplitMix64 d(seed * 0x2545F4914F6CDD1Dull ^ (static_cast<uint64_t>(epoch) << 40) ^
                 static_cast<uint64_t>(ids[i]));
    d.Next();
    const auto dy = static_cast<int64_t>(d.Below(2 * pad + 1));
    const auto dx = static_cast<int64_t>(d.Below(2 * pad + 1));
    at::Tensor img = padded[i].slice(1, dy, dy + h).slice(2, dx, dx + w);
    if (spec.flip && d.Uniform() < 0.5) img = img.flip({2});
    out.push_back(img);
    bright[i] = static_cast<float>(1 + spec.brightness * (2 * d.Uniform() - 1));
    contrast[i] = static_cast<float>(1 + spec.contrast * (2 * d.Uniform() - 1));
    saturation[i] = static_cast<float>(1 + spec.saturation * (2 * d.Uniform() - 1));
  }
  at::Tensor y = at::stack(out);
  auto factor = [&](std::vector<float>& f) {
    return at::from_blob(f.data(), {b, 1, 1, 1}, at::kFloat).clone();
  };
  if (spec.brightness > 0) y = y * factor(bright);
  if (spec.contrast > 0) {
    const at::Tensor mean = y.mean({1, 2, 3}, /*keepdim=*/true);
    y = (y - mean) * factor(contrast) + mean;
  }
  if (spec.saturation > 0 && c == 3) {
    const at::Tensor grey =
        (y.select(1, 0) * 0.299 + y.select(1, 1) * 0.587 + y.select(1, 2) * 0.114).unsqueeze(1);
    y = (y - grey) * factor(saturation) + grey;
  }
  return y.contiguous();
}

}  // namespace spot::train
