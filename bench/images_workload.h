// spot_bench's `images` workload: how fast an image folder (dataset: images)
// is decoded and resized into memory, on 1 and on 2 intra-op threads (the
// anchor: one thread). LibTorch-free header.
#pragma once

#include <cstdint>
#include <string>

#include "core/status.h"

namespace spot::bench {

struct ImagesBenchOptions {
  int64_t images = 2000;  // written once: half PNG, half JPEG (quality 90), RGB
  int64_t side = 256;     // their width and height; loaded at image_size 32
  int repeats = 3;        // loads per thread count; the median is reported
  std::string work_dir;
};

Result<std::string> RunImagesWorkload(const ImagesBenchOptions& options);

}  // namespace spot::bench
