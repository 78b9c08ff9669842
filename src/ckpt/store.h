// CheckpointStore: checkpoint versions in one or two storage tiers.
//
// Version `id` is two blobs: `ckpt-<id>.bin` (format v2, format.h) and
// `ckpt-<id>.json` (its manifest: id, step, lineage parent, delta base,
// sizes, codecs, whole-file checksum, caller metadata). A version is written
// to the local tier, data first: the manifest's commit is the point where it
// becomes visible, so a reader never sees a torn version. A durable tier (a
// second directory today; an object store later) receives a copy of each
// version, data verified against the manifest's checksum before its manifest
// is copied. Restore takes the newest version that decodes correctly from
// whichever tier has it, resolving delta bases across tiers, and reports
// every version it passed over and why.
//
// Retention (per tier, after each save): keep the last N versions, every M-th,
// the best K by a metric of their metadata, the base chain of each kept one,
// and in the local tier everything not yet replicated.
//
// Thread-safety: ReserveId, Write, Replicate, ApplyRetention and the readers
// may be called from different threads, with one writer per tier at a time
// (the asynchronous saver's writer thread and its replicator).
#pragma once

#include <atomic>
#include <cstdint>
#include <limits>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "ckpt/blob_store.h"
#include "ckpt/codec.h"
#include "ckpt/container.h"
#include "ckpt/format.h"
#include "core/status.h"

namespace spot::ckpt {

enum class Tier { kLocal = 0, kDurable = 1 };
std::string_view TierName(Tier t);

struct RetentionPolicy {
  int keep_last = 3;        // >= 1
  int keep_every = 0;       // also keep versions whose id is a multiple of this (0 = off)
  std::string best_metric;  // also keep the best `keep_best` by this meta field ("" = off)
  bool best_higher = true;  // higher is better (accuracy) or lower (loss)
  int keep_best = 1;
};

struct StoreOptions {
  std::string dir;          // local tier, created when missing
  std::string durable_dir;  // durable tier, "" for none
  RetentionPolicy retention;
};

struct VersionInfo {
  int64_t id = 0;
  int64_t step = 0;
  int64_t parent = -1;  // the version training resumed from, -1 for none (lineage)
  int64_t base = -1;    // the version this one is a delta against, -1 for a full one
  int chain_depth = 0;  // deltas between this version and the nearest full one
  uint64_t file_bytes = 0;
  uint64_t payload_bytes = 0;
  uint64_t checksum = 0;  // XXH3-64 of the whole data file
  int64_t created_unix_ms = 0;
  int records = 0;
  std::string codecs;       // e.g. "xor-delta:30,shuffle-zstd:2"
  std::string meta_json;    // caller's metadata, a JSON object
  std::vector<Tier> tiers;  // tiers holding its manifest (List) or the one it was read from
};

// What to record with a new version.
struct SaveRequest {
  int64_t step = 0;
  int64_t parent = -1;
  std::string meta_json;  // a JSON object ("" for none)
  CodecPlan plan;
};

class CheckpointStore {
 public:
  static Result<std::unique_ptr<CheckpointStore>> Open(StoreOptions options);

  // A new version id, above every id present in any tier or reserved before.
  int64_t ReserveId();

  // Writes version `id` to the local tier. `reference`, `base_id`: as
  // WriteCheckpointFile (empty reference and -1 for a full version);
  // `chain_depth` is the base's depth + 1 for a delta.
  Result<VersionInfo> Write(int64_t id, Container& c, Container* reference, int64_t base_id,
                            int chain_depth, const SaveRequest& req, ChunkCodec& codec);

  // Synchronous full save: reserve, write, replicate, apply retention.
  Result<VersionInfo> Save(Container& c, const SaveRequest& req);

  // Copies a committed local version to the durable tier (no-op without one).
  Status Replicate(const VersionInfo& v);

  // Deletes what the retention policy does not keep in one tier; returns the
  // ids deleted (or that would be, with dry_run).
  Result<std::vector<int64_t>> ApplyRetention(Tier tier, bool dry_run = false);

  struct Loaded {
    VersionInfo info;
    Container container;
    std::vector<std::string> skipped;  // why each newer version was passed over
  };
  // Loads the newest version with step < `before_step` that decodes correctly
  // from any tier. NotFound (with the reasons) when there is none.
  Result<Loaded> LoadNewestValid(int64_t before_step = std::numeric_limits<int64_t>::max()) const;

  // Loads version `id` from any tier that has it intact.
  Result<Loaded> Load(int64_t id) const;

  // Checks version `id` in `tier` completely: its manifest, the whole-file
  // checksum, every chunk, and that it decodes (with its base chain).
  Status Verify(int64_t id, Tier tier) const;

  // Every version with a readable manifest in any tier, newest first.
  std::vector<VersionInfo> List() const;
  // True when no tier holds any version file.
  bool Empty() const;

  bool has_durable() const { return tiers_[1] != nullptr; }
  const BlobStore& tier(Tier t) const { return *tiers_[static_cast<int>(t)]; }
  const StoreOptions& options() const { return opt_; }
  const std::string& dir() const { return opt_.dir; }

  static std::string DataFileName(int64_t id);
  static std::string ManifestFileName(int64_t id);
  // Parses "ckpt-<digits>.<bin|json>" into the id; -1 otherwise.
  static int64_t ParseId(const std::string& blob_name);

 private:
  explicit CheckpointStore(StoreOptions o) : opt_(std::move(o)) {}
  BlobStore* store(Tier t) const { return tiers_[static_cast<int>(t)].get(); }
  std::vector<Tier> Tiers() const;
  // Ids with any file in `tier`, ascending.
  std::vector<int64_t> Ids(Tier tier) const;
  Result<VersionInfo> ReadManifest(Tier tier, int64_t id) const;
  // Decodes version `id` (any tier, bases resolved). `depth` guards chains.
  Result<Container> Decode(int64_t id, int depth, std::vector<std::string>* why,
                           VersionInfo* info) const;
  Result<Container> DecodeFrom(Tier tier, const VersionInfo& v, int depth,
                               std::vector<std::string>* why) const;

  StoreOptions opt_;
  std::unique_ptr<BlobStore> tiers_[2];
  std::mutex id_mu_;
  int64_t next_id_ = 1;
  std::atomic<int64_t> replicated_upto_{0};  // highest id copied to the durable tier
};

}  // namespace spot::ckpt
