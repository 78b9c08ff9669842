// A multi-tier cache of decoded data-set shards (dataset.cache): the bytes a
// reader produced from the origin files (an image folder's decoded, resized
// pixels) kept in three tiers, nearest first:
//   memory   this process's copies, bounded in bytes, least recently used out;
//   local    a directory on this machine's disk (lost with the machine);
//   durable  a blob store every worker reaches (survives the machine).
// A replacement worker starts with an empty local disk and warms from the
// durable copy instead of decoding the origin again. A hit in a farther tier
// is copied into the nearer ones; a shard decoded from the origin is stored
// in all of them.
//
// A shard is one blob, named by its reader (the name carries the data set's
// fingerprint, so a changed file or setting never meets an old copy):
//   "SPOTSHRD" | u32 version | u32 0 | u64 fingerprint | u64 raw bytes |
//   u64 XXH3-64 of the raw bytes | zstd frame of the raw bytes
// (little-endian). A copy that is truncated, from another fingerprint, fails
// to decompress or to match its checksum is damaged: it is logged with its
// location, counted, and treated as absent (decoded again and rewritten).
//
// Caching never fails a load: a tier that cannot be written is logged and
// skipped. LibTorch-free. Thread-safe: loader threads call Get and Put
// concurrently (each on its own shard names).
#pragma once

#include <array>
#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>

#include "core/status.h"

namespace spot::ckpt {
class BlobStore;
}

namespace spot::train {

enum class CacheTier { kMemory = 0, kLocal = 1, kDurable = 2, kOrigin = 3 };
inline constexpr int kCacheTiers = 4;
const char* CacheTierName(CacheTier tier);  // "memory", "local", "durable", "origin"

struct DataCacheOptions {
  std::string local_dir;     // local tier's directory; "" = no local tier
  std::string durable_dir;   // durable tier's directory; "" = no durable tier
  int64_t memory_bytes = 0;  // in-process tier's budget (shared by the process); 0 = off
  int zstd_level = 1;        // compression of the disk tiers' copies, [1, 19]
};

// What served a load's shards, and what went wrong on the way.
struct DataCacheStats {
  std::array<int64_t, kCacheTiers> shards{};  // by the tier that served them
  int64_t damaged = 0;                        // copies found damaged (then ignored)
  int64_t write_failures = 0;                 // copies that could not be stored
  int64_t bytes_read = 0;                     // from the disk tiers, as stored
  int64_t bytes_written = 0;                  // to the disk tiers, as stored
  // "12 shards: 0 memory, 0 local, 12 durable, 0 decoded"
  std::string Summary() const;
};

class DataCache {
 public:
  // Opens the tiers' directories, creating each at its first write (a load
  // that fails writes nothing). Other processes may use the same directories
  // at the same time.
  static Result<std::unique_ptr<DataCache>> Open(const DataCacheOptions& options);
  // Over given stores (tests, and other blob stores than directories); either may be null.
  DataCache(std::shared_ptr<ckpt::BlobStore> local, std::shared_ptr<ckpt::BlobStore> durable,
            int64_t memory_bytes, int zstd_level = 1);
  ~DataCache();
  DataCache(const DataCache&) = delete;
  DataCache& operator=(const DataCache&) = delete;

  // The raw bytes of shard `name` (written with `fingerprint`) from the
  // nearest tier holding a sound copy, or nullopt when none does; *from says
  // which tier served it. Counts the hit.
  std::optional<std::string> Get(const std::string& name, uint64_t fingerprint, CacheTier* from);
  // Stores a shard the caller decoded from the origin in every tier, and
  // counts it as served by the origin.
  void Put(const std::string& name, uint64_t fingerprint, std::string_view raw);

  DataCacheStats stats() const;

  // A shard's stored form, and back (nullopt, with the reason in *why, for a
  // damaged one). Exposed for tests.
  static std::string Encode(uint64_t fingerprint, std::string_view raw, int zstd_level);
  static std::optional<std::string> Decode(std::string_view stored, uint64_t fingerprint,
                                           std::string* why);

 private:
  std::optional<std::string> FromDisk(int tier, const std::string& name, uint64_t fingerprint,
                                      std::string* stored);
  void Store(int tier, const std::string& name, std::string_view stored);

  std::shared_ptr<ckpt::BlobStore> disk_[2];  // local, durable
  std::string dirs_[2];                       // theirs, when directories (Open)
  std::once_flag made_[2];                    // the directory created
  int64_t memory_bytes_ = 0;
  int zstd_level_ = 1;
  std::array<std::atomic<int64_t>, kCacheTiers> served_{};
  std::atomic<int64_t> damaged_{0}, write_failures_{0}, bytes_read_{0}, bytes_written_{0};
};

// Clears this process's memory tier (tests and benchmarks).
void ClearDataCacheMemory();

}  // namespace spot::train
