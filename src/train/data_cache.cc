#include "train/data_cache.h"

#include <fmt/format.h>
#include <spdlog/spdlog.h>
#include <xxhash.h>
#include <zstd.h>

#include <cstring>
#include <list>
#include <mutex>
#include <unordered_map>

#include "ckpt/blob_store.h"
#include "ckpt/s3_blob_store.h"
#include "core/file_io.h"

namespace spot::train {
namespace {

constexpr char kMagic[8] = {'S', 'P', 'O', 'T', 'S', 'H', 'R', 'D'};
constexpr uint32_t kVersion = 1;
constexpr size_t kHeaderBytes = 8 + 4 + 4 + 8 + 8 + 8;

void PutU64(std::string* out, uint64_t v) {
  for (int i = 0; i < 8; ++i) out->push_back(static_cast<char>((v >> (8 * i)) & 0xff));
}
void PutU32(std::string* out, uint32_t v) {
  for (int i = 0; i < 4; ++i) out->push_back(static_cast<char>((v >> (8 * i)) & 0xff));
}
uint64_t GetLe(std::string_view s, size_t at, int bytes) {
  uint64_t v = 0;
  for (int i = bytes - 1; i >= 0; --i) v = (v << 8) | static_cast<uint8_t>(s[at + i]);
  return v;
}

// The process's memory tier: shards by name, least recently used evicted
// first once the bytes held pass the largest budget any cache asked for.
class MemoryTier {
 public:
  static MemoryTier& Get() {
    static MemoryTier* tier = new MemoryTier();  // never destroyed: used until exit
    return *tier;
  }

  std::optional<std::string> Find(const std::string& key) {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = index_.find(key);
    if (it == index_.end()) return std::nullopt;
    lru_.splice(lru_.begin(), lru_, it->second);
    return it->second->second;
  }

  void Insert(const std::string& key, std::string_view raw, int64_t budget) {
    std::lock_guard<std::mutex> lock(mu_);
    budget_ = std::max(budget_, budget);
    if (static_cast<int64_t>(raw.size()) > budget_ || index_.count(key)) return;
    lru_.emplace_front(key, std::string(raw));
    index_[key] = lru_.begin();
    held_ += static_cast<int64_t>(raw.size());
    while (held_ > budget_) {
      held_ -= static_cast<int64_t>(lru_.back().second.size());
      index_.erase(lru_.back().first);
      lru_.pop_back();
    }
  }

  void Clear() {
    std::lock_guard<std::mutex> lock(mu_);
    lru_.clear();
    index_.clear();
    held_ = 0;
    budget_ = 0;
  }

 private:
  std::mutex mu_;
  std::list<std::pair<std::string, std::string>> lru_;  // most recent first
  std::unordered_map<std::string, std::list<std::pair<std::string, std::string>>::iterator> index_;
  int64_t held_ = 0;
  int64_t budget_ = 0;
};

// The memory tier's key: the name and the fingerprint it was written with.
std::string MemoryKey(const std::string& name, uint64_t fingerprint) {
  return fmt::format("{}@{:016x}", name, fingerprint);
}

}  // namespace

const char* CacheTierName(CacheTier tier) {
  static const char* kNames[] = {"memory", "local", "durable", "origin"};
  return kNames[static_cast<int>(tier)];
}

std::string DataCacheStats::Summary() const {
  int64_t total = 0;
  for (int64_t n : shards) total += n;
  std::string s = fmt::format("{} shards: {} memory, {} local, {} durable, {} decoded", total,
                              shards[0], shards[1], shards[2], shards[3]);
  if (damaged > 0) s += fmt::format(", {} damaged copies ignored", damaged);
  if (write_failures > 0) s += fmt::format(", {} copies not stored", write_failures);
  return s;
}

void ClearDataCacheMemory() { MemoryTier::Get().Clear(); }

Result<std::unique_ptr<DataCache>> DataCache::Open(const DataCacheOptions& o) {
  std::shared_ptr<ckpt::BlobStore> local, durable;
  if (!o.local_dir.empty()) {
    auto s = ckpt::DirectoryBlobStore::OpenShared(o.local_dir);
    if (!s.ok()) return s.status().WithContext("data cache, local tier");
    local = std::move(s).value();
  }
  if (!o.durable_dir.empty()) {
    // A directory other workers write too, or an S3 prefix.
    auto s = ckpt::OpenTierStore(o.durable_dir, /*read_only=*/true);
    if (!s.ok()) return s.status().WithContext("data cache, durable tier");
    durable = std::move(s).value();
  }
  auto cache = std::make_unique<DataCache>(std::move(local), std::move(durable), o.memory_bytes,
                                           o.zstd_level);
  cache->dirs_[0] = o.local_dir;
  cache->dirs_[1] = o.durable_dir;
  return cache;
}

DataCache::DataCache(std::shared_ptr<ckpt::BlobStore> local,
                     std::shared_ptr<ckpt::BlobStore> durable, int64_t memory_bytes, int zstd_level)
    : disk_{std::move(local), std::move(durable)},
      memory_bytes_(memory_bytes),
      zstd_level_(zstd_level) {}

DataCache::~DataCache() = default;

std::string DataCache::Encode(uint64_t fingerprint, std::string_view raw, int zstd_level) {
  std::string out(kMagic, sizeof(kMagic));
  PutU32(&out, kVersion);
  PutU32(&out, 0);
  PutU64(&out, fingerprint);
  PutU64(&out, raw.size());
  PutU64(&out, XXH3_64bits(raw.data(), raw.size()));
  const size_t header = out.size();
  out.resize(header + ZSTD_compressBound(raw.size()));
  const size_t n =
      ZSTD_compress(out.data() + header, out.size() - header, raw.data(), raw.size(), zstd_level);
  // A compressor error cannot happen with a bound-sized buffer; store
  // nothing decodable rather than a wrong shard if it ever does.
  out.resize(ZSTD_isError(n) ? header : header + n);
  return out;
}

std::optional<std::string> DataCache::Decode(std::string_view s, uint64_t fingerprint,
                                             std::string* why) {
  if (s.size() < kHeaderBytes || std::memcmp(s.data(), kMagic, sizeof(kMagic)) != 0) {
    *why = "not a cached shard (bad magic or truncated header)";
    return std::nullopt;
  }
  if (GetLe(s, 8, 4) != kVersion || GetLe(s, 12, 4) != 0) {
    *why = fmt::format("format version {}.{}, expected {}.0", GetLe(s, 8, 4), GetLe(s, 12, 4),
                       kVersion);
    return std::nullopt;
  }
  if (GetLe(s, 16, 8) != fingerprint) {
    *why = "written for another data set or setting (fingerprint differs)";
    return std::nullopt;
  }
  const uint64_t raw_size = GetLe(s, 24, 8);
  const uint64_t sum = GetLe(s, 32, 8);
  const std::string_view frame = s.substr(kHeaderBytes);
  const unsigned long long content = ZSTD_getFrameContentSize(frame.data(), frame.size());
  if (content == ZSTD_CONTENTSIZE_ERROR || content == ZSTD_CONTENTSIZE_UNKNOWN ||
      content != raw_size) {
    *why = "compressed data damaged (frame header)";
    return std::nullopt;
  }
  std::string raw(raw_size, '\0');
  const size_t n = ZSTD_decompress(raw.data(), raw.size(), frame.data(), frame.size());
  if (ZSTD_isError(n) || n != raw_size) {
    *why = fmt::format("compressed data damaged ({})",
                       ZSTD_isError(n) ? ZSTD_getErrorName(n) : "short");
    return std::nullopt;
  }
  if (XXH3_64bits(raw.data(), raw.size()) != sum) {
    *why = "checksum mismatch";
    return std::nullopt;
  }
  return raw;
}

std::optional<std::string> DataCache::FromDisk(int tier, const std::string& name,
                                               uint64_t fingerprint, std::string* stored_out) {
  const ckpt::BlobStore* store = disk_[tier].get();
  if (store == nullptr) return std::nullopt;
  Result<std::string> stored = store->Read(name);
  if (!stored.ok()) {
    if (stored.status().code() != StatusCode::kNotFound) {
      spdlog::warn("data cache: reading {}: {}", store->Describe(name), stored.status().message());
    }
    return std::nullopt;
  }
  bytes_read_ += static_cast<int64_t>(stored->size());
  std::string why;
  std::optional<std::string> raw = Decode(*stored, fingerprint, &why);
  if (!raw) {
    ++damaged_;
    spdlog::warn("data cache: {} is damaged ({}); decoding it again", store->Describe(name), why);
  }
  *stored_out = std::move(stored).value();
  return raw;
}

void DataCache::Store(int tier, const std::string& name, std::string_view stored) {
  ckpt::BlobStore* store = disk_[tier].get();
  if (store == nullptr) return;
  Status st;
  if (!dirs_[tier].empty())
    std::call_once(made_[tier], [&] { st = CreateDirectories(dirs_[tier]); });
  if (st.ok()) st = store->Put(name, stored);
  if (!st.ok()) {
    ++write_failures_;
    spdlog::warn("data cache: cannot store {}: {}", store->Describe(name), st.message());
    return;
  }
  bytes_written_ += static_cast<int64_t>(stored.size());
}

std::optional<std::string> DataCache::Get(const std::string& name, uint64_t fingerprint,
                                          CacheTier* from) {
  if (memory_bytes_ > 0) {
    if (std::optional<std::string> raw = MemoryTier::Get().Find(MemoryKey(name, fingerprint))) {
      *from = CacheTier::kMemory;
      ++served_[0];
      return raw;
    }
  }
  for (int tier = 0; tier < 2; ++tier) {
    std::string stored;
    std::optional<std::string> raw = FromDisk(tier, name, fingerprint, &stored);
    if (!raw) continue;
    *from = static_cast<CacheTier>(tier + 1);
    ++served_[tier + 1];
    // Copy up: a durable hit fills the local tier, any hit the memory tier.
    if (tier == 1) Store(0, name, stored);
    if (memory_bytes_ > 0) {
      MemoryTier::Get().Insert(MemoryKey(name, fingerprint), *raw, memory_bytes_);
    }
    return raw;
  }
  return std::nullopt;
}

void DataCache::Put(const std::string& name, uint64_t fingerprint, std::string_view raw) {
  ++served_[static_cast<int>(CacheTier::kOrigin)];
  if (memory_bytes_ > 0) MemoryTier::Get().Insert(MemoryKey(name, fingerprint), raw, memory_bytes_);
  if (!disk_[0] && !disk_[1]) return;
  const std::string stored = Encode(fingerprint, raw, zstd_level_);
  for (int tier = 0; tier < 2; ++tier) Store(tier, name, stored);
}

DataCacheStats DataCache::stats() const {
  DataCacheStats s;
  for (int i = 0; i < kCacheTiers; ++i) s.shards[i] = served_[i];
  s.damaged = damaged_;
  s.write_failures = write_failures_;
  s.bytes_read = bytes_read_;
  s.bytes_written = bytes_written_;
  return s;
}

}  // namespace spot::train
