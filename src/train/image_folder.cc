#include "train/image_folder.h"

#include <fmt/format.h>
#include <png.h>
#include <turbojpeg.h>

#include <algorithm>
#include <filesystem>
#include <memory>

namespace spot::train {
namespace {

namespace fs = std::filesystem;

bool IsPng(std::string_view b) { return b.size() >= 8 && b.substr(0, 8) == "\x89PNG\r\n\x1a\n"; }
bool IsJpeg(std::string_view b) { return b.size() >= 3 && b.substr(0, 3) == "\xff\xd8\xff"; }

Result<DecodedImage> DecodePng(std::string_view bytes, int channels, const std::string& where) {
  png_image image{};
  image.version = PNG_IMAGE_VERSION;
  if (!png_image_begin_read_from_memory(&image, bytes.data(), bytes.size())) {
    std::string why = image.message;
    png_image_free(&image);
    return InvalidArgumentError(fmt::format("{}: not a readable PNG image: {}", where, why));
  }
  image.format = channels == 1 ? PNG_FORMAT_GRAY : PNG_FORMAT_RGB;
  DecodedImage out{.width = static_cast<int>(image.width),
                   .height = static_cast<int>(image.height),
                   .channels = channels};
  out.pixels.resize(PNG_IMAGE_SIZE(image));
  if (!png_image_finish_read(&image, nullptr, out.pixels.data(), 0, nullptr)) {
    std::string why = image.message;
    png_image_free(&image);
    return InvalidArgumentError(fmt::format("{}: damaged PNG image: {}", where, why));
  }
  return out;
}

Result<DecodedImage> DecodeJpeg(std::string_view bytes, int channels, const std::string& where) {
  std::unique_ptr<void, int (*)(tjhandle)> tj(tjInitDecompress(), tjDestroy);
  if (!tj) return InternalError("cannot start the JPEG decoder");
  auto* data = reinterpret_cast<const unsigned char*>(bytes.data());
  int width = 0, height = 0, subsampling = 0, colorspace = 0;
  if (tjDecompressHeader3(tj.get(), data, bytes.size(), &width, &height, &subsampling,
                          &colorspace) != 0) {
    return InvalidArgumentError(
        fmt::format("{}: not a readable JPEG image: {}", where, tjGetErrorStr2(tj.get())));
  }
  DecodedImage out{.width = width, .height = height, .channels = channels};
  out.pixels.resize(static_cast<size_t>(width) * height * channels);
  if (tjDecompress2(tj.get(), data, bytes.size(), out.pixels.data(), width, 0, height,
                    channels == 1 ? TJPF_GRAY : TJPF_RGB,
                    TJFLAG_ACCURATEDCT | TJFLAG_STOPONWARNING) != 0) {
    return InvalidArgumentError(
        fmt::format("{}: damaged JPEG image: {}", where, tjGetErrorStr2(tj.get())));
  }
  return out;
}

bool IsImageFile(const fs::path& p) {
  std::string ext = p.extension().string();
  std::transform(ext.begin(), ext.end(), ext.begin(),
                 [](unsigned char c) { return std::tolower(c); });
  return ext == ".png" || ext == ".jpg" || ext == ".jpeg";
}

std::vector<fs::path> SortedEntries(const fs::path& dir, std::error_code& ec) {
  std::vector<fs::path> out;
  for (const auto& e : fs::directory_iterator(dir, ec)) out.push_back(e.path());
  std::sort(out.begin(), out.end());
  return out;
}

}  // namespace

Result<DecodedImage> DecodeImage(std::string_view bytes, int channels, const std::string& where) {
  if (IsPng(bytes)) return DecodePng(bytes, channels, where);
  if (IsJpeg(bytes)) return DecodeJpeg(bytes, channels, where);
  return InvalidArgumentError(where + ": neither a PNG nor a JPEG image");
}

Result<ImageFolderIndex> ScanImageFolder(const std::string& dir, const std::string& split,
                                         const std::vector<std::string>* classes) {
  std::error_code ec;
  fs::path root = fs::path(dir) / split;
  if (split == "test" && !fs::is_directory(root, ec)) root = fs::path(dir) / "val";
  if (!fs::is_directory(root, ec)) {
    return InvalidArgumentError(fmt::format("{}: no {} directory (<split>/<class>/<image>)", dir,
                                            split == "test" ? "test (or val)" : split));
  }
  ImageFolderIndex index;
  if (classes) index.classes = *classes;
  for (const fs::path& class_dir : SortedEntries(root, ec)) {
    if (!fs::is_directory(class_dir, ec)) continue;
    const std::string name = class_dir.filename().string();
    auto it = std::find(index.classes.begin(), index.classes.end(), name);
    if (classes && it == index.classes.end()) {
      return InvalidArgumentError(
          fmt::format("{}: class {} is not a class of the train split", class_dir.string(), name));
    }
    if (!classes) index.classes.push_back(name);
    const int64_t label =
        classes ? it - index.classes.begin() : static_cast<int64_t>(index.classes.size()) - 1;
    const size_t before = index.files.size();
    for (const fs::path& f : SortedEntries(class_dir, ec)) {
      if (!IsImageFile(f)) {
        return InvalidArgumentError(fmt::format("{}: not a .png, .jpg or .jpeg image", f.string()));
      }
      index.files.push_back(fs::absolute(f).string());
      index.labels.push_back(label);
    }
    if (index.files.size() == before) {
      return InvalidArgumentError(class_dir.string() + ": a class directory with no images");
    }
  }
  if (index.files.empty()) {
    return InvalidArgumentError(root.string() + ": no class directories with images");
  }
  return index;
}

}  // namespace spot::train
