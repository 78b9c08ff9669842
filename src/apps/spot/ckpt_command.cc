// `spot ckpt`: inspect and manage checkpoint versions.
//   spot ckpt list     versions in both tiers, newest first, damaged ones marked
//   spot ckpt show ID  a version's manifest and records (codec, sizes, chunks)
//   spot ckpt verify   the full check of every copy, per tier (the one a resume makes)
//   spot ckpt diff A B how two versions differ, record by record
//   spot ckpt rollback ID   make ID's state the newest version (a copy; nothing is lost)
//   spot ckpt gc       apply the retention policy now (--dry-run to see what would go)
//   spot ckpt export ID --out F   the model's tensors as safetensors
// Directories come from --job (the job's checkpoint section) or --dir/--durable-dir.
// Every command judges versions with the store's one check
// (ckpt::CheckpointStore::Inspect), so what they call damaged is what a
// resume skips.
#include <fmt/format.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <map>
#include <nlohmann/json.hpp>

#include "apps/spot/commands.h"
#include "apps/spot/exit_code.h"
#include "ckpt/format.h"
#include "ckpt/store.h"
#include "core/file_io.h"
#include "train/train_spec.h"

namespace spot::cli {
namespace {

using nlohmann::json;

int Fail(const Status& s) {
  fmt::print(stderr, "error: {}\n", s.message());
  return ExitCodeFor(s);
}

// Opens the tiers; `read_only` for the commands that only look (they neither
// create directories nor touch a running writer's temporary files). One tier
// may be gone (the local disk of a machine that was preempted) as long as
// the other is there.
Result<std::unique_ptr<ckpt::CheckpointStore>> OpenStore(const CkptArgs& a, bool read_only) {
  ckpt::StoreOptions o;
  if (!a.job.empty()) {
    SPOT_ASSIGN_OR_RETURN(train::TrainSpec spec, train::LoadTrainSpec(a.job));
    o.dir = spec.checkpoint.dir;
    o.durable_dir = spec.checkpoint.durable_dir;
    o.retention.keep_last = static_cast<int>(spec.checkpoint.keep);
    o.retention.keep_every = static_cast<int>(spec.checkpoint.keep_every);
    o.retention.best_metric = spec.checkpoint.keep_best;
    o.retention.best_higher = spec.checkpoint.keep_best != "test_loss";
  }
  if (!a.dir.empty()) o.dir = a.dir;
  if (!a.durable_dir.empty()) o.durable_dir = a.durable_dir;
  if (a.keep > 0) o.retention.keep_last = a.keep;
  if (o.dir.empty()) return InvalidArgumentError("give --job JOB.yaml or --dir DIR");
  namespace fs = std::filesystem;
  std::error_code ec;
  // The durable tier may be an S3 prefix (s3://bucket/prefix): the store
  // checks it when it opens.
  const bool s3 = o.durable_dir.starts_with("s3://");
  for (const std::string& d : {o.dir, s3 ? std::string() : o.durable_dir}) {
    if (!d.empty() && fs::exists(d, ec) && !fs::is_directory(d, ec)) {
      return InvalidArgumentError(d + ": not a directory");
    }
  }
  if (!s3 && !fs::is_directory(o.dir, ec) &&
      (o.durable_dir.empty() || !fs::is_directory(o.durable_dir, ec))) {
    return InvalidArgumentError(
        o.durable_dir.empty()
            ? o.dir + ": no such checkpoint directory"
            : fmt::format("{} and {}: no such checkpoint directory", o.dir, o.durable_dir));
  }
  o.read_only = read_only;
  return ckpt::CheckpointStore::Open(std::move(o));
}

std::string Where(const ckpt::CheckpointStore& store) {
  return store.dir() + (store.has_durable() ? " or " + store.options().durable_dir : "");
}

Status NoVersion(const ckpt::CheckpointStore& store, int64_t id) {
  return InvalidArgumentError(fmt::format("no version {} in {}", id, Where(store)));
}

std::string Join(const std::vector<std::string>& v) {
  std::string out;
  for (const std::string& s : v) out += (out.empty() ? "" : "; ") + s;
  return out;
}

// Version `id`, decoded after the full check; an id no tier has is bad input.
Result<ckpt::CheckpointStore::Loaded> LoadVersion(const ckpt::CheckpointStore& store, int64_t id) {
  auto loaded = store.Load(id);
  if (!loaded.ok() && loaded.status().code() == StatusCode::kNotFound) return NoVersion(store, id);
  if (!loaded.ok()) return loaded.status().WithContext(fmt::format("version {}", id));
  return loaded;
}

std::string Tiers(const ckpt::VersionInfo& v) {
  std::string s;
  for (ckpt::Tier t : v.tiers) s += (s.empty() ? "" : "+") + std::string(ckpt::TierName(t));
  return s;
}

std::string Mb(uint64_t bytes) { return fmt::format("{:.2f}", bytes / 1e6); }

json VersionJson(const ckpt::VersionInfo& v) {
  std::vector<std::string> tiers;
  for (ckpt::Tier t : v.tiers) tiers.emplace_back(ckpt::TierName(t));
  return {{"id", v.id},
          {"step", v.step},
          {"parent", v.parent},
          {"base", v.base},
          {"chain_depth", v.chain_depth},
          {"file_bytes", v.file_bytes},
          {"payload_bytes", v.payload_bytes},
          {"records", v.records},
          {"codecs", v.codecs},
          {"checksum", fmt::format("xxh3-64:{:016x}", v.checksum)},
          {"created_unix_ms", v.created_unix_ms},
          {"tiers", tiers},
          {"meta", json::parse(v.meta_json, nullptr, false)}};
}

json CheckJson(const ckpt::VersionCheck& v) {
  json j = v.has_info ? VersionJson(v.info) : json{{"id", v.id}, {"tiers", json::array()}};
  j["state"] = ckpt::CopyStateName(v.state());
  json copies = json::array();
  for (const ckpt::CopyCheck& c : v.copies) {
    json one = {{"tier", ckpt::TierName(c.tier)}, {"state", ckpt::CopyStateName(c.state)}};
    if (!c.problem.empty()) one["problem"] = c.problem;
    copies.push_back(std::move(one));
  }
  j["copies"] = std::move(copies);
  return j;
}

std::string StateText(ckpt::CopyState s) {
  std::string t(ckpt::CopyStateName(s));
  if (s == ckpt::CopyState::kDamaged) std::transform(t.begin(), t.end(), t.begin(), ::toupper);
  return t;
}

// Every version, damaged ones marked, at the quick check's depth (manifests,
// sizes, indexes, steps); `verify` reads every byte.
int List(ckpt::CheckpointStore& store, const CkptArgs& a) {
  std::vector<ckpt::VersionCheck> list = store.Inspect(ckpt::CheckDepth::kQuick);
  if (a.format == "json") {
    json out = json::array();
    for (const auto& v : list) out.push_back(CheckJson(v));
    fmt::print("{}\n", out.dump(2));
    return kExitOk;
  }
  if (list.empty()) {
    fmt::print("no checkpoint versions in {}\n", Where(store));
    return kExitOk;
  }
  constexpr std::string_view kRow =
      "{:>6} {:>8} {:>6} {:>6} {:>5} {:>9} {:>6} {:>9}  {:<15} {:<11} {}\n";
  fmt::print(fmt::runtime(kRow), "id", "step", "parent", "base", "depth", "MB", "ratio", "accuracy",
             "tiers", "state", "codecs");
  std::vector<std::string> notes;
  for (const auto& c : list) {
    for (const std::string& p : c.Problems())
      notes.push_back(fmt::format("version {}, {}", c.id, p));
    if (!c.has_info) {
      fmt::print(fmt::runtime(kRow), c.id, "-", "-", "-", "-", "-", "-", "-", "-",
                 StateText(c.state()), "-");
      continue;
    }
    const ckpt::VersionInfo& v = c.info;
    json meta = json::parse(v.meta_json, nullptr, false);
    double acc = meta.is_object() ? meta.value("test_accuracy", -1.0) : -1.0;
    fmt::print(
        fmt::runtime(kRow), v.id, v.step, v.parent, v.base, v.chain_depth, Mb(v.file_bytes),
        fmt::format("{:.2f}",
                    v.file_bytes ? static_cast<double>(v.payload_bytes) / v.file_bytes : 0.0),
        acc >= 0 ? fmt::format("{:.2f}%", acc * 100) : "-", v.tiers.empty() ? "-" : Tiers(v),
        StateText(c.state()), v.codecs);
  }
  for (const std::string& n : notes) fmt::print("{}\n", n);
  return kExitOk;
}

// A version that passes the quick check in some tier, as read from such a tier.
Result<ckpt::VersionInfo> FindVersion(ckpt::CheckpointStore& store, int64_t id) {
  ckpt::VersionCheck v = store.Inspect(id, ckpt::CheckDepth::kQuick);
  if (v.state() == ckpt::CopyState::kMissing) return NoVersion(store, id);
  if (!v.intact()) {
    return DataLossError(fmt::format("version {} is {}: {}", id, ckpt::CopyStateName(v.state()),
                                     Join(v.Problems())));
  }
  return v.info;
}

int Show(ckpt::CheckpointStore& store, const CkptArgs& a) {
  auto v = FindVersion(store, a.id);
  if (!v.ok()) return Fail(v.status());
  auto file = ckpt::CheckpointFile::Open(store.tier(v->tiers.front()),
                                         ckpt::CheckpointStore::DataFileName(v->id));
  if (!file.ok()) return Fail(file.status());
  if (a.format == "json") {
    json j = VersionJson(*v);
    json recs = json::array();
    for (const auto& r : file->records()) {
      recs.push_back({{"name", r.name},
                      {"dtype", ckpt::DTypeName(r.dtype)},
                      {"shape", r.shape},
                      {"codec", ckpt::CodecName(r.codec)},
                      {"raw_bytes", r.raw_bytes},
                      {"stored_bytes", r.stored_bytes()},
                      {"chunks", r.chunks.size()}});
    }
    j["record_list"] = recs;
    fmt::print("{}\n", j.dump(2));
    return kExitOk;
  }
  fmt::print(
      "version {}: step {}, parent {}, base {} (chain depth {}), {} bytes for {} bytes "
      "of state, tiers {}\nmeta: {}\n\n",
      v->id, v->step, v->parent, v->base, v->chain_depth, v->file_bytes, v->payload_bytes,
      Tiers(*v), v->meta_json);
  fmt::print("{:<44} {:>5} {:>18} {:<13} {:>11} {:>11} {:>6}\n", "record", "dtype", "shape",
             "codec", "raw", "stored", "ratio");
  for (const auto& r : file->records()) {
    std::string shape = "[";
    for (size_t i = 0; i < r.shape.size(); ++i)
      shape += fmt::format("{}{}", i ? "," : "", r.shape[i]);
    shape += "]";
    uint64_t stored = r.stored_bytes();
    fmt::print("{:<44} {:>5} {:>18} {:<13} {:>11} {:>11} {:>6.2f}\n", r.name,
               ckpt::DTypeName(r.dtype), shape, ckpt::CodecName(r.codec), r.raw_bytes, stored,
               stored ? static_cast<double>(r.raw_bytes) / stored : 0.0);
  }
  return kExitOk;
}

// The full check of every copy, the one a resume makes. A version is fine
// when some tier holds an intact copy: exit 1 only when a committed version
// has none (or the version named is not usable).
int Verify(ckpt::CheckpointStore& store, const CkptArgs& a) {
  std::vector<ckpt::VersionCheck> checks;
  if (a.id >= 0) {
    checks.push_back(store.Inspect(a.id, ckpt::CheckDepth::kFull));
    if (checks[0].state() == ckpt::CopyState::kMissing) return Fail(NoVersion(store, a.id));
  } else {
    checks = store.Inspect(ckpt::CheckDepth::kFull);
  }
  if (checks.empty()) return Fail(InvalidArgumentError("no versions to verify in " + Where(store)));
  std::map<ckpt::CopyState, int> copies, versions;
  for (const ckpt::VersionCheck& v : checks) {
    for (const ckpt::CopyCheck& c : v.copies) {
      ++copies[c.state];
      const std::string_view tier = ckpt::TierName(c.tier);
      switch (c.state) {
        case ckpt::CopyState::kOk:
          fmt::print("ok          version {} ({}, step {})\n", v.id, tier, v.info.step);
          break;
        case ckpt::CopyState::kDamaged:
          fmt::print("DAMAGED     version {} ({}): {}\n", v.id, tier, c.problem);
          break;
        case ckpt::CopyState::kUncommitted:
          fmt::print("uncommitted version {} ({}): {}\n", v.id, tier, c.problem);
          break;
        case ckpt::CopyState::kMissing:
          fmt::print("missing     version {} ({})\n", v.id, tier);
          break;
      }
    }
    ++versions[v.state()];
    if (v.state() == ckpt::CopyState::kDamaged) {
      fmt::print("version {} has no intact copy in any tier: a resume skips it\n", v.id);
    }
  }
  fmt::print(
      "{} version(s): {} intact, {} damaged, {} uncommitted; copies: {} ok, {} damaged, {} "
      "missing\n",
      checks.size(), versions[ckpt::CopyState::kOk], versions[ckpt::CopyState::kDamaged],
      versions[ckpt::CopyState::kUncommitted], copies[ckpt::CopyState::kOk],
      copies[ckpt::CopyState::kDamaged], copies[ckpt::CopyState::kMissing]);
  const bool failed =
      versions[ckpt::CopyState::kDamaged] > 0 || (a.id >= 0 && versions[ckpt::CopyState::kOk] == 0);
  return failed ? kExitFailure : kExitOk;
}

int Diff(ckpt::CheckpointStore& store, const CkptArgs& a) {
  auto x = LoadVersion(store, a.id);
  if (!x.ok()) return Fail(x.status());
  auto y = LoadVersion(store, a.other);
  if (!y.ok()) return Fail(y.status());
  const ckpt::Container &ca = x->container, &cb = y->container;
  fmt::print("version {} (step {}) vs version {} (step {})\n", a.id, x->info.step, a.other,
             y->info.step);
  fmt::print("{:<44} {:>12} {:>12} {:>14}\n", "record", "elements", "differ", "max |a-b|");
  int differing = 0;
  for (const ckpt::Record& r : ca.records()) {
    const ckpt::Record* o = cb.Find(r.name);
    if (o == nullptr) {
      fmt::print("{:<44} only in {}\n", r.name, a.id);
      ++differing;
      continue;
    }
    if (o->dtype != r.dtype || o->shape != r.shape) {
      fmt::print("{:<44} dtype or shape differs\n", r.name);
      ++differing;
      continue;
    }
    bool is_float = ckpt::SupportsQ8(r.dtype);
    size_t es = ckpt::DTypeSize(r.dtype);
    int64_t n = r.numel(), changed = 0;
    double max_abs = 0;
    for (int64_t i = 0; i < n; ++i) {
      if (std::memcmp(r.data.data() + i * es, o->data.data() + i * es, es) == 0) continue;
      ++changed;
      if (is_float) {
        max_abs = std::max(max_abs, std::fabs(ckpt::FloatElement(r.dtype, r.data, i) -
                                              ckpt::FloatElement(r.dtype, o->data, i)));
      }
    }
    if (changed == 0 && !a.all) continue;
    if (changed) ++differing;
    fmt::print("{:<44} {:>12} {:>12} {:>14}\n", r.name, n, changed,
               is_float ? fmt::format("{:.6g}", max_abs) : "-");
  }
  for (const ckpt::Record& r : cb.records()) {
    if (ca.Find(r.name) == nullptr) {
      fmt::print("{:<44} only in {}\n", r.name, a.other);
      ++differing;
    }
  }
  fmt::print("{} record(s) differ\n", differing);
  return kExitOk;
}

int RollbackTo(ckpt::CheckpointStore& store, const CkptArgs& a) {
  auto loaded = LoadVersion(store, a.id);
  if (!loaded.ok()) return Fail(loaded.status());
  auto list = store.List();
  int64_t newest = list.empty() ? -1 : list.front().id;
  json meta = json::parse(loaded->info.meta_json, nullptr, false);
  if (!meta.is_object()) meta = json::object();
  meta["rolled_back_to"] = a.id;
  meta["rolled_back_from"] = newest;
  auto v = store.Save(loaded->container,
                      {.step = loaded->info.step, .parent = a.id, .meta_json = meta.dump()});
  if (!v.ok()) return Fail(v.status());
  fmt::print(
      "version {} is a copy of version {} (step {}) and now the newest: the next run "
      "resumes from it. Versions {}..{} are kept until retention removes them.\n",
      v->id, a.id, loaded->info.step, a.id + 1, newest);
  return kExitOk;
}

int Gc(ckpt::CheckpointStore& store, const CkptArgs& a) {
  std::vector<ckpt::Tier> tiers = {ckpt::Tier::kLocal};
  if (store.has_durable()) tiers.push_back(ckpt::Tier::kDurable);
  for (ckpt::Tier t : tiers) {
    auto dropped = store.ApplyRetention(t, a.dry_run);
    if (!dropped.ok()) return Fail(dropped.status());
    std::string ids;
    for (int64_t id : *dropped) ids += fmt::format("{}{}", ids.empty() ? "" : " ", id);
    fmt::print("{} tier: {} {} version(s){}{}\n", ckpt::TierName(t),
               a.dry_run ? "would delete" : "deleted", dropped->size(), ids.empty() ? "" : ": ",
               ids);
  }
  return kExitOk;
}

// safetensors: u64 header length, a JSON header {name: {dtype, shape,
// data_offsets}}, then the tensors' bytes (https://github.com/huggingface/safetensors).
std::string_view SafetensorsDType(ckpt::DType t) {
  switch (t) {
    case ckpt::DType::kU8:
      return "U8";
    case ckpt::DType::kI8:
      return "I8";
    case ckpt::DType::kI16:
      return "I16";
    case ckpt::DType::kI32:
      return "I32";
    case ckpt::DType::kI64:
      return "I64";
    case ckpt::DType::kF16:
      return "F16";
    case ckpt::DType::kBF16:
      return "BF16";
    case ckpt::DType::kF32:
      return "F32";
    case ckpt::DType::kF64:
      return "F64";
    case ckpt::DType::kBool:
      return "BOOL";
  }
  return "U8";
}

int Export(ckpt::CheckpointStore& store, const CkptArgs& a) {
  if (a.out.empty()) return Fail(InvalidArgumentError("export: give --out FILE.safetensors"));
  auto loaded = LoadVersion(store, a.id);
  if (!loaded.ok()) return Fail(loaded.status());
  json header = json::object();
  header["__metadata__"] = {{"format", "pt"},
                            {"spot_version", std::to_string(a.id)},
                            {"spot_step", std::to_string(loaded->info.step)}};
  std::vector<std::string_view> data;
  uint64_t offset = 0;
  for (const ckpt::Record& r : loaded->container.records()) {
    if (!a.all && !r.name.starts_with("model/")) continue;
    std::string name = a.all ? r.name : r.name.substr(6);
    header[name] = {{"dtype", SafetensorsDType(r.dtype)},
                    {"shape", r.shape},
                    {"data_offsets", {offset, offset + r.data.size()}}};
    offset += r.data.size();
    data.push_back(r.data);
  }
  std::string h = header.dump();
  h.append((8 - h.size() % 8) % 8, ' ');  // pad so tensors start 8-byte aligned
  std::string prefix(8, '\0');
  uint64_t n = h.size();
  std::memcpy(prefix.data(), &n, 8);
  std::vector<std::string_view> pieces = {prefix, h};
  pieces.insert(pieces.end(), data.begin(), data.end());
  Status st = WriteFileAtomically(a.out, pieces);
  if (!st.ok()) return Fail(st);
  fmt::print("wrote {} ({} tensors, {} bytes) from version {} (step {})\n", a.out, data.size(),
             offset + 8 + n, a.id, loaded->info.step);
  return kExitOk;
}

// A whole number >= 1 (retention always keeps the newest version).
CLI::Validator AtLeastOne() {
  return CLI::Validator(
      [](std::string& s) -> std::string {
        int64_t n = 0;
        auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), n);
        if (ec == std::errc() && end == s.data() + s.size() && n >= 1 && n <= 1000000) return "";
        return "must be a whole number from 1 to 1000000 (the newest version is always kept), "
               "not '" +
               s + "'";
      },
      "N >= 1");
}

}  // namespace

CLI::App* AddCkptCommand(CLI::App& app, CkptArgs* a) {
  CLI::App* cmd = app.add_subcommand(
      "ckpt", "Inspect and manage checkpoint versions (docs/checkpoint-format.md).");
  cmd->require_subcommand(1);
  auto common = [&](CLI::App* c) {
    c->add_option("--job", a->job, "Job file: use its checkpoint.dir and durable_dir");
    c->add_option("--dir", a->dir, "Local checkpoint directory");
    c->add_option("--durable-dir", a->durable_dir, "Durable tier directory");
  };
  struct Sub {
    const char* name;
    const char* help;
  };
  for (Sub s : {Sub{"list", "Versions in every tier, newest first"},
                Sub{"show", "One version: manifest and records"},
                Sub{"verify", "Whole-file checksum and full decode of every copy (or of ID)"},
                Sub{"diff", "How two versions differ, record by record"},
                Sub{"rollback", "Make version ID the newest (a copy; nothing is deleted)"},
                Sub{"gc", "Apply the retention policy now"},
                Sub{"export", "Write a version's model tensors as safetensors"}}) {
    CLI::App* c = cmd->add_subcommand(s.name, s.help);
    common(c);
    c->callback([a, name = std::string(s.name)] { a->action = name; });
    std::string n = s.name;
    if (n == "list" || n == "show") {
      c->add_option("--format", a->format, "table | json")
          ->check(CLI::IsMember({"table", "json"}))
          ->capture_default_str();
    }
    if (n == "show" || n == "diff" || n == "rollback" || n == "export") {
      c->add_option("id", a->id, "Version id")->required();
    }
    if (n == "verify") c->add_option("id", a->id, "Version id (default: all)");
    if (n == "diff") {
      c->add_option("other", a->other, "The version to compare with")->required();
      c->add_flag("--all", a->all, "List equal records too");
    }
    if (n == "gc") {
      c->add_flag("--dry-run", a->dry_run, "Only say what would be deleted");
      c->add_option("--keep", a->keep, "Keep the last N (default: the job's checkpoint.keep)")
          ->check(AtLeastOne());
    }
    if (n == "export") {
      c->add_option("--out", a->out, "Output file (.safetensors)")->required();
      c->add_flag("--all", a->all, "Every record (optimizer state too), with full names");
    }
  }
  return cmd;
}

int RunCkpt(const CkptArgs& a) {
  const bool writes = a.action == "rollback" || (a.action == "gc" && !a.dry_run);
  auto store = OpenStore(a, /*read_only=*/!writes);
  if (!store.ok()) return Fail(store.status());
  ckpt::CheckpointStore& s = **store;
  if (a.action == "list") return List(s, a);
  if (a.action == "show") return Show(s, a);
  if (a.action == "verify") return Verify(s, a);
  if (a.action == "diff") return Diff(s, a);
  if (a.action == "rollback") return RollbackTo(s, a);
  if (a.action == "gc") return Gc(s, a);
  if (a.action == "export") return Export(s, a);
  return kExitBadInput;
}

}  // namespace spot::cli
