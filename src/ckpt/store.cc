#include "ckpt/store.h"

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <chrono>
#include <map>
#include <nlohmann/json.hpp>
#include <set>

#include "core/clock.h"

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
  return m.dump(2) + "\n";
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
  if (options.durable_dir == options.dir) {
    return InvalidArgumentError("the durable tier must be another directory than " + options.dir);
  }
  std::unique_ptr<CheckpointStore> s(new CheckpointStore(options));
  SPOT_ASSIGN_OR_RETURN(s->tiers_[0], DirectoryBlobStore::Open(options.dir));
  if (!options.durable_dir.empty()) {
    SPOT_ASSIGN_OR_RETURN(s->tiers_[1], DirectoryBlobStore::Open(options.durable_dir));
    std::vector<int64_t> durable = s->Ids(Tier::kDurable);
    if (!durable.empty()) s->replicated_upto_ = durable.back();
  }
  for (Tier t : s->Tiers()) {
    std::vector<int64_t> ids = s->Ids(t);
    if (!ids.empty()) s->next_id_ = std::max(s->next_id_, ids.back() + 1);
  }
  return s;
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
    if (j.at("format_version").get<uint32_t>() != kFormatVersion) {
      throw std::runtime_error(
          fmt::format("format_version {} is not supported (this build reads {})",
                      j.at("format_version").dump(), kFormatVersion));
    }
    if (j.at("id").get<int64_t>() != id) throw std::runtime_error("id does not match file name");
    v.step = j.at("step").get<int64_t>();
    v.parent = j.at("parent").get<int64_t>();
    v.base = j.at("base").get<int64_t>();
    v.chain_depth = j.at("chain_depth").get<int>();
    v.file_bytes = j.at("file_bytes").get<uint64_t>();
    v.payload_bytes = j.at("payload_bytes").get<uint64_t>();
    v.records = j.at("records").get<int>();
    v.codecs = j.at("codecs").get<std::string>();
    std::string sum = j.at("checksum").get<std::string>();
    if (!sum.starts_with("xxh3-64:") || sum.size() != 8 + 16) {
      throw std::runtime_error("checksum is not xxh3-64:<16 hex digits>");
    }
    v.checksum = std::stoull(sum.substr(8), nullptr, 16);
    v.created_unix_ms = j.at("created_unix_ms").get<int64_t>();
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
  SPOT_RETURN_IF_ERROR(Replicate(v));
  for (Tier t : Tiers()) SPOT_RETURN_IF_ERROR(ApplyRetention(t).status());
  return v;
}

Status CheckpointStore::Replicate(const VersionInfo& v) {
  if (!has_durable()) return Status::Ok();
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
    SPOT_RETURN_IF_ERROR(Replicate(*base));
  }
  const std::string data = DataFileName(v.id);
  SPOT_ASSIGN_OR_RETURN(uint64_t sum, CopyBlob(*store(Tier::kLocal), durable, data));
  if (sum != v.checksum) {
    (void)durable.Delete(data);
    return DataLossError(fmt::format(
        "{}: changed while being copied to the durable tier (checksum {:016x}, manifest says "
        "{:016x})",
        store(Tier::kLocal)->Describe(data), sum, v.checksum));
  }
  SPOT_RETURN_IF_ERROR(CopyBlob(*store(Tier::kLocal), durable, ManifestFileName(v.id)).status());
  int64_t prev = replicated_upto_.load();
  while (prev < v.id && !replicated_upto_.compare_exchange_weak(prev, v.id)) {
  }
  return Status::Ok();
}

Result<std::vector<int64_t>> CheckpointStore::ApplyRetention(Tier tier, bool dry_run) {
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

Result<Container> CheckpointStore::DecodeFrom(Tier tier, const VersionInfo& v, int depth,
                                              std::vector<std::string>* why) const {
  const BlobStore& bs = *store(tier);
  SPOT_ASSIGN_OR_RETURN(CheckpointFile f, CheckpointFile::Open(bs, DataFileName(v.id)));
  if (f.file_bytes() != v.file_bytes) {
    return DataLossError(fmt::format("{}: {} bytes, manifest says {} (truncated?)", f.source(),
                                     f.file_bytes(), v.file_bytes));
  }
  if (f.id() != v.id || f.base_id() != v.base) {
    return DataLossError(fmt::format("{}: holds version {} (base {}), manifest says {} (base {})",
                                     f.source(), f.id(), f.base_id(), v.id, v.base));
  }
  ChunkCodec codec;
  if (v.base < 0) return f.ReadAll(nullptr, codec);
  std::vector<std::string> base_why;
  auto base = Decode(v.base, depth + 1, &base_why, nullptr);
  if (!base.ok()) {
    return DataLossError(fmt::format("{}: its base version {} is unusable: {}", f.source(), v.base,
                                     base.status().message()));
  }
  return f.ReadAll(&base.value(), codec);
}

Result<Container> CheckpointStore::Decode(int64_t id, int depth, std::vector<std::string>* why,
                                          VersionInfo* info) const {
  if (depth > kMaxChainDepth) return DataLossError("delta chain is too long (a cycle?)");
  for (Tier t : Tiers()) {
    const BlobStore& bs = *store(t);
    if (!bs.Size(ManifestFileName(id)).ok() && !bs.Size(DataFileName(id)).ok()) continue;
    auto v = ReadManifest(t, id);
    if (!v.ok()) {
      why->push_back(std::string(v.status().message()));
      continue;
    }
    auto c = DecodeFrom(t, *v, depth, why);
    if (c.ok()) {
      if (info) *info = std::move(v).value();
      return c;
    }
    why->push_back(std::string(c.status().message()));
  }
  std::string all;
  for (const std::string& w : *why) all += (all.empty() ? "" : "; ") + w;
  return DataLossError(all.empty() ? fmt::format("version {} not found", id) : all);
}

Result<CheckpointStore::Loaded> CheckpointStore::Load(int64_t id) const {
  Loaded l;
  SPOT_ASSIGN_OR_RETURN(l.container, Decode(id, 0, &l.skipped, &l.info));
  return l;
}

Result<CheckpointStore::Loaded> CheckpointStore::LoadNewestValid(int64_t before_step) const {
  std::set<int64_t> ids;
  for (Tier t : Tiers()) {
    for (int64_t id : Ids(t)) ids.insert(id);
  }
  std::vector<std::string> skipped;
  for (auto it = ids.rbegin(); it != ids.rend(); ++it) {
    // Versions at or after `before_step` are not candidates (rollback).
    bool too_new = true;
    for (Tier t : Tiers()) {
      auto v = ReadManifest(t, *it);
      if (!v.ok() || v->step < before_step) too_new = false;
    }
    if (too_new) continue;
    std::vector<std::string> why;
    VersionInfo info;
    auto c = Decode(*it, 0, &why, &info);
    if (c.ok() && info.step < before_step) {
      for (std::string& w : why) skipped.push_back(std::move(w));
      return Loaded{std::move(info), std::move(c).value(), std::move(skipped)};
    }
    if (!c.ok()) {
      for (std::string& w : why) skipped.push_back(std::move(w));
    }
  }
  std::string where = opt_.dir + (has_durable() ? " or " + opt_.durable_dir : "");
  std::string why = "no valid checkpoint in " + where;
  for (const std::string& s : skipped) why += "\n  skipped: " + s;
  return NotFoundError(why);
}

Status CheckpointStore::Verify(int64_t id, Tier tier) const {
  if (tier == Tier::kDurable && !has_durable()) {
    return InvalidArgumentError("there is no durable tier");
  }
  SPOT_ASSIGN_OR_RETURN(VersionInfo v, ReadManifest(tier, id));
  const BlobStore& bs = *store(tier);
  SPOT_ASSIGN_OR_RETURN(std::string bytes, bs.Read(DataFileName(id)));
  if (Checksum(bytes) != v.checksum) {
    return DataLossError(
        fmt::format("{}: whole-file checksum {:016x} does not match the "
                    "manifest's {:016x}",
                    bs.Describe(DataFileName(id)), Checksum(bytes), v.checksum));
  }
  std::vector<std::string> why;
  return DecodeFrom(tier, v, 0, &why).status();
}

std::vector<VersionInfo> CheckpointStore::List() const {
  std::map<int64_t, VersionInfo> out;
  for (Tier t : Tiers()) {
    for (int64_t id : Ids(t)) {
      auto v = ReadManifest(t, id);
      if (!v.ok()) continue;
      auto [it, fresh] = out.emplace(id, *v);
      if (!fresh) it->second.tiers.push_back(t);
    }
  }
  std::vector<VersionInfo> list;
  for (auto it = out.rbegin(); it != out.rend(); ++it) list.push_back(std::move(it->second));
  return list;
}

}  // namespace spot::ckpt
