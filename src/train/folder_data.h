// Data sets that live in a directory of files: image folders
// (image_folder.h) and CSV tables (csv_table.h), as tensors. Used by
// LoadSplit (train_setup.h).
#pragma once

#include "core/status.h"
#include "train/train_setup.h"

namespace spot::train {

// dataset: images. Every image decoded (one thread per intra-op thread), resized to
// image_size x image_size (bilinear, as torchvision's Resize), kept as uint8
// [n, channels, size, size]; TensorSet::Take scales it to [0, 1]. Errors
// name the file.
Result<TensorSet> LoadImageFolderSplit(const TrainSpec& spec, Split split);

// dataset: csv. Features float32 [n, F], labels int64 [n].
Result<TensorSet> LoadCsvSplit(const TrainSpec& spec, Split split);

}  // namespace spot::train
