// Random augmentation of training images (dataset.augment): crop with
// padding, horizontal flip, colour jitter (brightness, contrast, saturation).
// Each sample's draws come from (seed, epoch, its position in the epoch's
// order) alone, so an epoch's augmented batches are the same in every run,
// after a resume and on any number of elastic workers, and a sample that
// dataset.sampling: balanced repeats gets other draws each time.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>

#include "train/train_spec.h"

namespace spot::train {

// `x`: float images [b, C, H, W]; `positions`: theirs in the epoch's order
// (int64 [b]). Returns the augmented batch (a new tensor).
at::Tensor Augment(const AugmentSpec& spec, const at::Tensor& x, const at::Tensor& positions,
                   uint64_t seed, int64_t epoch);

}  // namespace spot::train
