// Fashion-MNIST (and any MNIST-layout data set) read straight from the gzipped
// IDX files that Debian's dataset-fashion-mnist installs. No LibTorch here: the
// trainer turns the bytes into tensors.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/status.h"

namespace spot::train {

struct ImageSet {
  int64_t count = 0;
  int64_t rows = 0;
  int64_t cols = 0;
  std::vector<uint8_t> pixels;  // count * rows * cols, row-major
  std::vector<uint8_t> labels;  // count, 0..9
};

// Split "train" (60,000 images) or "test" (10,000 images).
enum class Split { kTrain, kTest };

// Reads <dir>/{train,t10k}-{images-idx3,labels-idx1}-ubyte.gz. InvalidArgument
// for missing files, DataLoss for malformed ones (each naming the file).
Result<ImageSet> LoadFashionMnist(const std::string& dir, Split split);

// Names of the four expected files missing from `dir`, comma-separated; "" when all exist.
std::string MissingFashionMnistFiles(const std::string& dir);

// Mean and standard deviation of the Fashion-MNIST training pixels scaled to
// [0, 1], used to normalize inputs (the same constants as the Python side).
inline constexpr float kFashionMnistMean = 0.2860f;
inline constexpr float kFashionMnistStd = 0.3530f;

}  // namespace spot::train
