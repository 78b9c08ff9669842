// Checkpoint file format v3 (docs/checkpoint-format.md): a header, the
// records' chunks as the codecs stored them, then an index (record name,
// dtype, shape, codec, raw size and checksum, each chunk's offset, size and
// checksum) and a footer locating the index. The index comes last so a writer
// streams chunks out as it encodes them. Every byte of a file is covered by a
// check: the header and footer by their fixed fields, chunks by their
// checksums and by tiling the space between header and index exactly, the
// index by its checksum; decoded records by their raw checksum.
//
// Version 3 differs from 2 in two rules: a chunk whose stored size equals its
// raw size is stored as is, whatever its record's codec (the writer stores a
// chunk so when its codec would save too little, CodecPlan::raw_below_saving),
// and no chunk is stored larger than its raw size; and the footer's index
// checksum covers the header too (IndexChecksum), so the header's version,
// which says which rule applies, is bound. Readers read both.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "ckpt/blob_store.h"
#include "ckpt/codec.h"
#include "ckpt/container.h"
#include "core/status.h"

namespace spot::ckpt {

inline constexpr std::string_view kMagic = "SPOTCKPT";
inline constexpr std::string_view kFooterMagic = "SPOTEND2";
inline constexpr uint32_t kFormatVersion = 3;        // what WriteCheckpointFile writes
inline constexpr uint32_t kOldestFormatVersion = 2;  // the oldest a reader reads
inline constexpr size_t kHeaderBytes = 16;
inline constexpr size_t kFooterBytes = 32;

// Which codec each record gets.
struct CodecPlan {
  Codec full = Codec::kPlanesZstd;  // records written whole: raw | shuffle-zstd | planes-zstd
  Codec delta = Codec::kSubDelta;   // records with a base: sub-delta | xor-delta | q8-delta
  // q8-delta is lossy: by default only model/ records get it, optimizer state
  // ("optim/" records) falls back to this lossless delta unless
  // q8_optimizer_state is set; so do records q8-delta cannot encode.
  Codec lossless_delta = Codec::kSubDelta;  // sub-delta | xor-delta
  bool q8_optimizer_state = false;
  // A chunk is stored as is (read straight into its destination, hashed
  // once) when its codec would save less than this fraction of its raw
  // bytes; always when it would save nothing. In [0, 1).
  double raw_below_saving = 0.05;
};

// The footer's index checksum of a file whose header is `header` (its first
// kHeaderBytes): XXH3-64 of the index, in format 3 of the header and index.
uint64_t IndexChecksum(std::string_view header, std::string_view index);

struct WrittenFile {
  uint64_t file_bytes = 0;
  uint64_t payload_bytes = 0;   // raw bytes of the records
  uint64_t checksum = 0;        // XXH3-64 of the whole file
  uint64_t index_checksum = 0;  // IndexChecksum (the footer holds it too)
  int records = 0;
  int raw_chunks = 0;  // chunks stored as is (codec raw, or a codec that saved too little)
  int delta_records = 0;
  std::string codecs;  // e.g. "sub-delta:30,planes-zstd:2"
};

// Writes `c` as version `id` to `out` (not committed: the caller commits).
// `reference` is the state of the version this one is a delta against (its
// id is `base_id`), or empty for a full version; null for a full version
// written once, whose state no next delta needs (nothing is copied). Records found in it with the
// same dtype and shape are delta-encoded with plan.delta; the rest with
// plan.full. On success `*reference` holds exactly the state a reader decodes
// from this file (the snapshot's values, or for q8-delta records their
// reconstruction), ready to be the reference of the next version; its storage
// is reused. On failure `*reference` is unspecified: clear it.
// Sets each record's checksum in `c`.
Result<WrittenFile> WriteCheckpointFile(Container& c, const CodecPlan& plan, Container* reference,
                                        int64_t id, int64_t base_id, ChunkCodec& codec,
                                        BlobWriter& out);

struct ChunkRef {
  uint64_t offset = 0;
  uint64_t stored_bytes = 0;
  uint64_t checksum = 0;
};

struct RecordEntry {
  std::string name;
  DType dtype = DType::kU8;
  Codec codec = Codec::kRaw;
  std::vector<int64_t> shape;
  uint64_t raw_bytes = 0;
  uint64_t raw_checksum = 0;
  std::vector<ChunkRef> chunks;

  uint64_t stored_bytes() const;
};

// Where a reader decodes the records of the version it returns, instead of
// memory of its own: for a record, memory of exactly its raw size (the
// record then shares it: Container::SharedOwner is `owner`), or an empty
// SharedMemory for the reader's own. A tensor's memory, so that a restore
// needs no copy. Called from the decoding threads at once: must be
// thread-safe. When the read fails, the memory it was given holds garbage.
using RecordPlacement = std::function<SharedMemory(const RecordEntry&)>;

// An opened file: header, footer and index read and checked; chunks are read
// on demand.
class CheckpointFile {
 public:
  // DataLoss naming the blob for anything malformed.
  static Result<CheckpointFile> Open(const BlobStore& store, const std::string& name);

  int64_t id() const { return id_; }
  int64_t base_id() const { return base_id_; }  // -1 for a full version
  uint64_t file_bytes() const { return file_bytes_; }
  uint32_t format_version() const { return version_; }
  // The index's checksum, as the footer holds it (Open checked the index
  // against it): binds every chunk's offset, size and checksum.
  uint64_t index_checksum() const { return index_checksum_; }
  // Whether chunk k of record `e` is stored as is (its bytes are the decoded
  // ones): codec raw, or in format 3 a chunk stored at its raw size.
  bool StoredRaw(const RecordEntry& e, size_t k) const;
  const std::vector<RecordEntry>& records() const { return records_; }
  const std::string& source() const { return source_; }

  // Decodes record i into `dst` (its raw size). For a delta record `dst`
  // holds the base version's bytes of the same record on entry. Checks each
  // chunk's checksum and the decoded bytes' checksum.
  Status ReadRecord(size_t i, std::span<char> dst, ChunkCodec& codec) const;

  // Decodes every record into a new Container. `base` is the decoded base
  // version (required when base_id() >= 0); its storage is taken over.
  // Records are decoded in parallel on up to `threads` threads (0: one per
  // core, fewer for a small file; `codec` serves the calling thread, the
  // others make their own), each
  // record's chunks read, checked and decoded in order, and its raw checksum
  // taken while they are still in cache. The result, and which error is
  // returned for a damaged file, do not depend on the thread count.
  // `place`, when given, says where records go (see RecordPlacement).
  Result<Container> ReadAll(Container* base, ChunkCodec& codec, int threads = 0,
                            const RecordPlacement* place = nullptr) const;

  // Decodes a delta chain in one pass: chain[0] is the oldest file (a full
  // version, or a delta against `base`, the decoded state of its base
  // version), and each later file a delta against the one before
  // (chain[i]->base_id() == chain[i-1]->id()). Returns the newest version's
  // state, the same Container that ReadAll file after file would give. Each
  // chunk goes through every version of the chain while it is in cache, records
  // in parallel as in ReadAll; every chunk checksum and every version's raw
  // checksum is checked, including records of an older version that no newer
  // one uses. FailedPrecondition for files that are not a chain.
  static Result<Container> ReadChain(std::span<const CheckpointFile* const> chain, Container* base,
                                     ChunkCodec& codec, int threads = 0,
                                     const RecordPlacement* place = nullptr);

 private:
  friend class ChainReader;
  CheckpointFile() = default;
  Status Parse(std::string_view index);

  std::shared_ptr<const BlobReader> reader_;  // the file, open (every read goes through it)
  std::string source_;
  int64_t id_ = 0, base_id_ = -1;
  uint64_t file_bytes_ = 0, index_checksum_ = 0;
  uint32_t version_ = kFormatVersion;
  uint32_t chunk_bytes_ = 0;
  std::vector<RecordEntry> records_;
  mutable std::string chunk_buf_;
};

}  // namespace spot::ckpt
