// Fuzzes the checkpoint store's manifests (ckpt/store.h): the JSON file of
// each version that says what its data file holds, and everything a store
// does with them: listing, retention by a metric of their metadata,
// verification and the resume path (LoadNewestValid), with delta chains.
//
// The store holds the data files of versions 1 (full) and 2 (a delta against
// 1), written by WriteSampleStore (ckpt_samples.h). The input is split at NUL
// bytes into up to three manifests, ckpt-1.json to ckpt-3.json (ckpt-3 has
// no data file). The seeds are the true manifests of 1 and 2.
#include <algorithm>
#include <cstdint>
#include <filesystem>
#include <string>
#include <string_view>
#include <vector>

#include "ckpt/store.h"
#include "ckpt_samples.h"
#include "core/file_io.h"
#include "fuzz_support.h"

namespace {

using namespace spot::ckpt;
namespace fs = std::filesystem;

struct DataFiles {
  std::string v1, v2;
};

const DataFiles& Data() {
  static const DataFiles* files = [] {
    const std::string dir = spot::fuzz::FreshScratchSubdir("template");
    spot::fuzz::WriteSampleStore(dir);
    auto* f = new DataFiles;
    f->v1 = spot::ReadFile(dir + "/" + CheckpointStore::DataFileName(1)).value();
    f->v2 = spot::ReadFile(dir + "/" + CheckpointStore::DataFileName(2)).value();
    return f;
  }();
  return *files;
}

std::vector<std::string_view> SplitAtNul(std::string_view in, size_t max_parts) {
  std::vector<std::string_view> parts;
  while (parts.size() + 1 < max_parts) {
    size_t nul = in.find('\0');
    if (nul == std::string_view::npos) break;
    parts.push_back(in.substr(0, nul));
    in.remove_prefix(nul + 1);
  }
  parts.push_back(in);
  return parts;
}

void CheckError(const spot::Status& s) {
  using spot::StatusCode;
  FUZZ_CHECK(s.code() == StatusCode::kDataLoss || s.code() == StatusCode::kNotFound, s.ToString());
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  (void)Data();
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string dir = spot::fuzz::FreshScratchSubdir("store");
  const std::string sub = fs::path(dir).filename().string();
  spot::fuzz::WriteScratchFile(sub + "/" + CheckpointStore::DataFileName(1), Data().v1);
  spot::fuzz::WriteScratchFile(sub + "/" + CheckpointStore::DataFileName(2), Data().v2);
  std::string_view in(reinterpret_cast<const char*>(data), size);
  std::vector<std::string_view> manifests = SplitAtNul(in, 3);
  for (size_t i = 0; i < manifests.size(); ++i) {
    spot::fuzz::WriteScratchFile(sub + "/" + CheckpointStore::ManifestFileName(i + 1),
                                 manifests[i]);
  }
  StoreOptions options{.dir = dir};
  options.retention.keep_last = 1;
  options.retention.best_metric = "test_loss";
  options.retention.best_higher = false;
  auto store = CheckpointStore::Open(options);
  FUZZ_CHECK(store.ok(), store.status().ToString());
  for (const VersionInfo& v : (*store)->List()) {
    FUZZ_CHECK(v.id >= 1 && v.id <= 3, "a listed version that has no manifest");
    FUZZ_CHECK(v.base < v.id && v.base >= -1, "a listed delta whose base is not older");
  }
  (void)(*store)->ReserveId();
  auto retained = (*store)->ApplyRetention(Tier::kLocal, /*dry_run=*/true);
  if (!retained.ok()) CheckError(retained.status());
  // One verdict for verify, list and resume: a version Verify passes is
  // intact to Inspect, and resume loads the newest intact one.
  int64_t newest_intact = -1;
  for (const spot::ckpt::VersionCheck& v : (*store)->Inspect(spot::ckpt::CheckDepth::kFull)) {
    spot::Status s = (*store)->Verify(v.id, Tier::kLocal);
    if (!s.ok()) CheckError(s);
    FUZZ_CHECK(s.ok() == v.intact(), "verify and inspect disagree on version " +
                                         std::to_string(v.id) + ": " + s.ToString());
    if (v.intact()) newest_intact = std::max(newest_intact, v.id);
  }
  auto loaded = (*store)->LoadNewestValid();
  if (loaded.ok()) {
    FUZZ_CHECK(loaded->container.VerifyRecords().empty(), "a loaded version fails its checksums");
    FUZZ_CHECK(loaded->info.id == newest_intact,
               "resume loaded version " + std::to_string(loaded->info.id) +
                   ", the newest intact one is " + std::to_string(newest_intact));
  } else {
    CheckError(loaded.status());
    FUZZ_CHECK(newest_intact < 0,
               "resume found nothing, version " + std::to_string(newest_intact) + " is intact");
  }
  return 0;
}
