#include "train/fashion_mnist.h"

#include <zlib.h>

#include <filesystem>

#include <fmt/format.h>

namespace spot::train {
namespace {

constexpr const char* kFiles[] = {"train-images-idx3-ubyte.gz", "train-labels-idx1-ubyte.gz",
                                  "t10k-images-idx3-ubyte.gz", "t10k-labels-idx1-ubyte.gz"};

Result<std::string> Gunzip(const std::string& path) {
  if (!std::filesystem::exists(path)) return InvalidArgumentError(path + ": no such file");
  gzFile f = gzopen(path.c_str(), "rb");
  if (f == nullptr) return UnavailableError(path + ": cannot open");
  gzbuffer(f, 1 << 17);
  std::string out;
  char buf[1 << 16];
  int n;
  while ((n = gzread(f, buf, sizeof(buf))) > 0) out.append(buf, static_cast<size_t>(n));
  int err = 0;
  const char* msg = gzerror(f, &err);
  std::string why = (n < 0 && msg) ? msg : "";
  gzclose(f);
  if (n < 0) return DataLossError(path + ": corrupt gzip data: " + why);
  return out;
}

uint32_t BigEndian32(const std::string& b, size_t at) {
  auto u = [&](size_t i) { return static_cast<uint32_t>(static_cast<uint8_t>(b[at + i])); };
  return u(0) << 24 | u(1) << 16 | u(2) << 8 | u(3);
}

}  // namespace

std::string MissingFashionMnistFiles(const std::string& dir) {
  std::string missing;
  for (const char* f : kFiles) {
    if (!std::filesystem::exists(std::filesystem::path(dir) / f)) {
      missing += (missing.empty() ? "" : ", ") + std::string(f);
    }
  }
  return missing;
}

Result<ImageSet> LoadFashionMnist(const std::string& dir, Split split) {
  std::string prefix = split == Split::kTrain ? "train" : "t10k";
  std::string images_path = (std::filesystem::path(dir) / (prefix + "-images-idx3-ubyte.gz")).string();
  std::string labels_path = (std::filesystem::path(dir) / (prefix + "-labels-idx1-ubyte.gz")).string();
  SPOT_ASSIGN_OR_RETURN(std::string images, Gunzip(images_path));
  SPOT_ASSIGN_OR_RETURN(std::string labels, Gunzip(labels_path));
  if (images.size() < 16 || BigEndian32(images, 0) != 2051) {
    return DataLossError(images_path + ": not an IDX image file (magic 2051 expected)");
  }
  if (labels.size() < 8 || BigEndian32(labels, 0) != 2049) {
    return DataLossError(labels_path + ": not an IDX label file (magic 2049 expected)");
  }
  ImageSet s;
  s.count = BigEndian32(images, 4);
  s.rows = BigEndian32(images, 8);
  s.cols = BigEndian32(images, 12);
  int64_t label_count = BigEndian32(labels, 4);
  if (label_count != s.count) {
    return DataLossError(fmt::format("{}: {} labels for {} images in {}", labels_path,
                                     label_count, s.count, images_path));
  }
  size_t pixels = static_cast<size_t>(s.count * s.rows * s.cols);
  if (images.size() != 16 + pixels) {
    return DataLossError(fmt::format("{}: {} bytes, expected {} (truncated?)", images_path,
                                     images.size(), 16 + pixels));
  }
  if (labels.size() != 8 + static_cast<size_t>(s.count)) {
    return DataLossError(fmt::format("{}: {} bytes, expected {} (truncated?)", labels_path,
                                     labels.size(), 8 + s.count));
  }
  s.pixels.assign(images.begin() + 16, images.end());
  s.labels.assign(labels.begin() + 8, labels.end());
  for (uint8_t l : s.labels) {
    if (l > 9) return DataLossError(fmt::format("{}: label {} out of range 0..9", labels_path, l));
  }
  return s;
}

}  // namespace spot::train
