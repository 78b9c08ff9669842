// Random augmentation of training images (dataset.augment): crop with
// padding, horizontal flip, colour jitter (brightness, contrast, saturation).
// Each sample's draws come from (seed, epoch, sample index) alone, so an
// epoch's augmented batches are the same in every run, after a resume and on
// any number of elastic workers.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>

#include "train/train_spec.h"

namespace spot::train {

// `x`: float images [b, C, H, W]; `samples`: their indices in the data set
// (int64 [b]). Returns the augmented batch (a new tensor).
at::Tensor Augment(const AugmentSpec& spec, const at::Tensor& x, const at::Tensor& samples,
                   uint64_t seed, int64_t epoch);

}  // namespace spot::train
