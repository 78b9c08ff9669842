#include "images_workload.h"

#include <ATen/Parallel.h>
#include <fmt/format.h>
#include <png.h>
#include <turbojpeg.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <random>

#include "core/file_io.h"
#include "cpu_load.h"
#include "report.h"
#include "train/folder_data.h"

namespace spot::bench {
namespace {

namespace fs = std::filesystem;

// Smooth gradients with noise: compress like photographs more than flat colour does.
Status WriteImages(const ImagesBenchOptions& o, const fs::path& root) {
  std::mt19937 rng(1);
  const int side = static_cast<int>(o.side);
  std::vector<uint8_t> px(static_cast<size_t>(side) * side * 3);
  tjhandle tj = tjInitCompress();
  for (int64_t i = 0; i < o.images; ++i) {
    const fs::path dir = root / "train" / fmt::format("class{}", i % 4);
    fs::create_directories(dir);
    for (size_t p = 0; p < px.size(); ++p) {
      px[p] = static_cast<uint8_t>((p / 3 % side) * 2 + (i * 7) % 50 + rng() % 40);
    }
    const fs::path file = dir / fmt::format("{:05}.{}", i, i % 2 ? "png" : "jpg");
    if (i % 2) {
      png_image image{};
      image.version = PNG_IMAGE_VERSION;
      image.width = side;
      image.height = side;
      image.format = PNG_FORMAT_RGB;
      if (!png_image_write_to_file(&image, file.c_str(), 0, px.data(), 0, nullptr)) {
        tjDestroy(tj);
        return InternalError("cannot write " + file.string());
      }
      continue;
    }
    unsigned char* buf = nullptr;
    unsigned long size = 0;
    tjCompress2(tj, px.data(), side, 0, side, TJPF_RGB, &buf, &size, TJSAMP_420, 90, 0);
    std::ofstream(file, std::ios::binary).write(reinterpret_cast<char*>(buf), size);
    tjFree(buf);
  }
  tjDestroy(tj);
  fs::create_directories(root / "test" / "class0");
  fs::copy_file(root / "train" / "class0" / "00000.jpg", root / "test" / "class0" / "0.jpg");
  return Status::Ok();
}

}  // namespace

Result<std::string> RunImagesWorkload(const ImagesBenchOptions& o) {
  const fs::path root = fs::path(o.work_dir) / "images";
  Progress(fmt::format("images: writing {} images of {}x{}", o.images, o.side, o.side));
  SPOT_RETURN_IF_ERROR(WriteImages(o, root));
  train::TrainSpec spec;
  spec.dataset = "images";
  spec.dataset_path = root.string();
  spec.image_size = 32;
  spec.channels = 3;
  Table table({"threads", "images/s", "load s", "vs 1 thread"});
  double one = 0;
  std::string raw;
  for (int threads : {1, 2}) {
    at::set_num_threads(threads);
    std::vector<double> rates;
    for (int r = 0; r < o.repeats; ++r) {
      WaitForQuiet(0.25, 60);
      const auto t0 = std::chrono::steady_clock::now();
      SPOT_ASSIGN_OR_RETURN(train::TensorSet set,
                            train::LoadImageFolderSplit(spec, train::Split::kTrain));
      const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      rates.push_back(static_cast<double>(set.size()) / s);
    }
    const double rate = Median(rates);
    if (threads == 1) one = rate;
    table.AddRow({fmt::format("{}", threads), fmt::format("{:.0f}", rate),
                  fmt::format("{:.2f}", static_cast<double>(o.images) / rate),
                  fmt::format("{:.2f}x", rate / one)});
    raw += fmt::format("- {} thread(s): {}\n", threads, FormatList(rates));
  }
  return fmt::format(
      "## images: decoding an image folder (dataset: images)\n\n"
      "{} images of {}x{} RGB (half PNG, half JPEG quality 90) loaded with "
      "train::LoadImageFolderSplit: read, decoded (libpng, libjpeg-turbo), resized to 32x32 "
      "(bilinear), on 1 and 2 intra-op threads; median of {} loads each.\n\n{}\nAll loads "
      "(images/s):\n{}",
      o.images, o.side, o.side, o.repeats, table.ToMarkdown(), raw);
}

}  // namespace spot::bench
