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
#include <numeric>
#include <stdexcept>
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

// The split's files: DIR/train, or DIR/test (or val) with the train split's classes.
Result<ImageFolderIndex> ScanSplit(const TrainSpec& spec, Split split) {
  SPOT_ASSIGN_OR_RETURN(ImageFolderIndex train, ScanImageFolder(spec.dataset_path, "train"));
  if (split == Split::kTrain) return train;
  return ScanImageFolder(spec.dataset_path, "test", &train.classes);
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

Result<std::shared_ptr<ImageShards>> ImageShards::Open(const TrainSpec& spec, Split split) {
  std::shared_ptr<ImageShards> s(new ImageShards());
  SPOT_ASSIGN_OR_RETURN(s->index_, ScanSplit(spec, split));
  s->part_ = split == Split::kTrain ? "train" : "test";
  s->channels_ = static_cast<int>(spec.channels);
  s->image_size_ = spec.image_size;
  s->shard_size_ = spec.cache.shard_size;
  const CacheDirs dirs = CacheDirsFor(spec);
  SPOT_ASSIGN_OR_RETURN(s->cache_, DataCache::Open({.local_dir = dirs.local,
                                                    .durable_dir = dirs.durable,
                                                    .memory_bytes = spec.cache.memory_mb << 20}));
  s->fingerprint_ = Fingerprint(spec, s->part_, s->index_);
  const auto n = static_cast<int64_t>(s->index_.files.size());
  s->images_ = at::empty({n, spec.channels, spec.image_size, spec.image_size}, at::kByte);
  s->held_ = std::vector<std::atomic<bool>>(
      static_cast<size_t>((n + s->shard_size_ - 1) / s->shard_size_));
  return s;
}

int64_t ImageShards::held() const {
  return std::count_if(held_.begin(), held_.end(), [](const auto& h) { return h.load(); });
}

Status ImageShards::LoadAll() {
  std::vector<int64_t> all(held_.size());
  std::iota(all.begin(), all.end(), 0);
  return Load(all);
}

// Each shard from the nearest tier that holds it, else decoded (per-file
// errors go to `errors`); the decoded ones are stored once all loaded.
Status ImageShards::Load(const std::vector<int64_t>& which) {
  std::lock_guard<std::mutex> lock(load_mu_);
  std::vector<int64_t> todo;
  for (int64_t s : which) {
    if (!held_[static_cast<size_t>(s)].load()) todo.push_back(s);
  }
  std::sort(todo.begin(), todo.end());
  todo.erase(std::unique(todo.begin(), todo.end()), todo.end());
  if (todo.empty()) return Status::Ok();
  const auto n = static_cast<int64_t>(index_.files.size());
  auto rows = [&](int64_t s) {
    return std::pair<int64_t, int64_t>{s * shard_size_, std::min(n, (s + 1) * shard_size_)};
  };
  auto name = [&](int64_t s) {
    return fmt::format("images-{}-{:016x}-{:06}", part_, fingerprint_, s);
  };
  // Per shard: the first file error among its rows, and whether it was decoded.
  std::vector<Status> errors(todo.size());
  std::vector<char> decoded(todo.size(), 0);
  const int64_t k = std::max<int64_t>(
      1, std::min<int64_t>(at::get_num_threads(), static_cast<int64_t>(todo.size())));
  OnThreads(k, static_cast<int64_t>(todo.size()), [&](int64_t j) {
    const auto [begin, end] = rows(todo[j]);
    at::Tensor block = images_.slice(0, begin, end);
    const auto bytes = static_cast<size_t>(block.nbytes());
    CacheTier from;
    std::optional<std::string> raw = cache_->Get(name(todo[j]), fingerprint_, &from);
    if (raw && raw->size() == bytes) {
      std::memcpy(block.data_ptr(), raw->data(), bytes);
      return;
    }
    decoded[j] = 1;
    for (int64_t i = begin; i < end && errors[j].ok(); ++i) {
      errors[j] = LoadImage(index_.files[i], channels_, image_size_, images_[i]);
    }
  });
  for (const Status& e : errors) {
    if (!e.ok()) return e;  // the first in file order, whatever the threads did
  }
  // Only a load that succeeded stores what it decoded.
  OnThreads(k, static_cast<int64_t>(todo.size()), [&](int64_t j) {
    if (!decoded[j]) return;
    const auto [begin, end] = rows(todo[j]);
    at::Tensor block = images_.slice(0, begin, end);
    cache_->Put(name(todo[j]), fingerprint_,
                std::string_view(static_cast<const char*>(block.data_ptr()),
                                 static_cast<size_t>(block.nbytes())));
  });
  for (int64_t s : todo) held_[static_cast<size_t>(s)].store(true);
  return Status::Ok();
}

void ImageShards::Ensure(std::vector<int64_t> shards) {
  std::erase_if(shards, [&](int64_t s) { return held_[static_cast<size_t>(s)].load(); });
  if (shards.empty()) return;
  Status st = Load(shards);
  if (!st.ok()) throw std::invalid_argument(st.message());
}

void ImageShards::EnsureRows(const at::Tensor& rows) {
  const at::Tensor r = rows.to(at::kLong).contiguous();
  const int64_t* p = r.data_ptr<int64_t>();
  std::vector<int64_t> shards;
  for (int64_t i = 0; i < r.numel(); ++i) {
    const int64_t s = p[i] / shard_size_;
    if (!held_[static_cast<size_t>(s)].load()) shards.push_back(s);
  }
  Ensure(std::move(shards));
}

void ImageShards::EnsureRange(int64_t begin, int64_t end) {
  std::vector<int64_t> shards;
  for (int64_t s = begin / shard_size_; s * shard_size_ < end; ++s) {
    if (!held_[static_cast<size_t>(s)].load()) shards.push_back(s);
  }
  Ensure(std::move(shards));
}

Result<TensorSet> LoadImageFolderSplit(const TrainSpec& spec, Split split, bool sharded) {
  const auto t0 = std::chrono::steady_clock::now();
  TensorSet t;
  if (spec.cache.enabled) {
    SPOT_ASSIGN_OR_RETURN(std::shared_ptr<ImageShards> shards, ImageShards::Open(spec, split));
    t.images = shards->images();
    t.labels = at::tensor(shards->labels(), at::kLong);
    if (sharded) {
      t.shards = std::move(shards);
      return t;
    }
    SPOT_RETURN_IF_ERROR(shards->LoadAll());
    t.cache_stats = shards->stats();
    spdlog::info("data cache: {} split, {} ({:.2f} s)", split == Split::kTrain ? "train" : "test",
                 t.cache_stats->Summary(),
                 std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
    return t;
  }
  SPOT_ASSIGN_OR_RETURN(ImageFolderIndex index, ScanSplit(spec, split));
  const auto n = static_cast<int64_t>(index.files.size());
  t.images = at::empty({n, spec.channels, spec.image_size, spec.image_size}, at::kByte);
  // Decoding threads, one per intra-op thread (ATen's parallel_for measured
  // no gain for this coarse, uneven work), each taking single files.
  std::vector<Status> errors(n);
  const int64_t k = std::max<int64_t>(1, std::min<int64_t>(at::get_num_threads(), n));
  OnThreads(k, n, [&](int64_t i) {
    errors[i] =
        LoadImage(index.files[i], static_cast<int>(spec.channels), spec.image_size, t.images[i]);
  });
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
