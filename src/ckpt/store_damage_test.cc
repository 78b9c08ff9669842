// The store's check against damaged manifests and data files: verify, list
// and restore judge every damaged version alike. (The format reader against
// damage: format_damage_test.cc.)
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <cfloat>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <limits>
#include <map>
#include <mutex>
#include <optional>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "ckpt/format.h"
#include "ckpt/format_test_util.h"
#include "ckpt/store.h"
#include "core/temp_dir.h"

namespace spot::ckpt {
namespace {

using namespace format_testing;  // NOLINT: test helpers
namespace fs = std::filesystem;

// The store's one check against damage: whatever a damaged manifest or data
// file looks like, Verify, Inspect, Load and the restore judge it alike, and
// nothing damaged is ever restored.

class StoreDamageTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto t = TempDir::Create("spot_store_damage_test");
    ASSERT_TRUE(t.ok()) << t.status().ToString();
    tmp_.emplace(std::move(t).value());
    dir_ = tmp_->path() / "ck";
    auto s = CheckpointStore::Open({.dir = dir_.string()});
    ASSERT_TRUE(s.ok()) << s.status().ToString();
    store_ = std::move(s).value();
    // Version 1 full, version 2 a delta on it; Make(specs, seed) records
    // step `seed` in trainer/state, saved at that step.
    ChunkCodec codec;
    Container reference;
    int64_t base = -1;
    for (uint64_t seed : {1, 2}) {
      Container c = Make(SmallSpecs(), seed);
      SaveRequest req{.step = static_cast<int64_t>(seed)};
      auto v =
          store_->Write(store_->ReserveId(), c, &reference, base, base >= 0 ? 1 : 0, req, codec);
      ASSERT_TRUE(v.ok()) << v.status().ToString();
      ASSERT_EQ(v->base, base);
      base = v->id;
    }
    for (int64_t id : {1, 2}) {
      manifest_[id] = Slurp(Manifest(id));
      data_[id] = Slurp(Data(id));
    }
  }

  fs::path Manifest(int64_t id) const { return dir_ / CheckpointStore::ManifestFileName(id); }
  fs::path Data(int64_t id) const { return dir_ / CheckpointStore::DataFileName(id); }
  static std::string Slurp(const fs::path& p) {
    std::ifstream f(p, std::ios::binary);
    return std::string(std::istreambuf_iterator<char>(f), {});
  }
  static void Put(const fs::path& p, const std::string& bytes) {
    std::ofstream f(p, std::ios::binary | std::ios::trunc);
    f.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  }
  void Restore() {
    for (int64_t id : {1, 2}) {
      Put(Manifest(id), manifest_[id]);
      Put(Data(id), data_[id]);
    }
  }

  // Checks that every reader agrees on which versions are usable; returns
  // the ids the full check calls damaged.
  std::set<int64_t> ExpectAgreement(const std::string& what) {
    SCOPED_TRACE(what);
    std::map<int64_t, bool> intact;
    for (const VersionCheck& v : store_->Inspect(CheckDepth::kFull)) intact[v.id] = v.intact();
    EXPECT_EQ(intact.size(), 2u);  // nothing dropped
    for (const VersionCheck& v : store_->Inspect(CheckDepth::kQuick)) {
      // The quick check reads less: it may miss damage, never invent it.
      if (!v.intact()) EXPECT_FALSE(intact[v.id]) << v.id;
    }
    std::set<int64_t> damaged;
    int64_t newest_ok = -1;
    for (const auto& [id, ok] : intact) {
      EXPECT_EQ(store_->Verify(id, Tier::kLocal).ok(), ok) << id;
      if (!ok) damaged.insert(id);
      if (ok) newest_ok = id;
    }
    auto l = store_->LoadNewestValid();
    if (newest_ok < 0) {
      EXPECT_EQ(l.status().code(), StatusCode::kNotFound);
      return damaged;
    }
    EXPECT_TRUE(l.ok()) << l.status().ToString();
    if (!l.ok()) return damaged;
    EXPECT_EQ(l->info.id, newest_ok);
    EXPECT_EQ(l->skipped.size(),
              static_cast<size_t>(std::count_if(damaged.begin(), damaged.end(),
                                                [&](int64_t id) { return id > newest_ok; })));
    // What was restored is what was saved, at the step its manifest says.
    EXPECT_EQ(l->info.step, newest_ok);
    EXPECT_EQ(std::string(l->container.Find("trainer/state")->data),
              "{\"step\":" + std::to_string(newest_ok) + "}");
    return damaged;
  }

  std::optional<TempDir> tmp_;
  fs::path dir_;
  std::unique_ptr<CheckpointStore> store_;
  std::map<int64_t, std::string> manifest_, data_;
};

TEST_F(StoreDamageTest, IntactVersionsPass) { EXPECT_TRUE(ExpectAgreement("intact").empty()); }

TEST_F(StoreDamageTest, EveryManifestTruncationIsDamaged) {
  for (int64_t id : {1, 2}) {
    const std::string& m = manifest_[id];
    ASSERT_EQ(m.back(), '\n');
    // Every shorter prefix (only the final newline may go).
    for (size_t len = 0; len + 1 < m.size(); ++len) {
      Put(Manifest(id), m.substr(0, len));
      std::set<int64_t> damaged = ExpectAgreement(fmt::format("manifest {} cut to {}", id, len));
      EXPECT_TRUE(damaged.count(id)) << "manifest " << id << " cut to " << len;
      if (id == 1) EXPECT_TRUE(damaged.count(2)) << "a delta on a damaged base";
    }
    Restore();
  }
}

TEST_F(StoreDamageTest, EveryManifestByteFlipIsJudgedAlike) {
  int damaged = 0, harmless = 0;
  for (int64_t id : {1, 2}) {
    const std::string& m = manifest_[id];
    for (size_t i = 0; i < m.size(); ++i) {
      std::string b = m;
      b[i] = static_cast<char>(b[i] ^ 0x01);
      Put(Manifest(id), b);
      bool bad = ExpectAgreement(fmt::format("manifest {} byte {}", id, i)).count(id);
      (bad ? damaged : harmless)++;
    }
    Restore();
  }
  // Flips in the checked fields (id, step, base, sizes, checksum, the JSON
  // itself) are damage; those in the creation time, parent, codec summary
  // and metadata are not checked against anything.
  EXPECT_GT(damaged, 300);
  EXPECT_GT(harmless, 0);
}

TEST_F(StoreDamageTest, DataTruncationsAndByteFlipsAreDamaged) {
  // The reader's own tests above cut and flip every byte; here the store's
  // verdicts must agree on every byte of the delta and on a sample of its
  // base (whose damage makes both versions unusable).
  for (int64_t id : {2, 1}) {
    const std::string& d = data_[id];
    for (size_t len : {size_t{0}, size_t{1}, kHeaderBytes, d.size() / 2, d.size() - 1}) {
      Put(Data(id), d.substr(0, len));
      std::set<int64_t> damaged = ExpectAgreement(fmt::format("data {} cut to {}", id, len));
      EXPECT_TRUE(damaged.count(id) && damaged.count(2)) << "data " << id << " cut to " << len;
    }
    for (size_t i = 0; i < d.size(); i += id == 2 ? 1 : 7) {
      std::string b = d;
      b[i] = static_cast<char>(b[i] ^ 0x40);
      Put(Data(id), b);
      std::set<int64_t> damaged = ExpectAgreement(fmt::format("data {} byte {}", id, i));
      EXPECT_TRUE(damaged.count(id) && damaged.count(2)) << "data " << id << " byte " << i;
    }
    Restore();
  }
}

TEST_F(StoreDamageTest, SwappedAndMismatchedFilesAreDamaged) {
  // Each version's data under the other's name, then each manifest.
  Put(Data(1), data_[2]);
  Put(Data(2), data_[1]);
  EXPECT_EQ(ExpectAgreement("data swapped"), (std::set<int64_t>{1, 2}));
  Restore();
  Put(Manifest(1), manifest_[2]);
  Put(Manifest(2), manifest_[1]);
  EXPECT_EQ(ExpectAgreement("manifests swapped"), (std::set<int64_t>{1, 2}));
  Restore();
  // A manifest whose step is not the data's, with everything else right.
  std::string m = manifest_[2];
  size_t at = m.find("\"step\": 2");
  ASSERT_NE(at, std::string::npos) << m;
  m[at + 8] = '7';
  Put(Manifest(2), m);
  EXPECT_EQ(ExpectAgreement("step 7"), (std::set<int64_t>{2}));
  Status st = store_->Verify(2, Tier::kLocal);
  EXPECT_NE(st.message().find("holds step 2"), std::string::npos) << st.ToString();
}

}  // namespace
}  // namespace spot::ckpt
