// CheckpointStore: a directory of checkpoint versions.
//
// Version `id` is two files: `ckpt-<id>.bin` (the encoded Container) and
// `ckpt-<id>.json` (its manifest: format, id, step, parent id, sizes,
// checksum, free-form metadata). Both are written crash-safely, data first;
// the manifest's rename is the commit point, so a version is visible only when
// complete. Loading verifies size and checksum against the manifest and the
// file's own checksums; a damaged, truncated or manifest-less newest version is
// reported and skipped for the one before.
//
// Not thread-safe; one writer per directory.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "ckpt/container.h"
#include "core/status.h"

namespace spot::ckpt {

struct VersionInfo {
  int64_t id = 0;
  int64_t step = 0;
  int64_t parent = -1;       // id of the version training resumed from, -1 for none
  uint64_t file_bytes = 0;
  uint64_t payload_bytes = 0;
  uint64_t checksum = 0;     // XXH3-64 of the data file (without its footer)
  int64_t created_unix_ms = 0;
  std::string meta_json;     // caller's metadata, a JSON object
  std::string data_path;
  std::string manifest_path;
};

struct StoreOptions {
  std::string dir;           // created when missing
  int keep_last = 3;         // versions kept after each save (>= 1); older ones are deleted
};

class CheckpointStore {
 public:
  // Opens (creating) the directory and removes temporary files a crash left.
  static Result<CheckpointStore> Open(StoreOptions options);

  // Writes `c` as a new version with the next id. `parent` is the id this
  // training state descends from (-1 for none). Then applies retention.
  Result<VersionInfo> Save(Container& c, int64_t step, int64_t parent,
                           const std::string& meta_json);

  struct Loaded {
    VersionInfo info;
    Container container;
    std::vector<std::string> skipped;  // why each newer version was passed over
  };
  // Loads the newest version that passes every check. NotFound (with the
  // reasons in the message) when there is none.
  Result<Loaded> LoadNewestValid() const;

  // Reads and verifies one version by id.
  Result<Container> Load(const VersionInfo& info) const;

  // True when the directory holds no version at all (valid or not).
  bool Empty() const { return AllIds().empty(); }

  // Manifests that parse, newest first (not verified against their data).
  std::vector<VersionInfo> List() const;

  const std::string& dir() const { return opt_.dir; }

  static std::string DataFileName(int64_t id);
  static std::string ManifestFileName(int64_t id);

 private:
  explicit CheckpointStore(StoreOptions o) : opt_(std::move(o)) {}
  // Ids of every version that has a data file or a manifest, ascending.
  std::vector<int64_t> AllIds() const;
  Result<VersionInfo> ReadManifest(int64_t id) const;
  void ApplyRetention(int64_t keep_id, int64_t keep_parent);

  StoreOptions opt_;
};

}  // namespace spot::ckpt
