// Test helpers of the checkpoint store's tests (store_test.cc,
// store_verify_test.cc, store_retention_test.cc): a small deterministic
// state, file damage, and the StoreTest fixture (a store in a temporary
// directory, full saves and delta chains). Not for production code.
#pragma once

#include <fmt/format.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "ckpt/store.h"
#include "core/file_io.h"
#include "core/temp_dir.h"

namespace spot::ckpt::store_testing {

namespace fs = std::filesystem;

// A small state whose every byte depends on `seed`: a few records of several
// dtypes, the same layout for every seed.
inline Container State(uint64_t seed) {
  Container c;
  uint64_t x = seed * 0x9E3779B97F4A7C15ULL + 1;
  auto next = [&] {
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    return x;
  };
  for (auto [name, dtype, shape] :
       std::vector<std::tuple<std::string, DType, std::vector<int64_t>>>{
           {"model/w", DType::kF32, {32, 32}},
           {"model/b", DType::kF32, {32}},
           {"optim/w.momentum", DType::kF32, {32, 32}},
           {"step", DType::kI64, {}}}) {
    std::span<char> d = c.AddUninitialized(name, dtype, shape);
    if (dtype == DType::kF32) {
      for (size_t i = 0; i < d.size() / 4; ++i) {
        float f = static_cast<float>(next() % 20000) / 10000.0f - 1.0f;
        std::memcpy(d.data() + 4 * i, &f, 4);
      }
    } else {
      int64_t v = static_cast<int64_t>(seed);
      std::memcpy(d.data(), &v, 8);
    }
  }
  // The trainer's counters: the step the store checks against the manifest's
  // (SaveFull and WriteChain save State(seed) at step 10 * seed).
  c.AddBytes("trainer/state", fmt::format("{{\"seed\":{},\"step\":{}}}", seed, 10 * seed));
  return c;
}

inline void ExpectSame(const Container& got, const Container& want, const std::string& what = "") {
  ASSERT_EQ(got.records().size(), want.records().size()) << what;
  for (size_t i = 0; i < want.records().size(); ++i) {
    EXPECT_EQ(got.records()[i].name, want.records()[i].name) << what;
    EXPECT_EQ(got.records()[i].dtype, want.records()[i].dtype) << what;
    EXPECT_EQ(got.records()[i].shape, want.records()[i].shape) << what;
    EXPECT_TRUE(got.records()[i].data == want.records()[i].data)
        << what << ": " << want.records()[i].name << " differs";
  }
}

inline std::string ReadAll(const fs::path& p) {
  auto r = ReadFile(p.string());
  EXPECT_TRUE(r.ok()) << r.status().ToString();
  return r.ok() ? *r : "";
}

inline void WriteAll(const fs::path& p, const std::string& bytes) {
  std::ofstream f(p, std::ios::binary | std::ios::trunc);
  f.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

inline void FlipByte(const fs::path& p, size_t offset) {
  std::string b = ReadAll(p);
  ASSERT_LT(offset, b.size());
  b[offset] = static_cast<char>(b[offset] ^ 0x40);
  WriteAll(p, b);
}

inline void Truncate(const fs::path& p, size_t len) { fs::resize_file(p, len); }

inline bool Contains(const std::vector<std::string>& v, std::string_view needle) {
  for (const std::string& s : v) {
    if (s.find(needle) != std::string::npos) return true;
  }
  return false;
}

inline std::string Join(const std::vector<std::string>& v) {
  std::string out;
  for (const std::string& s : v) out += s + "\n";
  return out;
}

class StoreTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto t = TempDir::Create("spot_store_test");
    ASSERT_TRUE(t.ok()) << t.status().ToString();
    tmp_.emplace(std::move(t).value());
    local_ = tmp_->path() / "local";
    durable_ = tmp_->path() / "durable";
  }

  std::unique_ptr<CheckpointStore> Open(RetentionPolicy retention = Keep(100),
                                        bool with_durable = false) {
    StoreOptions o;
    o.dir = local_.string();
    if (with_durable) o.durable_dir = durable_.string();
    o.retention = retention;
    auto s = CheckpointStore::Open(o);
    EXPECT_TRUE(s.ok()) << s.status().ToString();
    return s.ok() ? std::move(s).value() : nullptr;
  }

  static RetentionPolicy Keep(int n) {
    RetentionPolicy p;
    p.keep_last = n;
    return p;
  }

  // Saves full versions of State(seed) for each seed; step = 10 * seed.
  std::vector<VersionInfo> SaveFull(CheckpointStore& s, std::vector<uint64_t> seeds,
                                    std::string metric = "") {
    std::vector<VersionInfo> out;
    for (uint64_t seed : seeds) {
      Container c = State(seed);
      SaveRequest req;
      req.step = static_cast<int64_t>(10 * seed);
      req.meta_json = metric.empty() ? "{\"seed\":" + std::to_string(seed) + "}"
                                     : "{\"" + metric + "\":" + std::to_string(seed % 7) + "}";
      auto v = s.Save(c, req);
      EXPECT_TRUE(v.ok()) << v.status().ToString();
      if (v.ok()) out.push_back(*v);
    }
    return out;
  }

  // Writes a chain: full, then `deltas` deltas, of State(first), State(first+1), ...
  // through Write with a reference. Returns the infos.
  std::vector<VersionInfo> WriteChain(CheckpointStore& s, uint64_t first, int deltas,
                                      Codec delta_codec = Codec::kSubDelta) {
    std::vector<VersionInfo> out;
    ChunkCodec codec;
    Container reference;
    int64_t base = -1;
    int depth = 0;
    for (int i = 0; i <= deltas; ++i) {
      Container c = State(first + static_cast<uint64_t>(i));
      SaveRequest req;
      req.step = static_cast<int64_t>(10 * (first + static_cast<uint64_t>(i)));
      req.plan.delta = delta_codec;
      auto v = s.Write(s.ReserveId(), c, &reference, base, base >= 0 ? depth + 1 : 0, req, codec);
      EXPECT_TRUE(v.ok()) << v.status().ToString();
      if (!v.ok()) return out;
      out.push_back(*v);
      base = v->id;
      depth = v->chain_depth;
    }
    return out;
  }

  fs::path LocalData(int64_t id) const { return local_ / CheckpointStore::DataFileName(id); }
  fs::path LocalManifest(int64_t id) const {
    return local_ / CheckpointStore::ManifestFileName(id);
  }
  fs::path DurableData(int64_t id) const { return durable_ / CheckpointStore::DataFileName(id); }

  std::vector<int64_t> IdsIn(const fs::path& dir) const {
    std::set<int64_t> ids;
    if (!fs::exists(dir)) return {};
    for (const auto& e : fs::directory_iterator(dir)) {
      int64_t id = CheckpointStore::ParseId(e.path().filename().string());
      if (id >= 0) ids.insert(id);
    }
    return {ids.begin(), ids.end()};
  }

  std::optional<TempDir> tmp_;
  fs::path local_, durable_;
};

inline void EditManifest(const fs::path& p, const std::function<void(nlohmann::json&)>& edit) {
  nlohmann::json j = nlohmann::json::parse(ReadAll(p));
  edit(j);
  WriteAll(p, j.dump(2));
}

inline void Swap(const fs::path& a, const fs::path& b) {
  std::string x = ReadAll(a), y = ReadAll(b);
  WriteAll(a, y);
  WriteAll(b, x);
}

struct DamageCase {
  const char* name;
  std::function<void(const fs::path& dir)> damage;  // on SaveFull({1, 2, 3}) in `dir`
  std::vector<int64_t> damaged;                     // the versions it damages
  const char* reason;                               // in every damaged version's reason
  bool quick_sees_it;                               // found without reading every byte
};

inline std::vector<DamageCase> DamageCases() {
  auto data = [](const fs::path& d, int64_t id) { return d / CheckpointStore::DataFileName(id); };
  auto manifest = [](const fs::path& d, int64_t id) {
    return d / CheckpointStore::ManifestFileName(id);
  };
  return {
      {"truncated manifest",
       [=](const fs::path& d) { Truncate(manifest(d, 3), fs::file_size(manifest(d, 3)) / 2); },
       {3},
       "malformed manifest",
       true},
      {"manifest id is not its file's",
       [=](const fs::path& d) { EditManifest(manifest(d, 3), [](auto& j) { j["id"] = 2; }); },
       {3},
       "id 2 does not match the file name's 3",
       true},
      {"manifests swapped",
       [=](const fs::path& d) { Swap(manifest(d, 2), manifest(d, 3)); },
       {3, 2},
       "does not match the file name's",
       true},
      {"data files swapped",
       [=](const fs::path& d) { Swap(data(d, 2), data(d, 3)); },
       {3, 2},
       "files swapped or renamed?",
       true},
      {"manifest step is not the data's",
       [=](const fs::path& d) { EditManifest(manifest(d, 3), [](auto& j) { j["step"] = 5; }); },
       {3},
       "holds step 30 (its trainer/state record), the manifest says step 5",
       true},
      {"wrong index checksum in the manifest",
       [=](const fs::path& d) {
         EditManifest(manifest(d, 3),
                      [](auto& j) { j["index_checksum"] = "xxh3-64:0123456789abcdef"; });
       },
       {3},
       "does not match the manifest's 0123456789abcdef",
       true},
      {"malformed index checksum in the manifest",
       [=](const fs::path& d) {
         EditManifest(manifest(d, 3), [](auto& j) { j["index_checksum"] = 17; });
       },
       {3},
       "malformed manifest",
       true},
      // A manifest written before index checksums existed: its whole-file
      // checksum is what binds the data.
      {"wrong whole-file checksum in a manifest without an index checksum",
       [=](const fs::path& d) {
         EditManifest(manifest(d, 3), [](auto& j) {
           j.erase("index_checksum");
           j["checksum"] = "xxh3-64:0123456789abcdef";
         });
       },
       {3},
       "does not match the manifest's 0123456789abcdef",
       false},
      // fuzz/regressions/ckpt_manifest/: a float where an integer belongs
      // was cast to int64_t (undefined out of range); now the manifest is
      // malformed.
      {"manifest step is a float out of range",
       [=](const fs::path& d) { EditManifest(manifest(d, 3), [](auto& j) { j["step"] = 1e30; }); },
       {3},
       "step: expected an integer (got 1e+30)",
       true},
      {"manifest checksum with a sign",
       [=](const fs::path& d) {
         EditManifest(manifest(d, 3), [](auto& j) { j["checksum"] = "xxh3-64:-123456789abcdef"; });
       },
       {3},
       "checksum is not xxh3-64:<16 hex digits>",
       true},
      {"data file deleted",
       [=](const fs::path& d) { fs::remove(data(d, 3)); },
       {3},
       "missing, though its manifest is there",
       true},
  };
}

}  // namespace spot::ckpt::store_testing
