// Image folders as torchvision's ImageFolder reads them:
//   DIR/train/<class>/<name>.png|jpg|jpeg  and  DIR/test/<class>/... (or DIR/val/)
// Classes are the train split's subdirectories in name order (label i = the
// i-th); files are taken in name order within each class. PNG is decoded with
// libpng, JPEG with libjpeg-turbo (TurboJPEG). LibTorch-free: train_setup
// resizes the pixels and makes tensors.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"

namespace spot::train {

struct DecodedImage {
  int width = 0;
  int height = 0;
  int channels = 0;             // 1 (gray) or 3 (RGB)
  std::vector<uint8_t> pixels;  // height x width x channels, row-major
};

// Decodes a PNG or JPEG file's bytes into `channels` (1 or 3) channels
// (colour converted, alpha dropped). InvalidArgument naming `where`: neither
// format, or a damaged image.
Result<DecodedImage> DecodeImage(std::string_view bytes, int channels, const std::string& where);

struct ImageFolderIndex {
  std::vector<std::string> classes;  // label -> class name
  std::vector<std::string> files;    // absolute paths, by class then name
  std::vector<int64_t> labels;       // one per file
};

// Lists DIR/<split> (split "test" also finds DIR/val). With `classes` (the
// train split's), a class directory outside them is an error. InvalidArgument
// naming the directory: missing, no class directories, a class with no
// images, a file that is not .png, .jpg or .jpeg.
Result<ImageFolderIndex> ScanImageFolder(const std::string& dir, const std::string& split,
                                         const std::vector<std::string>* classes = nullptr);

}  // namespace spot::train
