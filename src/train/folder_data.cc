#include "train/folder_data.h"

#include <ATen/ATen.h>
#include <ATen/Parallel.h>

#include <algorithm>
#include <thread>

#include "core/file_io.h"
#include "train/csv_table.h"
#include "train/image_folder.h"

namespace spot::train {
namespace {

// One file into row `i` of `out` ([n, C, S, S] uint8).
Status LoadImage(const std::string& file, int channels, int64_t size, at::Tensor out) {
  SPOT_ASSIGN_OR_RETURN(std::string bytes, ReadFile(file));
  SPOT_ASSIGN_OR_RETURN(DecodedImage img, DecodeImage(bytes, channels, file));
  at::Tensor t = at::from_blob(img.pixels.data(), {img.height, img.width, img.channels}, at::kByte)
                     .permute({2, 0, 1});
  if (img.height != size || img.width != size) {
    at::Tensor f = t.unsqueeze(0).to(at::kFloat);
    f = at::upsample_bilinear2d(f, {size, size}, /*align_corners=*/false);
    t = f.squeeze(0).round_().clamp_(0, 255).to(at::kByte);
  }
  out.copy_(t);
  return Status::Ok();
}

}  // namespace

Result<TensorSet> LoadImageFolderSplit(const TrainSpec& spec, Split split) {
  SPOT_ASSIGN_OR_RETURN(ImageFolderIndex train_index, ScanImageFolder(spec.dataset_path, "train"));
  ImageFolderIndex index;
  if (split == Split::kTrain) {
    index = std::move(train_index);
  } else {
    SPOT_ASSIGN_OR_RETURN(index, ScanImageFolder(spec.dataset_path, "test", &train_index.classes));
  }
  const auto n = static_cast<int64_t>(index.files.size());
  TensorSet t;
  t.images = at::empty({n, spec.channels, spec.image_size, spec.image_size}, at::kByte);
  // One decoding thread per intra-op thread, each on every k-th file (ATen's
  // parallel_for measured no gain for this coarse, uneven work).
  std::vector<Status> errors(n);
  const int64_t k = std::max<int64_t>(1, std::min<int64_t>(at::get_num_threads(), n));
  std::vector<std::thread> threads;
  for (int64_t w = 0; w < k; ++w) {
    threads.emplace_back([&, w] {
      for (int64_t i = w; i < n; i += k) {
        errors[i] = LoadImage(index.files[i], static_cast<int>(spec.channels), spec.image_size,
                              t.images[i]);
      }
    });
  }
  for (std::thread& th : threads) th.join();
  for (const Status& s : errors) {
    if (!s.ok()) return s;  // the first in file order, whatever the threads did
  }
  t.labels = at::tensor(index.labels, at::kLong);
  return t;
}

Result<TensorSet> LoadCsvSplit(const TrainSpec& spec, Split split) {
  const std::string dir = spec.dataset_path + "/";
  CsvTable table;
  if (split == Split::kTrain) {
    SPOT_ASSIGN_OR_RETURN(table, ReadCsvTable(dir + "train.csv", spec.label_column));
  } else {
    // Only the train table's header: its columns are the test table's.
    SPOT_ASSIGN_OR_RETURN(std::vector<std::string> features,
                          ReadCsvFeatures(dir + "train.csv", spec.label_column));
    SPOT_ASSIGN_OR_RETURN(table, ReadCsvTable(dir + "test.csv", spec.label_column, &features));
  }
  TensorSet t;
  const auto features = static_cast<int64_t>(table.features.size());
  t.images = at::from_blob(table.values.data(), {table.rows(), features}, at::kFloat).clone();
  t.labels = at::tensor(table.labels, at::kLong);
  return t;
}

}  // namespace spot::train
