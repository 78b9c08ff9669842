#include "train/folder_data.h"

#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <fmt/format.h>
#include <spdlog/spdlog.h>
#include <xxhash.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <functional>
#include <memory>
#include <thread>

#include "core/file_io.h"
#include "train/csv_table.h"
#include "train/data_cache.h"
#include "train/image_folder.h"

namespace spot::train {
namespace {

namespace fs = std::filesystem;

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

// What an image folder's decoded bytes depend on: the settings, and each
// file's name (relative to the data set), size, modification time and label
// (the quick check of make and rsync; copies that keep times keep hits).
uint64_t Fingerprint(const TrainSpec& spec, const std::string& split,
                     const ImageFolderIndex& index) {
  std::unique_ptr<XXH3_state_t, decltype(&XXH3_freeState)> st(XXH3_createState(), &XXH3_freeState);
  XXH3_64bits_reset(st.get());
  const std::string head = fmt::format("spot-images-v1 {} {} {} {}", split, spec.channels,
                                       spec.image_size, index.files.size());
  XXH3_64bits_update(st.get(), head.data(), head.size());
  std::error_code ec;
  for (size_t i = 0; i < index.files.size(); ++i) {
    const fs::path& file = index.files[i];
    const auto size = fs::file_size(file, ec);
    const auto time = fs::last_write_time(file, ec).time_since_epoch().count();
    const std::string line =
        fmt::format("{} {} {} {}\n", fs::path(file).lexically_relative(spec.dataset_path).string(),
                    ec ? 0 : size, ec ? 0 : time, index.labels[i]);
    XXH3_64bits_update(st.get(), line.data(), line.size());
  }
  return XXH3_64bits_digest(st.get());
}

struct CacheDirs {
  std::string local, durable;
};
CacheDirs CacheDirsFor(const TrainSpec& spec) {
  const DataCacheSpec& c = spec.cache;
  CacheDirs d{c.local, c.durable == "none" ? "" : c.durable};
  if (d.local.empty() && !spec.checkpoint.dir.empty())
    d.local = spec.checkpoint.dir + "/data-cache";
  if (c.durable.empty() && !spec.checkpoint.durable_dir.empty()) {
    d.durable = spec.checkpoint.durable_dir + "/data-cache";
  }
  return d;
}

// Fills rows [begin, end) of `images` from the cache, or else by decoding
// their files (per-file errors go to `errors`). True when it decoded them.
bool LoadShard(const TrainSpec& spec, const ImageFolderIndex& index, DataCache& cache,
               const std::string& name, uint64_t fingerprint, int64_t begin, int64_t end,
               const at::Tensor& images, std::vector<Status>& errors) {
  at::Tensor block = images.slice(0, begin, end);
  const auto bytes = static_cast<size_t>(block.nbytes());
  CacheTier from;
  std::optional<std::string> raw = cache.Get(name, fingerprint, &from);
  if (raw && raw->size() == bytes) {
    std::memcpy(block.data_ptr(), raw->data(), bytes);
    return false;
  }
  for (int64_t i = begin; i < end; ++i) {
    errors[i] =
        LoadImage(index.files[i], static_cast<int>(spec.channels), spec.image_size, images[i]);
  }
  return true;
}

// Runs fn(i) for i in [0, n) on k threads, each taking the next i.
void OnThreads(int64_t k, int64_t n, const std::function<void(int64_t)>& fn) {
  std::atomic<int64_t> next{0};
  std::vector<std::thread> threads;
  for (int64_t w = 0; w < k; ++w) {
    threads.emplace_back([&] {
      for (int64_t i = next++; i < n; i = next++) fn(i);
    });
  }
  for (std::thread& th : threads) th.join();
}

}  // namespace

Result<TensorSet> LoadImageFolderSplit(const TrainSpec& spec, Split split) {
  const auto t0 = std::chrono::steady_clock::now();
  SPOT_ASSIGN_OR_RETURN(ImageFolderIndex train_index, ScanImageFolder(spec.dataset_path, "train"));
  ImageFolderIndex index;
  if (split == Split::kTrain) {
    index = std::move(train_index);
  } else {
    SPOT_ASSIGN_OR_RETURN(index, ScanImageFolder(spec.dataset_path, "test", &train_index.classes));
  }
  const std::string part = split == Split::kTrain ? "train" : "test";
  std::unique_ptr<DataCache> cache;
  uint64_t fingerprint = 0;
  if (spec.cache.enabled) {
    const CacheDirs dirs = CacheDirsFor(spec);
    SPOT_ASSIGN_OR_RETURN(cache, DataCache::Open({.local_dir = dirs.local,
                                                  .durable_dir = dirs.durable,
                                                  .memory_bytes = spec.cache.memory_mb << 20}));
    fingerprint = Fingerprint(spec, part, index);
  }
  const auto n = static_cast<int64_t>(index.files.size());
  const int64_t shard_size = spec.cache.shard_size;  // with a cache
  const int64_t shards = (n + shard_size - 1) / shard_size;
  TensorSet t;
  t.images = at::empty({n, spec.channels, spec.image_size, spec.image_size}, at::kByte);
  // Decoding threads, one per intra-op thread (ATen's parallel_for measured
  // no gain for this coarse, uneven work): with a cache each takes whole
  // shards, without one single files.
  std::vector<Status> errors(n);
  const int64_t k =
      std::max<int64_t>(1, std::min<int64_t>(at::get_num_threads(), cache ? shards : n));
  auto shard_name = [&](int64_t s) {
    return fmt::format("images-{}-{:016x}-{:06}", part, fingerprint, s);
  };
  std::vector<char> decoded(shards, 0);
  if (cache) {
    OnThreads(k, shards, [&](int64_t s) {
      decoded[s] = LoadShard(spec, index, *cache, shard_name(s), fingerprint, s * shard_size,
                             std::min(n, (s + 1) * shard_size), t.images, errors);
    });
  } else {
    OnThreads(k, n, [&](int64_t i) {
      errors[i] =
          LoadImage(index.files[i], static_cast<int>(spec.channels), spec.image_size, t.images[i]);
    });
  }
  for (const Status& s : errors) {
    if (!s.ok()) return s;  // the first in file order, whatever the threads did
  }
  // Only a load that succeeded stores what it decoded.
  if (cache) {
    OnThreads(k, shards, [&](int64_t s) {
      if (!decoded[s]) return;
      at::Tensor block = t.images.slice(0, s * shard_size, std::min(n, (s + 1) * shard_size));
      cache->Put(shard_name(s), fingerprint,
                 std::string_view(static_cast<const char*>(block.data_ptr()),
                                  static_cast<size_t>(block.nbytes())));
    });
  }
  t.labels = at::tensor(index.labels, at::kLong);
  if (cache) {
    t.cache_stats = cache->stats();
    spdlog::info("data cache: {} split, {} ({:.2f} s)", part, t.cache_stats->Summary(),
                 std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  }
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
