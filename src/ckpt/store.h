// CheckpointStore: checkpoint versions in one or two storage tiers.
//
// Version `id` is two blobs: `ckpt-<id>.bin` (format v3, format.h) and
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
// One check decides whether a copy is usable (CheckCopy in the .cc): Inspect,
// List, Verify, Load and LoadNewestValid all go through it, so a version that
// verification calls damaged is exactly one that a restore skips.
//
// A restart with no survivor reads the durable tier only and decodes the
// whole delta chain of the version it restores. To keep that chain shallow,
// Replicate writes the durable copy of a delta that would sit deeper than
// StoreOptions::durable_max_chain there in full ("materialized": the same id,
// step, parent, metadata and decoded records; base -1, chain depth 0),
// decoded from the local tier with every check of a full load. The two
// tiers' manifests of such a version then differ (base, chain depth, sizes,
// checksums); readers check each copy against its own tier's manifest, and a
// delta's base decodes to the same bytes from either tier.
//
// Retention (per tier, after each save): keep the last N versions, every M-th,
// the best K by a metric of their metadata, the base chain of each kept one
// (as that tier's manifests say: a materialized durable copy needs no base),
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
#include <optional>
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

// StoreOptions::durable_max_chain for "no limit".
inline constexpr int kNoDurableChainLimit = std::numeric_limits<int>::max();

struct StoreOptions {
  std::string dir;          // local tier, created when missing
  std::string durable_dir;  // durable tier, "" for none
  RetentionPolicy retention;
  // The deepest delta chain a version's durable copy may sit on (>= 0): a
  // delta whose durable copy would sit deeper (its base's durable chain depth
  // + 1) is written there in full instead of copied. Each delta a restart
  // decodes costs about a full version's decode (a 50M-parameter state
  // restarted from the durable tier: 0.20 s at depth 0, 0.50 s at depth 1,
  // 1.05 s at depth 3; docs/benchmarks.md, ckpt section 6), and a materialized copy
  // costs the replicator a decode and an encode in the background, so jobs
  // get 1 (train_spec.h: a restart decodes at most one full version and one
  // delta, while only every other delta is re-encoded). 0 writes every
  // durable copy in full. kNoDurableChainLimit (the default here, for tools
  // and tests of the store itself) copies every version byte for byte.
  int durable_max_chain = kNoDurableChainLimit;
  // A reader (inspection tools): the tier directories are neither created nor
  // cleaned of temporary files (a writer may be using them; a missing one
  // holds no versions), and Write, Replicate and ApplyRetention (other than a
  // dry run) fail with FailedPrecondition.
  bool read_only = false;
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
  // XXH3-64 of the data file's index (its footer's index checksum), which
  // binds every chunk's checksum: with it a restore checks the file through
  // its chunks and index, without a whole-file pass. Absent in manifests
  // written before it existed: those versions are checked by `checksum`.
  std::optional<uint64_t> index_checksum;
  int64_t created_unix_ms = 0;
  int records = 0;
  std::string codecs;       // e.g. "xor-delta:30,shuffle-zstd:2"
  std::string meta_json;    // caller's metadata, a JSON object
  std::vector<Tier> tiers;  // tiers whose copy passed the check (List, Inspect) or was read
};

// The record whose JSON `step` must equal the manifest's step (the trainer's
// counters, train/train_state.h). A version without it, or whose record is
// not a JSON object with an integer `step`, has no step to compare.
inline constexpr std::string_view kStepRecord = "trainer/state";

// How much of a copy the check reads.
enum class CheckDepth {
  // The manifest (parses, is for this id, consistent base and chain depth),
  // the data file (present, the manifest's size, header, index and footer
  // intact, holding this id and base), the base chain (each base passes at
  // this depth in some tier) and the step (kStepRecord, decoded on its own
  // along the chain, holds the manifest's step). Reads each file's index
  // and one small record: cheap enough for listing.
  kQuick,
  // kQuick, plus a complete decode with the base chain, every chunk and
  // record checksum checked, and for a manifest without `index_checksum`
  // the whole-file checksum against the manifest's. (With it, the index the
  // manifest binds covers every chunk, and the header and footer are fixed
  // fields: every byte is checked without a second read of the file.)
  // What Verify, Load and LoadNewestValid use.
  kFull,
};

// The state of one version's copy in one tier, or of a version (its best copy).
enum class CopyState {
  kOk,           // passes the check
  kDamaged,      // has a manifest but fails the check
  kUncommitted,  // a data file without a manifest: a save in progress or
                 // interrupted (never loaded; retention removes old ones)
  kMissing,      // no file of this version in the tier
};
std::string_view CopyStateName(CopyState s);  // "ok", "damaged", "uncommitted", "missing"

struct CopyCheck {
  Tier tier = Tier::kLocal;
  CopyState state = CopyState::kMissing;
  std::string problem;  // for kDamaged and kUncommitted: why, naming the file
};

// What Inspect found about one version.
struct VersionCheck {
  int64_t id = 0;
  // True when some tier's manifest of it parsed: `info` holds its fields
  // (from the first copy that passed, else the first readable manifest), and
  // info.tiers the tiers whose copy passed.
  bool has_info = false;
  VersionInfo info;
  std::vector<CopyCheck> copies;  // one per tier of the store, local first

  // kOk when some copy is ok: the version is usable. Otherwise kDamaged when
  // some copy is damaged, else kUncommitted, else kMissing.
  CopyState state() const;
  bool intact() const { return state() == CopyState::kOk; }
  // "<tier> copy: <problem>" for each damaged or uncommitted copy.
  std::vector<std::string> Problems() const;
};

// What to record with a new version.
struct SaveRequest {
  int64_t step = 0;
  int64_t parent = -1;
  std::string meta_json;  // a JSON object ("" for none)
  CodecPlan plan;
};

// How Replicate writes a version's durable copy.
struct ReplicateOptions {
  CodecPlan plan;      // a materialized copy's records get plan.full
  int zstd_level = 1;  // of a materialized copy's chunks
  // The threads a materialization decodes the local copy on (0: one per
  // core). It runs beside training, whose steps would wait for cores it
  // takes, and its encode runs on one thread: jobs give it one.
  int decode_threads = 1;
  // Read before a materialization's decode and before its encode: when it
  // holds true, the version is copied as it is instead (the fast path in
  // the last seconds before a preemption). May be null.
  const std::atomic<bool>* plain_copy = nullptr;
};

// What Replicate did.
struct ReplicateResult {
  bool materialized = false;    // the durable copy was written in full
  int durable_chain_depth = 0;  // the copy's depth in the durable tier's chain
  uint64_t durable_bytes = 0;   // its data file's size
  double materialize_s = 0;     // decode + encode + write of a materialized copy
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

  // Copies a committed local version to the durable tier (no-op without
  // one): the data file, verified against the manifest's checksum, then the
  // manifest. A delta whose base has no durable copy first gets its base
  // copied. A delta that would sit deeper than options().durable_max_chain
  // in the durable tier's chain is materialized instead (see the top of this
  // file): decoded from the local tier (every check of a full load), encoded
  // in full with `o.plan` (as the writer's full versions), data committed
  // before the manifest. When the copied delta's durable chain depth differs
  // from its local one, the durable manifest says the durable depth.
  Result<ReplicateResult> Replicate(const VersionInfo& v, const ReplicateOptions& o);
  Status Replicate(const VersionInfo& v) { return Replicate(v, ReplicateOptions{}).status(); }

  // Deletes what the retention policy does not keep in one tier; returns the
  // ids deleted (or that would be, with dry_run).
  Result<std::vector<int64_t>> ApplyRetention(Tier tier, bool dry_run = false);

  struct Loaded {
    VersionInfo info;
    Container container;
    std::vector<std::string> skipped;  // why each newer version was passed over
  };
  // Loads the newest version with step < `before_step` that passes the full
  // check in some tier (each decoded once). `skipped` names every copy passed
  // over on the way and why (damaged or uncommitted), newest first; versions
  // whose manifest step is not below `before_step` are not candidates and
  // not reported. NotFound (with the reasons) when there is none. `place`,
  // when given, says where the loaded version's records are decoded
  // (RecordPlacement: a tensor's memory, for a restore without a copy); on
  // failure that memory holds garbage.
  Result<Loaded> LoadNewestValid(int64_t before_step = std::numeric_limits<int64_t>::max(),
                                 const RecordPlacement* place = nullptr) const;

  // Loads version `id` from the first tier whose copy passes the full check;
  // `skipped` gives the copies tried before it. NotFound when no tier has any
  // file of it, DataLoss (with every copy's reason) when none passes.
  Result<Loaded> Load(int64_t id) const;

  // The full check of version `id`'s copy in `tier` (CheckDepth::kFull): OK,
  // DataLoss saying why, NotFound when the tier has no file of it,
  // InvalidArgument for the durable tier of a store without one.
  Status Verify(int64_t id, Tier tier) const;

  // Every version with any file in any tier, newest first, each copy checked
  // at `depth`.
  std::vector<VersionCheck> Inspect(CheckDepth depth) const;
  // One version (every copy kMissing when no tier has it).
  VersionCheck Inspect(int64_t id, CheckDepth depth) const;

  // The usable versions: those Inspect(kQuick) finds ok in some tier, newest
  // first, `tiers` naming the tiers whose copy passed. Damaged and
  // uncommitted versions are in Inspect's answer only.
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
  Status CheckWritable() const;
  // "<dir>" or "<dir> or <durable_dir>", for messages.
  std::string Where() const;

  // A copy that passed the check, with what the check read.
  struct Checked {
    VersionInfo info;                        // info.tiers = {the copy's tier}
    std::optional<std::string> step_record;  // kStepRecord's bytes, if it has one
    Container container;                     // the decoded state (kFull only)
  };
  // The one check of version `id`'s copy in `tier` (see CheckDepth).
  // `chain` counts the deltas above this one (a guard against cycles).
  // `place` applies to a kFull check's decoded state (not to its bases').
  // A kFull check decodes on up to `threads` threads (0: one per core).
  Result<Checked> CheckCopy(Tier tier, int64_t id, CheckDepth depth, int chain,
                            const RecordPlacement* place = nullptr, int threads = 0) const;
  // For the full check of delta `v` (its file `top`): its whole base chain
  // decoded in one pass, each base the first copy whose manifest and data
  // file pass, every check of CheckCopy made (checksums, steps, chunks).
  // Any error means only that this shortcut failed.
  Result<Container> DecodeChain(const CheckpointFile& top, const VersionInfo& v, int chain,
                                const RecordPlacement* place, int threads) const;
  // The first copy of `id`, in tier order, that passes; the problems of
  // those before it (and of all, on failure) are appended to `why`.
  Result<Checked> CheckAnyCopy(int64_t id, CheckDepth depth, int chain,
                               std::vector<std::string>* why,
                               const RecordPlacement* place = nullptr, int threads = 0) const;
  // The state of every tier's copy of `id`; fills `out`.
  void InspectInto(int64_t id, CheckDepth depth, VersionCheck* out) const;

  // Replicate's parts (replicate.cc). The chain depth `v`'s durable copy
  // would have as a plain copy; kNoDurableChainLimit when its base's
  // durable manifest is unreadable.
  int DurableDepth(const VersionInfo& v) const;
  // Copies `v`'s data and manifest as they are (the manifest saying
  // `durable_depth` when that differs from v.chain_depth).
  Status CopyVersion(const VersionInfo& v, int durable_depth);
  // Writes `v`'s durable copy in full; false (nothing written) when
  // o.plain_copy asked for a plain copy before the encode began.
  Result<bool> Materialize(const VersionInfo& v, const ReplicateOptions& o, ReplicateResult* out);
  // Raises replicated_upto_ to `id`.
  void NoteReplicated(int64_t id);

  StoreOptions opt_;
  std::unique_ptr<BlobStore> tiers_[2];
  std::mutex id_mu_;
  int64_t next_id_ = 1;
  std::atomic<int64_t> replicated_upto_{0};  // highest id copied to the durable tier
};

}  // namespace spot::ckpt
