// spot_bench's `images` workload: how fast an image folder (dataset: images)
// is decoded and resized into memory, on 1 and on 2 intra-op threads (the
// anchor: one thread); and what the data cache (dataset.cache) saves: the
// load time, and a worker's time to its first step (a real `spot train`
// process), with no cache, a cold one, warm in the durable tier only (a
// replacement machine) and warm locally (a restart); the anchor: no cache.
// LibTorch-free header.
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
  std::string spot_bin;  // for the time to the first step; "" skips that column
};

Result<std::string> RunImagesWorkload(const ImagesBenchOptions& options);

}  // namespace spot::bench
