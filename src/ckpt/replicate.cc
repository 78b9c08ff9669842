// CheckpointStore::Replicate: a version's durable copy, copied as it is, or
// for a delta that would sit too deep in the durable tier's chain, decoded
// and written in full (store.h).
#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <chrono>
#include <nlohmann/json.hpp>

#include "ckpt/store.h"

namespace spot::ckpt {
namespace {

using nlohmann::json;
using SteadyClock = std::chrono::steady_clock;

std::string Xxh3(uint64_t sum) { return fmt::format("xxh3-64:{:016x}", sum); }

bool PlainCopyAsked(const ReplicateOptions& o) { return o.plain_copy && o.plain_copy->load(); }

// The local manifest of version `id` as JSON, to be edited into the durable
// one: the fields the tiers share (id, step, parent, creation time, metadata,
// and any this build does not know) stay as they are.
Result<json> ManifestObject(const BlobStore& local, const std::string& name) {
  SPOT_ASSIGN_OR_RETURN(std::string text, local.Read(name));
  json j = json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (!j.is_object()) return DataLossError(local.Describe(name) + ": malformed manifest");
  return j;
}

// The written full file against the local one it re-encodes: the same
// records (name, dtype, shape, size, decoded checksum), in the same order.
Status SameRecords(const CheckpointFile& full, const CheckpointFile& local) {
  const std::vector<RecordEntry>& a = full.records();
  const std::vector<RecordEntry>& b = local.records();
  if (a.size() != b.size()) {
    return DataLossError(fmt::format("{}: {} records, {} has {}", full.source(), a.size(),
                                     local.source(), b.size()));
  }
  for (size_t i = 0; i < a.size(); ++i) {
    if (a[i].name != b[i].name || a[i].dtype != b[i].dtype || a[i].shape != b[i].shape ||
        a[i].raw_bytes != b[i].raw_bytes || a[i].raw_checksum != b[i].raw_checksum) {
      return DataLossError(fmt::format("{}: record {} ({}) is not {}'s record {}", full.source(), i,
                                       a[i].name, local.source(), b[i].name));
    }
  }
  return Status::Ok();
}

}  // namespace

void CheckpointStore::NoteReplicated(int64_t id) {
  int64_t prev = replicated_upto_.load();
  while (prev < id && !replicated_upto_.compare_exchange_weak(prev, id)) {
  }
}

int CheckpointStore::DurableDepth(const VersionInfo& v) const {
  if (v.base < 0) return 0;
  // Durable manifests hold durable depths (CopyVersion, Materialize).
  auto base = ReadManifest(Tier::kDurable, v.base);
  if (!base.ok() || base->chain_depth >= kNoDurableChainLimit - 1) return kNoDurableChainLimit;
  return base->chain_depth + 1;
}

Result<ReplicateResult> CheckpointStore::Replicate(const VersionInfo& v,
                                                   const ReplicateOptions& o) {
  SPOT_RETURN_IF_ERROR(CheckWritable());
  ReplicateResult out;
  if (!has_durable()) return out;
  BlobStore& durable = *store(Tier::kDurable);
  // A delta is useless in the durable tier without its base: first copy a
  // base whose own copy failed (or never happened). Bases have lower ids, so
  // this ends.
  if (v.base >= 0 && v.base < v.id && !durable.Size(ManifestFileName(v.base)).ok()) {
    auto base = ReadManifest(Tier::kLocal, v.base);
    if (!base.ok()) {
      return base.status().WithContext(
          fmt::format("replicating checkpoint {}: its base is in neither tier", v.id));
    }
    SPOT_RETURN_IF_ERROR(Replicate(*base, o).status());
  }
  const int depth = DurableDepth(v);
  if (v.base >= 0 && depth > opt_.durable_max_chain && !PlainCopyAsked(o)) {
    Result<bool> done = Materialize(v, o, &out);
    if (done.ok() && *done) {
      NoteReplicated(v.id);
      return out;
    }
    // A plain copy keeps the durable tier complete; one of a local copy that
    // fails its checks fails too (its checksum), saying why.
    if (!done.ok()) spdlog::warn("{}; copying it as it is", done.status().message());
    out = ReplicateResult{};
  }
  // An unknown depth (the base's durable manifest unreadable): the local one.
  out.durable_chain_depth = depth == kNoDurableChainLimit ? v.chain_depth : depth;
  out.durable_bytes = v.file_bytes;
  SPOT_RETURN_IF_ERROR(CopyVersion(v, out.durable_chain_depth));
  NoteReplicated(v.id);
  return out;
}

Status CheckpointStore::CopyVersion(const VersionInfo& v, int durable_depth) {
  BlobStore& local = *store(Tier::kLocal);
  BlobStore& durable = *store(Tier::kDurable);
  const std::string data = DataFileName(v.id);
  SPOT_ASSIGN_OR_RETURN(uint64_t sum, CopyBlob(local, durable, data));
  if (sum != v.checksum) {
    (void)durable.Delete(data);
    return DataLossError(fmt::format(
        "{}: not copied to the durable tier: its checksum {:016x} is not the manifest's {:016x} "
        "(the file changed since it was saved, or the manifest's checksum is wrong)",
        local.Describe(data), sum, v.checksum));
  }
  const std::string manifest = ManifestFileName(v.id);
  if (durable_depth == v.chain_depth) return CopyBlob(local, durable, manifest).status();
  // A base in the durable chain is materialized: this delta's durable chain
  // is shorter than its local one, and its durable manifest says so.
  SPOT_ASSIGN_OR_RETURN(json m, ManifestObject(local, manifest));
  m["chain_depth"] = durable_depth;
  return durable.Put(manifest, m.dump(2) + "\n");
}

Result<bool> CheckpointStore::Materialize(const VersionInfo& v, const ReplicateOptions& o,
                                          ReplicateResult* out) {
  const auto t0 = SteadyClock::now();
  BlobStore& local = *store(Tier::kLocal);
  BlobStore& durable = *store(Tier::kDurable);
  const std::string data = DataFileName(v.id), manifest = ManifestFileName(v.id);
  const std::string what = fmt::format("writing checkpoint {}'s durable copy in full", v.id);
  // The local copy with its chain, every check of a full load made (bases
  // from whichever tier has a good copy, as a restore takes them).
  auto checked = CheckCopy(Tier::kLocal, v.id, CheckDepth::kFull, 0, nullptr, o.decode_threads);
  if (!checked.ok()) return checked.status().WithContext(what);
  if (checked->info.checksum != v.checksum || checked->info.base != v.base) {
    return DataLossError(fmt::format(
        "{}: {} is not the version that was saved (checksum {:016x}, base {}; saved {:016x}, base "
        "{})",
        what, local.Describe(manifest), checked->info.checksum, checked->info.base, v.checksum,
        v.base));
  }
  if (PlainCopyAsked(o)) return false;
  SPOT_ASSIGN_OR_RETURN(CheckpointFile local_file, CheckpointFile::Open(local, data));
  SPOT_ASSIGN_OR_RETURN(json m, ManifestObject(local, manifest));

  // Data first: nothing refers to it until the manifest is committed.
  ChunkCodec codec(o.zstd_level);
  SPOT_ASSIGN_OR_RETURN(std::unique_ptr<BlobWriter> w, durable.Create(data));
  // No reference: nothing is deltaed against this copy, so no second copy of
  // the state is made.
  auto written = WriteCheckpointFile(checked->container, o.plan, nullptr, v.id, -1, codec, *w);
  if (!written.ok()) return written.status().WithContext(what);
  SPOT_RETURN_IF_ERROR(w->Commit().WithContext(what));
  w.reset();
  checked->container.Clear();
  auto committed = CheckpointFile::Open(durable, data);
  Status same = committed.ok() ? SameRecords(*committed, local_file) : committed.status();
  if (same.ok() && (committed->index_checksum() != written->index_checksum ||
                    committed->file_bytes() != written->file_bytes || committed->base_id() != -1)) {
    same = DataLossError(durable.Describe(data) + ": not the file just written");
  }
  if (!same.ok()) {
    (void)durable.Delete(data);
    return same.WithContext(what);
  }

  m["format_version"] = kFormatVersion;
  m["base"] = -1;
  m["chain_depth"] = 0;
  m["file_bytes"] = written->file_bytes;
  m["payload_bytes"] = written->payload_bytes;
  m["records"] = written->records;
  m["codecs"] = written->codecs;
  m["checksum"] = Xxh3(written->checksum);
  m["index_checksum"] = Xxh3(written->index_checksum);
  m["materialized_from"] = {{"base", v.base}, {"chain_depth", v.chain_depth}};
  SPOT_RETURN_IF_ERROR(durable.Put(manifest, m.dump(2) + "\n").WithContext(what));
  // The committed copy passes the check every reader makes.
  if (auto c = CheckCopy(Tier::kDurable, v.id, CheckDepth::kQuick, 0); !c.ok()) {
    (void)durable.Delete(manifest);
    (void)durable.Delete(data);
    return c.status().WithContext(what);
  }
  out->materialized = true;
  out->durable_chain_depth = 0;
  out->durable_bytes = written->file_bytes;
  out->materialize_s = std::chrono::duration<double>(SteadyClock::now() - t0).count();
  spdlog::info(
      "checkpoint {}: durable copy written in full (chain depth {} locally), {:.1f} MB in {:.2f} s",
      v.id, v.chain_depth, static_cast<double>(written->file_bytes) / 1e6, out->materialize_s);
  return true;
}

}  // namespace spot::ckpt
