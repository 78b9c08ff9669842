#include "ckpt/store.h"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <set>

#include <fmt/format.h>
#include <nlohmann/json.hpp>
#include <spdlog/spdlog.h>

#include "core/file_io.h"

namespace spot::ckpt {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

constexpr std::string_view kManifestFormat = "spot-checkpoint";

// Parses "ckpt-<digits>.<ext>" into the id; -1 otherwise.
int64_t ParseId(const std::string& name, std::string_view ext) {
  constexpr std::string_view kPrefix = "ckpt-";
  if (!name.starts_with(kPrefix) || !name.ends_with(ext)) return -1;
  std::string digits = name.substr(kPrefix.size(), name.size() - kPrefix.size() - ext.size());
  if (digits.empty() || digits.size() > 15 ||
      !std::all_of(digits.begin(), digits.end(), ::isdigit)) {
    return -1;
  }
  return std::stoll(digits);
}

std::string Join(const fs::path& dir, const std::string& name) { return (dir / name).string(); }

}  // namespace

std::string CheckpointStore::DataFileName(int64_t id) { return fmt::format("ckpt-{:06}.bin", id); }
std::string CheckpointStore::ManifestFileName(int64_t id) {
  return fmt::format("ckpt-{:06}.json", id);
}

Result<CheckpointStore> CheckpointStore::Open(StoreOptions options) {
  if (options.dir.empty()) return InvalidArgumentError("checkpoint directory is empty");
  if (options.keep_last < 1) return InvalidArgumentError("keep_last must be >= 1");
  SPOT_RETURN_IF_ERROR(CreateDirectories(options.dir));
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(options.dir, ec)) {
    if (e.path().filename().string().starts_with(kTempFilePrefix)) {
      spdlog::info("checkpoint: removing {} left by an interrupted save", e.path().string());
      fs::remove(e.path(), ec);
    }
  }
  return CheckpointStore(std::move(options));
}

std::vector<int64_t> CheckpointStore::AllIds() const {
  std::set<int64_t> ids;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(opt_.dir, ec)) {
    std::string name = e.path().filename().string();
    int64_t id = std::max(ParseId(name, ".bin"), ParseId(name, ".json"));
    if (id >= 0) ids.insert(id);
  }
  return {ids.begin(), ids.end()};
}

Result<VersionInfo> CheckpointStore::ReadManifest(int64_t id) const {
  VersionInfo v;
  v.id = id;
  v.data_path = Join(opt_.dir, DataFileName(id));
  v.manifest_path = Join(opt_.dir, ManifestFileName(id));
  auto text = ReadFile(v.manifest_path);
  if (!text.ok()) {
    if (text.status().code() == StatusCode::kNotFound) {
      return DataLossError(fmt::format(
          "{}: no manifest (an interrupted save, or the manifest was deleted)", v.data_path));
    }
    return text.status();
  }
  try {
    json j = json::parse(*text);
    if (j.at("format") != kManifestFormat) throw std::runtime_error("format is not " + std::string(kManifestFormat));
    if (j.at("id").get<int64_t>() != id) throw std::runtime_error("id does not match file name");
    v.step = j.at("step").get<int64_t>();
    v.parent = j.at("parent").get<int64_t>();
    v.file_bytes = j.at("file_bytes").get<uint64_t>();
    v.payload_bytes = j.at("payload_bytes").get<uint64_t>();
    v.checksum = std::stoull(j.at("checksum").get<std::string>().substr(std::string("xxh3-64:").size()), nullptr, 16);
    v.created_unix_ms = j.at("created_unix_ms").get<int64_t>();
    v.meta_json = j.value("meta", json::object()).dump();
  } catch (const std::exception& e) {
    return DataLossError(fmt::format("{}: malformed manifest: {}", v.manifest_path, e.what()));
  }
  return v;
}

Result<VersionInfo> CheckpointStore::Save(Container& c, int64_t step, int64_t parent,
                                          const std::string& meta_json) {
  std::vector<int64_t> ids = AllIds();
  VersionInfo v;
  v.id = ids.empty() ? 1 : ids.back() + 1;
  v.step = step;
  v.parent = parent;
  v.data_path = Join(opt_.dir, DataFileName(v.id));
  v.manifest_path = Join(opt_.dir, ManifestFileName(v.id));
  v.created_unix_ms = std::chrono::duration_cast<std::chrono::milliseconds>(
                          std::chrono::system_clock::now().time_since_epoch())
                          .count();
  json meta;
  try {
    meta = meta_json.empty() ? json::object() : json::parse(meta_json);
  } catch (const std::exception& e) {
    return InvalidArgumentError(std::string("checkpoint metadata is not JSON: ") + e.what());
  }
  v.meta_json = meta.dump();

  std::string scratch;
  std::vector<std::string_view> pieces = c.Encode(&scratch, &v.checksum);
  for (std::string_view p : pieces) v.file_bytes += p.size();
  v.payload_bytes = c.payload_bytes();
  SPOT_RETURN_IF_ERROR(WriteFileAtomically(v.data_path, pieces).WithContext("saving checkpoint"));

  json m = {{"format", kManifestFormat},
            {"format_version", kFormatVersion},
            {"id", v.id},
            {"step", v.step},
            {"parent", v.parent},
            {"file", DataFileName(v.id)},
            {"file_bytes", v.file_bytes},
            {"payload_bytes", v.payload_bytes},
            {"records", c.records().size()},
            {"checksum", fmt::format("xxh3-64:{:016x}", v.checksum)},
            {"created_unix_ms", v.created_unix_ms},
            {"meta", meta}};
  SPOT_RETURN_IF_ERROR(
      WriteFileAtomically(v.manifest_path, m.dump(2) + "\n").WithContext("saving checkpoint"));
  ApplyRetention(v.id, v.parent);
  return v;
}

Result<Container> CheckpointStore::Load(const VersionInfo& info) const {
  auto bytes = ReadFile(info.data_path);
  if (!bytes.ok()) {
    if (bytes.status().code() == StatusCode::kNotFound) {
      return DataLossError(info.data_path + ": data file is missing");
    }
    return bytes.status();
  }
  if (bytes->size() != info.file_bytes) {
    return DataLossError(fmt::format("{}: {} bytes, manifest says {} (truncated?)",
                                     info.data_path, bytes->size(), info.file_bytes));
  }
  // The footer must carry the manifest's checksum; Decode then hashes the bytes
  // once against the footer, so a load reads and hashes the data one time.
  uint64_t sum = Container::StoredChecksum(*bytes);
  if (sum != info.checksum) {
    return DataLossError(fmt::format("{}: checksum {:016x} does not match the manifest's {:016x}",
                                     info.data_path, sum, info.checksum));
  }
  return Container::Decode(std::move(bytes).value(), info.data_path);
}

Result<CheckpointStore::Loaded> CheckpointStore::LoadNewestValid() const {
  std::vector<int64_t> ids = AllIds();
  std::vector<std::string> skipped;
  for (auto it = ids.rbegin(); it != ids.rend(); ++it) {
    auto info = ReadManifest(*it);
    if (!info.ok()) {
      skipped.push_back(info.status().message());
      continue;
    }
    auto c = Load(*info);
    if (!c.ok()) {
      skipped.push_back(c.status().message());
      continue;
    }
    return Loaded{std::move(info).value(), std::move(c).value(), std::move(skipped)};
  }
  std::string why = "no valid checkpoint in " + opt_.dir;
  for (const std::string& s : skipped) why += "\n  skipped: " + s;
  return NotFoundError(why);
}

std::vector<VersionInfo> CheckpointStore::List() const {
  std::vector<VersionInfo> out;
  std::vector<int64_t> ids = AllIds();
  for (auto it = ids.rbegin(); it != ids.rend(); ++it) {
    auto info = ReadManifest(*it);
    if (info.ok()) out.push_back(std::move(info).value());
  }
  return out;
}

void CheckpointStore::ApplyRetention(int64_t keep_id, int64_t keep_parent) {
  std::vector<int64_t> ids = AllIds();
  if (ids.size() <= static_cast<size_t>(opt_.keep_last)) return;
  size_t drop = ids.size() - static_cast<size_t>(opt_.keep_last);
  std::error_code ec;
  for (size_t i = 0; i < drop; ++i) {
    int64_t id = ids[i];
    if (id == keep_id || id == keep_parent) continue;
    // Manifest first: a version without its manifest is never loaded.
    fs::remove(Join(opt_.dir, ManifestFileName(id)), ec);
    fs::remove(Join(opt_.dir, DataFileName(id)), ec);
  }
  (void)SyncDirectory(opt_.dir);
}

}  // namespace spot::ckpt
