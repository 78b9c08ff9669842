#include "ckpt/store.h"

#include <fmt/format.h>
#include <spdlog/spdlog.h>
#include <xxhash.h>
#if defined(__x86_64__)
// XXH3 on the widest vectors the CPU has (AVX2, AVX-512), chosen at run time:
// the same hashes, 1.7x the speed of the baseline SSE2 build here.
#include <xxh_x86dispatch.h>
#endif

#include <algorithm>
#include <charconv>
#include <chrono>
#include <future>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <system_error>

#include "ckpt/s3_blob_store.h"
#include "core/clock.h"
#include "core/strict_json.h"

namespace spot::ckpt {
namespace {

using nlohmann::json;

constexpr std::string_view kManifestFormat = "spot-checkpoint";
constexpr int kMaxChainDepth = 1000;

std::string ManifestJson(const VersionInfo& v, const json& meta) {
  json m = {{"format", kManifestFormat},
            {"format_version", kFormatVersion},
            {"id", v.id},
            {"step", v.step},
            {"parent", v.parent},
            {"base", v.base},
            {"chain_depth", v.chain_depth},
            {"file", CheckpointStore::DataFileName(v.id)},
            {"file_bytes", v.file_bytes},
            {"payload_bytes", v.payload_bytes},
            {"records", v.records},
            {"codecs", v.codecs},
            {"checksum", fmt::format("xxh3-64:{:016x}", v.checksum)},
            {"created_unix_ms", v.created_unix_ms},
            {"meta", meta}};
  if (v.index_checksum) m["index_checksum"] = fmt::format("xxh3-64:{:016x}", *v.index_checksum);
  return m.dump(2) + "\n";
}

// True when `name` is certainly not in `bs` (other errors count as present:
// the read that follows reports them).
bool Absent(const BlobStore& bs, const std::string& name) {
  auto size = bs.Size(name);
  return !size.ok() && size.status().code() == StatusCode::kNotFound;
}

// XXH3-64 of the first `size` bytes of blob `name`, read in pieces small
// enough to be hashed while still in cache (1 MiB hashed a page-cached file
// about 20% faster than 8 MiB).
Result<uint64_t> BlobChecksum(const BlobStore& bs, const std::string& name, uint64_t size) {
  std::unique_ptr<XXH3_state_t, decltype(&XXH3_freeState)> st(XXH3_createState(), &XXH3_freeState);
  XXH3_64bits_reset(st.get());
  std::string buf(std::min<uint64_t>(size, 1 << 20), '\0');
  for (uint64_t off = 0; off < size;) {
    size_t n = static_cast<size_t>(std::min<uint64_t>(buf.size(), size - off));
    SPOT_RETURN_IF_ERROR(bs.ReadInto(name, off, std::span<char>(buf.data(), n)));
    XXH3_64bits_update(st.get(), buf.data(), n);
    off += n;
  }
  return XXH3_64bits_digest(st.get());
}

// Opens version v's data file and checks that it is the file its manifest
// describes: present, holding the same version and base, of the same size.
Result<CheckpointFile> OpenData(const BlobStore& bs, const VersionInfo& v) {
  const std::string name = CheckpointStore::DataFileName(v.id);
  auto size = bs.Size(name);
  if (!size.ok()) {
    if (size.status().code() == StatusCode::kNotFound) {
      return DataLossError(
          fmt::format("{}: missing, though its manifest is there", bs.Describe(name)));
    }
    return size.status();
  }
  auto f = CheckpointFile::Open(bs, name);
  if (f.ok() && (f->id() != v.id || f->base_id() != v.base)) {
    return DataLossError(fmt::format(
        "{}: holds version {} (base {}), its manifest says version {} (base {}): files swapped "
        "or renamed?",
        f->source(), f->id(), f->base_id(), v.id, v.base));
  }
  if (*size != v.file_bytes) {
    return DataLossError(fmt::format("{}: {} bytes, manifest says {} (truncated?)",
                                     bs.Describe(name), *size, v.file_bytes));
  }
  if (f.ok() && v.index_checksum && *v.index_checksum != f->index_checksum()) {
    return DataLossError(
        fmt::format("{}: index checksum {:016x} does not match the manifest's {:016x} (another "
                    "save's file, or a damaged manifest)",
                    f->source(), f->index_checksum(), *v.index_checksum));
  }
  return f;
}

// A step record larger than this is not the trainer's counters: not checked.
constexpr uint64_t kMaxStepRecordBytes = 1 << 20;

// kStepRecord of file `f`, decoded on its own (chunk and record checksums
// checked); `base` is the base version's record, for a delta. None when the
// file has no such record.
Result<std::optional<std::string>> ReadStepRecord(const CheckpointFile& f,
                                                  const std::optional<std::string>& base) {
  const std::vector<RecordEntry>& recs = f.records();
  for (size_t i = 0; i < recs.size(); ++i) {
    if (recs[i].name != kStepRecord) continue;
    if (recs[i].raw_bytes > kMaxStepRecordBytes) return std::optional<std::string>();
    std::string bytes(recs[i].raw_bytes, '\0');
    if (IsDelta(recs[i].codec)) {
      if (!base || base->size() != bytes.size()) {
        return DataLossError(
            fmt::format("{}: record {} is a delta, and its base version has no record of its size",
                        f.source(), kStepRecord));
      }
      bytes = *base;
    }
    ChunkCodec codec;
    SPOT_RETURN_IF_ERROR(f.ReadRecord(i, std::span<char>(bytes.data(), bytes.size()), codec));
    return std::optional<std::string>(std::move(bytes));
  }
  return std::optional<std::string>();
}

// An "xxh3-64:<16 hex digits>" field of a manifest; throws otherwise.
uint64_t Xxh3Field(const json& j, const char* key) {
  const std::string sum = j.at(key).get<std::string>();
  uint64_t v = 0;
  if (sum.starts_with("xxh3-64:") && sum.size() == 8 + 16) {
    auto [end, ec] = std::from_chars(sum.data() + 8, sum.data() + sum.size(), v, 16);
    if (ec == std::errc() && end == sum.data() + sum.size()) return v;
  }
  throw std::runtime_error(fmt::format("{} is not xxh3-64:<16 hex digits>", key));
}

// Integer field `key` of a manifest, in [lo, hi]; throws (the reader reports
// a malformed manifest) for anything else, a float above all: nlohmann's
// get<int64_t>() casts it, undefined when it is out of range.
int64_t Int(const json& j, const char* key, int64_t lo, int64_t hi) {
  Result<int64_t> v = JsonInt64(j.at(key));
  if (!v.ok()) throw std::runtime_error(fmt::format("{}: {}", key, v.status().message()));
  if (*v < lo || *v > hi) {
    throw std::runtime_error(fmt::format("{}: {} is out of range [{}, {}]", key, *v, lo, hi));
  }
  return *v;
}

// The manifest's step against the one the data holds (kStepRecord's `step`).
Status CheckStep(const std::string& source, int64_t manifest_step,
                 const std::optional<std::string>& record) {
  if (!record || record->size() > kMaxStepRecordBytes) return Status::Ok();
  json j = json::parse(*record, nullptr, /*allow_exceptions=*/false);
  if (!j.is_object()) return Status::Ok();
  auto it = j.find("step");
  if (it == j.end() || !it->is_number_integer()) return Status::Ok();
  const int64_t step = it->get<int64_t>();
  if (step == manifest_step) return Status::Ok();
  return DataLossError(fmt::format("{}: holds step {} (its {} record), the manifest says step {}",
                                   source, step, kStepRecord, manifest_step));
}

}  // namespace

std::string_view TierName(Tier t) { return t == Tier::kLocal ? "local" : "durable"; }

std::string CheckpointStore::DataFileName(int64_t id) { return fmt::format("ckpt-{:06}.bin", id); }
std::string CheckpointStore::ManifestFileName(int64_t id) {
  return fmt::format("ckpt-{:06}.json", id);
}

int64_t CheckpointStore::ParseId(const std::string& name) {
  constexpr std::string_view kPrefix = "ckpt-";
  std::string_view ext = name.ends_with(".bin") ? ".bin" : name.ends_with(".json") ? ".json" : "";
  if (ext.empty() || !name.starts_with(kPrefix)) return -1;
  std::string digits = name.substr(kPrefix.size(), name.size() - kPrefix.size() - ext.size());
  if (digits.empty() || digits.size() > 15 ||
      !std::all_of(digits.begin(), digits.end(), ::isdigit)) {
    return -1;
  }
  return std::stoll(digits);
}

Result<std::unique_ptr<CheckpointStore>> CheckpointStore::Open(StoreOptions options) {
  if (options.dir.empty()) return InvalidArgumentError("checkpoint directory is empty");
  if (options.retention.keep_last < 1) return InvalidArgumentError("keep_last must be >= 1");
  if (options.durable_max_chain < 0) {
    return InvalidArgumentError(
        fmt::format("durable_max_chain must be >= 0 (got {})", options.durable_max_chain));
  }
  if (options.durable_dir == options.dir) {
    return InvalidArgumentError("the durable tier must be another directory than " + options.dir);
  }
  std::unique_ptr<CheckpointStore> s(new CheckpointStore(options));
  auto open_tier = [&](const std::string& dir) {
    return options.read_only ? DirectoryBlobStore::OpenShared(dir) : DirectoryBlobStore::Open(dir);
  };
  SPOT_ASSIGN_OR_RETURN(s->tiers_[0], open_tier(options.dir));
  if (!options.durable_dir.empty()) {
    // A directory, or an S3 bucket for "s3://bucket/prefix".
    SPOT_ASSIGN_OR_RETURN(s->tiers_[1], OpenTierStore(options.durable_dir, options.read_only));
    std::vector<int64_t> durable = s->Ids(Tier::kDurable);
    if (!durable.empty()) s->replicated_upto_ = durable.back();
  }
  for (Tier t : s->Tiers()) {
    std::vector<int64_t> ids = s->Ids(t);
    if (!ids.empty()) s->next_id_ = std::max(s->next_id_, ids.back() + 1);
  }
  return s;
}

std::string CheckpointStore::Where() const {
  return opt_.dir + (has_durable() ? " or " + opt_.durable_dir : "");
}

Status CheckpointStore::CheckWritable() const {
  if (!opt_.read_only) return Status::Ok();
  return FailedPreconditionError(opt_.dir + ": the checkpoint store is open for reading only");
}

std::vector<Tier> CheckpointStore::Tiers() const {
  if (has_durable()) return {Tier::kLocal, Tier::kDurable};
  return {Tier::kLocal};
}

int64_t CheckpointStore::ReserveId() {
  std::lock_guard<std::mutex> lock(id_mu_);
  return next_id_++;
}

std::vector<int64_t> CheckpointStore::Ids(Tier tier) const {
  std::set<int64_t> ids;
  auto names = store(tier)->List();
  if (names.ok()) {
    for (const std::string& n : *names) {
      int64_t id = ParseId(n);
      if (id >= 0) ids.insert(id);
    }
  }
  return {ids.begin(), ids.end()};
}

bool CheckpointStore::Empty() const {
  for (Tier t : Tiers()) {
    if (!Ids(t).empty()) return false;
  }
  return true;
}

Result<VersionInfo> CheckpointStore::ReadManifest(Tier tier, int64_t id) const {
  const BlobStore& bs = *store(tier);
  std::string path = bs.Describe(ManifestFileName(id));
  auto text = bs.Read(ManifestFileName(id));
  if (!text.ok()) {
    if (text.status().code() == StatusCode::kNotFound) {
      return DataLossError(fmt::format("{}: no manifest (an interrupted save, or it was deleted)",
                                       bs.Describe(DataFileName(id))));
    }
    return text.status();
  }
  VersionInfo v;
  v.id = id;
  v.tiers = {tier};
  try {
    json j = json::parse(*text);
    if (j.at("format") != kManifestFormat) {
      throw std::runtime_error("format is not " + std::string(kManifestFormat));
    }
    if (const int64_t fv = Int(j, "format_version", 0, UINT32_MAX);
        fv < kOldestFormatVersion || fv > kFormatVersion) {
      throw std::runtime_error(
          fmt::format("format_version {} is not supported (this build reads "
                      "{} to {})",
                      fv, kOldestFormatVersion, kFormatVersion));
    }
    if (const int64_t named = Int(j, "id", 0, INT64_MAX); named != id) {
      throw std::runtime_error(
          fmt::format("id {} does not match the file name's {} (renamed or swapped?)", named, id));
    }
    v.step = Int(j, "step", 0, INT64_MAX);
    v.parent = Int(j, "parent", -1, INT64_MAX);
    v.base = Int(j, "base", -1, INT64_MAX);
    v.chain_depth = static_cast<int>(Int(j, "chain_depth", 0, INT32_MAX));
    v.file_bytes = static_cast<uint64_t>(Int(j, "file_bytes", 0, INT64_MAX));
    v.payload_bytes = static_cast<uint64_t>(Int(j, "payload_bytes", 0, INT64_MAX));
    v.records = static_cast<int>(Int(j, "records", 0, INT32_MAX));
    v.codecs = j.at("codecs").get<std::string>();
    v.checksum = Xxh3Field(j, "checksum");
    if (j.contains("index_checksum")) v.index_checksum = Xxh3Field(j, "index_checksum");
    v.created_unix_ms = Int(j, "created_unix_ms", INT64_MIN, INT64_MAX);
    v.meta_json = j.value("meta", json::object()).dump();
    if (v.base >= id || v.base < -1 || (v.base >= 0) != (v.chain_depth > 0)) {
      throw std::runtime_error(
          fmt::format("base {} / chain_depth {} are inconsistent", v.base, v.chain_depth));
    }
  } catch (const std::exception& e) {
    return DataLossError(fmt::format("{}: malformed manifest: {}", path, e.what()));
  }
  return v;
}

Result<VersionInfo> CheckpointStore::Write(int64_t id, Container& c, Container* reference,
                                           int64_t base_id, int chain_depth, const SaveRequest& req,
                                           ChunkCodec& codec) {
  SPOT_RETURN_IF_ERROR(CheckWritable());
  json meta;
  try {
    meta = req.meta_json.empty() ? json::object() : json::parse(req.meta_json);
  } catch (const std::exception& e) {
    return InvalidArgumentError(std::string("checkpoint metadata is not JSON: ") + e.what());
  }
  BlobStore& local = *store(Tier::kLocal);
  VersionInfo v;
  v.id = id;
  v.step = req.step;
  v.parent = req.parent;
  v.created_unix_ms = RealClock()->NowUnixMs();
  v.meta_json = meta.dump();
  v.tiers = {Tier::kLocal};
  SPOT_ASSIGN_OR_RETURN(std::unique_ptr<BlobWriter> w, local.Create(DataFileName(id)));
  auto written = WriteCheckpointFile(c, req.plan, reference, id, base_id, codec, *w);
  if (!written.ok()) return written.status().WithContext("saving checkpoint " + std::to_string(id));
  SPOT_RETURN_IF_ERROR(w->Commit().WithContext("saving checkpoint"));
  v.base = written->delta_records > 0 ? base_id : -1;
  v.chain_depth = v.base >= 0 ? chain_depth : 0;
  v.file_bytes = written->file_bytes;
  v.payload_bytes = written->payload_bytes;
  v.checksum = written->checksum;
  v.index_checksum = written->index_checksum;
  v.records = written->records;
  v.codecs = written->codecs;
  SPOT_RETURN_IF_ERROR(
      local.Put(ManifestFileName(id), ManifestJson(v, meta)).WithContext("saving checkpoint"));
  return v;
}

Result<VersionInfo> CheckpointStore::Save(Container& c, const SaveRequest& req) {
  ChunkCodec codec;
  Container reference;
  SPOT_ASSIGN_OR_RETURN(VersionInfo v, Write(ReserveId(), c, &reference, -1, 0, req, codec));
  // The caller waits: a materialization decodes on every core.
  SPOT_RETURN_IF_ERROR(Replicate(v, {.plan = req.plan, .decode_threads = 0}).status());
  for (Tier t : Tiers()) SPOT_RETURN_IF_ERROR(ApplyRetention(t).status());
  return v;
}

Result<std::vector<int64_t>> CheckpointStore::ApplyRetention(Tier tier, bool dry_run) {
  if (!dry_run) SPOT_RETURN_IF_ERROR(CheckWritable());
  BlobStore& bs = *store(tier);
  const RetentionPolicy& p = opt_.retention;
  std::vector<int64_t> ids = Ids(tier);
  std::map<int64_t, VersionInfo> committed;
  for (int64_t id : ids) {
    auto v = ReadManifest(tier, id);
    if (v.ok()) committed.emplace(id, std::move(v).value());
  }
  std::set<int64_t> keep;
  int n = 0;
  for (auto it = committed.rbegin(); it != committed.rend() && n < p.keep_last; ++it, ++n) {
    keep.insert(it->first);
  }
  for (const auto& [id, v] : committed) {
    if (p.keep_every > 0 && id % p.keep_every == 0) keep.insert(id);
    if (tier == Tier::kLocal && has_durable() && id > replicated_upto_.load()) keep.insert(id);
  }
  if (!p.best_metric.empty() && p.keep_best > 0) {
    std::vector<std::pair<double, int64_t>> scored;
    for (const auto& [id, v] : committed) {
      json meta = json::parse(v.meta_json, nullptr, false);
      if (meta.is_object() && meta.contains(p.best_metric) && meta[p.best_metric].is_number()) {
        double x = meta[p.best_metric].get<double>();
        scored.emplace_back(p.best_higher ? -x : x, id);
      }
    }
    std::sort(scored.begin(), scored.end());
    for (size_t i = 0; i < scored.size() && i < static_cast<size_t>(p.keep_best); ++i) {
      keep.insert(scored[i].second);
    }
  }
  // A kept delta needs its whole base chain.
  std::vector<int64_t> todo(keep.begin(), keep.end());
  while (!todo.empty()) {
    int64_t id = todo.back();
    todo.pop_back();
    auto it = committed.find(id);
    if (it != committed.end() && it->second.base >= 0 && keep.insert(it->second.base).second) {
      todo.push_back(it->second.base);
    }
  }
  int64_t newest = committed.empty() ? -1 : committed.rbegin()->first;
  std::vector<int64_t> dropped;
  // Newest first: a delta goes before its base, so a crash part-way leaves no
  // visible version whose base is gone (the fault campaign caught the
  // opposite order doing exactly that).
  for (auto it = ids.rbegin(); it != ids.rend(); ++it) {
    const int64_t id = *it;
    if (keep.count(id)) continue;
    // A file without a readable manifest newer than every committed version
    // may be a save in progress: leave it.
    if (!committed.count(id) && id > newest) continue;
    dropped.push_back(id);
    if (dry_run) continue;
    // Manifest first: a version without its manifest is never loaded.
    SPOT_RETURN_IF_ERROR(bs.Delete(ManifestFileName(id)));
    SPOT_RETURN_IF_ERROR(bs.Delete(DataFileName(id)));
  }
  std::reverse(dropped.begin(), dropped.end());
  return dropped;
}

// ---------------------------------------------------------------------------
// The check: one routine decides whether a copy is usable, for every reader.

std::string_view CopyStateName(CopyState s) {
  switch (s) {
    case CopyState::kOk:
      return "ok";
    case CopyState::kDamaged:
      return "damaged";
    case CopyState::kUncommitted:
      return "uncommitted";
    case CopyState::kMissing:
      return "missing";
  }
  return "missing";
}

CopyState VersionCheck::state() const {
  CopyState best = CopyState::kMissing;
  for (const CopyCheck& c : copies) {
    if (c.state == CopyState::kOk) return CopyState::kOk;
    if (c.state == CopyState::kDamaged) best = CopyState::kDamaged;
    if (c.state == CopyState::kUncommitted && best == CopyState::kMissing) best = c.state;
  }
  return best;
}

std::vector<std::string> VersionCheck::Problems() const {
  std::vector<std::string> out;
  for (const CopyCheck& c : copies) {
    if (!c.problem.empty()) out.push_back(fmt::format("{} copy: {}", TierName(c.tier), c.problem));
  }
  return out;
}

Result<CheckpointStore::Checked> CheckpointStore::CheckCopy(Tier tier, int64_t id, CheckDepth depth,
                                                            int chain, const RecordPlacement* place,
                                                            int threads) const {
  if (chain > kMaxChainDepth) {
    return DataLossError(
        fmt::format("version {}: delta chain longer than {} versions", id, kMaxChainDepth));
  }
  const BlobStore& bs = *store(tier);
  const std::string data = DataFileName(id);
  if (Absent(bs, ManifestFileName(id)) && Absent(bs, data)) {
    return NotFoundError(fmt::format("{}: no such version", bs.Describe(data)));
  }
  Checked out;
  SPOT_ASSIGN_OR_RETURN(out.info, ReadManifest(tier, id));
  const VersionInfo& v = out.info;
  SPOT_ASSIGN_OR_RETURN(CheckpointFile f, OpenData(bs, v));
  // A manifest that binds the index needs no whole-file pass: the index
  // holds every chunk's checksum, and the decode checks each one. For an
  // older manifest the whole-file checksum is computed beside the decode
  // (both read the whole file; a restore pays for the longer of the two).
  const bool whole_file = depth == CheckDepth::kFull && !v.index_checksum;
  auto checksum = [&bs, data, n = v.file_bytes] { return BlobChecksum(bs, data, n); };
  std::future<Result<uint64_t>> sum;
  if (whole_file) {
    try {
      sum = std::async(std::launch::async, checksum);
    } catch (const std::system_error&) {
      // No thread to spare: computed after the decode instead.
    }
  }
  // A delta at full depth: first the whole chain in one pass, each chunk
  // through every version while in cache. Any failure there falls back to
  // the version-by-version check below, which says which copy is at fault
  // and tries the bases' other tiers; both pass exactly the same copies.
  std::optional<Result<Container>> decoded;
  if (depth == CheckDepth::kFull && v.base >= 0) {
    auto whole = DecodeChain(f, v, chain, place, threads);
    if (whole.ok()) decoded = std::move(whole);
  }
  Checked base;
  if (v.base >= 0 && !decoded) {
    std::vector<std::string> why;
    auto b = CheckAnyCopy(v.base, depth, chain + 1, &why, nullptr, threads);
    if (!b.ok()) {
      return DataLossError(fmt::format("{}: its base version {} is unusable: {}", f.source(),
                                       v.base, b.status().message()));
    }
    base = std::move(b).value();
  }
  if (depth == CheckDepth::kFull) {
    ChunkCodec codec;
    if (!decoded) {
      decoded = f.ReadAll(v.base >= 0 ? &base.container : nullptr, codec, threads, place);
    }
    Result<Container>& c = *decoded;
    if (whole_file) {
      Result<uint64_t> got = sum.valid() ? sum.get() : checksum();
      if (!got.ok()) return got.status();
      if (*got != v.checksum) {
        return DataLossError(
            fmt::format("{}: whole-file checksum {:016x} does not match the manifest's {:016x}",
                        f.source(), *got, v.checksum));
      }
    }
    if (!c.ok()) return c.status();
    out.container = std::move(c).value();
    if (const Record* r = out.container.Find(kStepRecord)) out.step_record = std::string(r->data);
  } else {
    SPOT_ASSIGN_OR_RETURN(out.step_record, ReadStepRecord(f, base.step_record));
  }
  SPOT_RETURN_IF_ERROR(CheckStep(f.source(), v.step, out.step_record));
  return out;
}

Result<Container> CheckpointStore::DecodeChain(const CheckpointFile& top, const VersionInfo& v,
                                               int chain, const RecordPlacement* place,
                                               int threads) const {
  // The bases, newest first: for each, the first copy whose manifest and data
  // file pass their checks.
  struct Link {
    const BlobStore* bs;
    VersionInfo info;
    CheckpointFile file;
  };
  std::vector<Link> links;
  for (int64_t b = v.base; b >= 0; b = links.back().info.base) {
    if (chain + static_cast<int>(links.size()) >= kMaxChainDepth) {
      return DataLossError(fmt::format("version {}: delta chain too long", v.id));
    }
    std::optional<Link> link;
    for (Tier t : Tiers()) {
      auto m = ReadManifest(t, b);
      if (!m.ok()) continue;
      auto file = OpenData(*store(t), *m);
      if (!file.ok()) continue;
      link.emplace(Link{store(t), std::move(m).value(), std::move(file).value()});
      break;
    }
    if (!link) return DataLossError(fmt::format("version {}: no copy of base {}", v.id, b));
    links.push_back(std::move(*link));
  }
  // The whole-file checksums of bases whose manifest does not bind the
  // index, beside the decode.
  auto check_sums = [&links]() -> Status {
    for (const Link& l : links) {
      if (l.info.index_checksum) continue;
      const std::string name = DataFileName(l.info.id);
      SPOT_ASSIGN_OR_RETURN(uint64_t got, BlobChecksum(*l.bs, name, l.info.file_bytes));
      if (got != l.info.checksum) return DataLossError(l.bs->Describe(name) + ": checksum");
    }
    return Status::Ok();
  };
  std::future<Status> sums;
  const bool any_whole_file =
      std::any_of(links.begin(), links.end(), [](const Link& l) { return !l.info.index_checksum; });
  try {
    if (any_whole_file) sums = std::async(std::launch::async, check_sums);
  } catch (const std::system_error&) {
    // No thread to spare: checked after the decode instead.
  }
  // The bases' steps, their step records decoded alone, oldest first.
  std::optional<std::string> record;
  for (auto l = links.rbegin(); l != links.rend(); ++l) {
    SPOT_ASSIGN_OR_RETURN(record, ReadStepRecord(l->file, record));
    SPOT_RETURN_IF_ERROR(CheckStep(l->file.source(), l->info.step, record));
  }
  std::vector<const CheckpointFile*> files;
  for (auto l = links.rbegin(); l != links.rend(); ++l) files.push_back(&l->file);
  files.push_back(&top);
  ChunkCodec codec;
  auto c = CheckpointFile::ReadChain(files, nullptr, codec, threads, place);
  SPOT_RETURN_IF_ERROR(sums.valid() ? sums.get() : check_sums());
  return c;
}

Result<CheckpointStore::Checked> CheckpointStore::CheckAnyCopy(int64_t id, CheckDepth depth,
                                                               int chain,
                                                               std::vector<std::string>* why,
                                                               const RecordPlacement* place,
                                                               int threads) const {
  const size_t first_reason = why->size();
  for (Tier t : Tiers()) {
    auto c = CheckCopy(t, id, depth, chain, place, threads);
    if (c.ok()) return c;
    if (c.status().code() != StatusCode::kNotFound) why->push_back(c.status().message());
  }
  std::string all;
  for (size_t i = first_reason; i < why->size(); ++i) all += (all.empty() ? "" : "; ") + (*why)[i];
  if (all.empty()) return NotFoundError(fmt::format("no version {} in {}", id, Where()));
  return DataLossError(all);
}

void CheckpointStore::InspectInto(int64_t id, CheckDepth depth, VersionCheck* out) const {
  out->id = id;
  for (Tier t : Tiers()) {
    const BlobStore& bs = *store(t);
    CopyCheck copy{.tier = t};
    if (Absent(bs, ManifestFileName(id))) {
      if (!Absent(bs, DataFileName(id))) {
        copy.state = CopyState::kUncommitted;
        copy.problem = ReadManifest(t, id).status().message();
      }
      out->copies.push_back(std::move(copy));
      continue;
    }
    auto c = CheckCopy(t, id, depth, 0);
    if (c.ok()) {
      copy.state = CopyState::kOk;
      if (!out->has_info || out->info.tiers.empty()) {
        out->info = std::move(c->info);
        out->info.tiers.clear();
      }
      out->info.tiers.push_back(t);
      out->has_info = true;
    } else {
      copy.state = CopyState::kDamaged;
      copy.problem = c.status().message();
      if (!out->has_info) {
        auto m = ReadManifest(t, id);
        if (m.ok()) {
          out->info = std::move(m).value();
          out->info.tiers.clear();
          out->has_info = true;
        }
      }
    }
    out->copies.push_back(std::move(copy));
  }
}

VersionCheck CheckpointStore::Inspect(int64_t id, CheckDepth depth) const {
  VersionCheck out;
  InspectInto(id, depth, &out);
  return out;
}

std::vector<VersionCheck> CheckpointStore::Inspect(CheckDepth depth) const {
  std::set<int64_t> ids;
  for (Tier t : Tiers()) {
    for (int64_t id : Ids(t)) ids.insert(id);
  }
  std::vector<VersionCheck> out(ids.size());
  size_t i = 0;
  for (auto it = ids.rbegin(); it != ids.rend(); ++it) InspectInto(*it, depth, &out[i++]);
  return out;
}

std::vector<VersionInfo> CheckpointStore::List() const {
  std::vector<VersionInfo> list;
  for (VersionCheck& v : Inspect(CheckDepth::kQuick)) {
    if (v.intact()) list.push_back(std::move(v.info));
  }
  return list;
}

Result<CheckpointStore::Loaded> CheckpointStore::Load(int64_t id) const {
  Loaded l;
  SPOT_ASSIGN_OR_RETURN(Checked c, CheckAnyCopy(id, CheckDepth::kFull, 0, &l.skipped));
  l.info = std::move(c.info);
  l.container = std::move(c.container);
  return l;
}

Result<CheckpointStore::Loaded> CheckpointStore::LoadNewestValid(
    int64_t before_step, const RecordPlacement* place) const {
  std::set<int64_t> ids;
  for (Tier t : Tiers()) {
    for (int64_t id : Ids(t)) ids.insert(id);
  }
  std::vector<std::string> skipped;
  for (auto it = ids.rbegin(); it != ids.rend(); ++it) {
    // Versions at or after `before_step` are not candidates (rollback).
    bool too_new = true;
    for (Tier t : Tiers()) {
      if (Absent(*store(t), ManifestFileName(*it)) && Absent(*store(t), DataFileName(*it))) {
        continue;
      }
      auto v = ReadManifest(t, *it);
      if (!v.ok() || v->step < before_step) too_new = false;
    }
    if (too_new) continue;
    std::vector<std::string> why;
    auto c = CheckAnyCopy(*it, CheckDepth::kFull, 0, &why, place);
    if (c.ok() && c->info.step < before_step) {
      for (std::string& w : why) skipped.push_back(std::move(w));
      return Loaded{std::move(c->info), std::move(c->container), std::move(skipped)};
    }
    if (!c.ok()) {
      for (std::string& w : why) skipped.push_back(std::move(w));
    }
  }
  std::string why = "no valid checkpoint in " + Where();
  for (const std::string& s : skipped) why += "\n  skipped: " + s;
  return NotFoundError(why);
}

Status CheckpointStore::Verify(int64_t id, Tier tier) const {
  if (tier == Tier::kDurable && !has_durable()) {
    return InvalidArgumentError("there is no durable tier");
  }
  return CheckCopy(tier, id, CheckDepth::kFull, 0).status();
}

}  // namespace spot::ckpt
