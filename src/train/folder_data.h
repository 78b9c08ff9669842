// Data sets that live in a directory of files: image folders
// (image_folder.h) and CSV tables (csv_table.h), as tensors. Used by
// LoadSplit (train_setup.h).
#pragma once

#include <ATen/core/Tensor.h>

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "core/status.h"
#include "train/data_cache.h"
#include "train/image_folder.h"
#include "train/train_setup.h"

namespace spot::train {

// dataset: images. Every image decoded (one thread per intra-op thread), resized to
// image_size x image_size (bilinear, as torchvision's Resize), kept as uint8
// [n, channels, size, size]; TensorSet::Take scales it to [0, 1]. Errors
// name the file. `sharded` (with dataset.cache on): no image is loaded now;
// the set's ImageShards loads shards when asked (an elastic worker, its
// own shards) or when a batch takes a sample of one it does not hold.
Result<TensorSet> LoadImageFolderSplit(const TrainSpec& spec, Split split, bool sharded = false);

// An image folder's split held shard by shard (dataset.cache.shard_size
// images each, in file order) in one uint8 tensor [n, C, S, S] whose rows
// stay unset (and their memory untouched) until their shard is loaded: from
// the nearest cache tier holding it, else decoded from the files (and then
// stored in every tier). Thread-safe: the trainer's thread and the batch
// prefetcher's may load at once; each shard is loaded once.
class ImageShards {
 public:
  // Lists the split and sizes the tensor. Errors name the directory.
  static Result<std::shared_ptr<ImageShards>> Open(const TrainSpec& spec, Split split);
  ImageShards(const ImageShards&) = delete;
  ImageShards& operator=(const ImageShards&) = delete;

  const at::Tensor& images() const { return images_; }
  const std::vector<int64_t>& labels() const { return index_.labels; }
  int64_t shards() const { return static_cast<int64_t>(held_.size()); }
  int64_t shard_size() const { return shard_size_; }
  int64_t held() const;  // shards loaded
  bool Holds(int64_t shard) const { return held_[static_cast<size_t>(shard)].load(); }

  // Loads the shards of `which` not held yet, on up to one thread per
  // intra-op thread; what it decoded is stored in the cache only when every
  // shard loaded. The first error in file order names the file.
  Status Load(const std::vector<int64_t>& which);
  Status LoadAll();
  // Loads the shards of rows `rows` (int64) or [begin, end) not held yet.
  // Throws std::invalid_argument with the error's text (inside batch
  // making, which has no Status).
  void EnsureRows(const at::Tensor& rows);
  void EnsureRange(int64_t begin, int64_t end);

  DataCacheStats stats() const { return cache_->stats(); }

 private:
  ImageShards() = default;
  void Ensure(std::vector<int64_t> shards);

  int channels_ = 0;
  int64_t image_size_ = 0;
  ImageFolderIndex index_;
  std::string part_;  // "train" or "test"
  uint64_t fingerprint_ = 0;
  int64_t shard_size_ = 0;
  std::unique_ptr<DataCache> cache_;
  at::Tensor images_;
  std::vector<std::atomic<bool>> held_;
  std::mutex load_mu_;  // one Load at a time
};

// dataset: csv. Features float32 [n, F], labels int64 [n].
Result<TensorSet> LoadCsvSplit(const TrainSpec& spec, Split split);

}  // namespace spot::train
