#include "core/temp_dir.h"
#include "ckpt/store.h"

#include <optional>
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <fstream>

#include "core/file_io.h"

namespace spot::ckpt {
namespace {

namespace fs = std::filesystem;

Container WithValue(int64_t v) {
  Container c;
  std::span<char> s = c.AddUninitialized("value", DType::kI64, {});
  std::memcpy(s.data(), &v, 8);
  std::span<char> big = c.AddUninitialized("big", DType::kF32, {1000});
  std::memset(big.data(), static_cast<int>(v), big.size());
  return c;
}

int64_t ValueOf(const Container& c) {
  int64_t v;
  std::memcpy(&v, c.Find("value")->data.data(), 8);
  return v;
}

class StoreTest : public ::testing::Test {
 protected:
  void SetUp() override {
    tmp_.emplace(TempDir::Create("spot_store_test").value());
    dir_ = tmp_->path();
  }

  CheckpointStore OpenStore(int keep = 3) {
    auto s = CheckpointStore::Open({.dir = dir_.string(), .keep_last = keep});
    EXPECT_TRUE(s.ok()) << s.status().ToString();
    return std::move(s).value();
  }
  // Saves versions with values 1..n (steps 100, 200, ...), each the parent of the next.
  void SaveN(CheckpointStore& s, int n) {
    int64_t parent = -1;
    for (int i = 1; i <= n; ++i) {
      Container c = WithValue(i);
      auto v = s.Save(c, i * 100, parent, R"({"epoch": 0})");
      ASSERT_TRUE(v.ok()) << v.status().ToString();
      parent = v->id;
    }
  }
  std::optional<TempDir> tmp_;
  fs::path dir_;
};

TEST_F(StoreTest, SavesAndLoadsNewest) {
  CheckpointStore s = OpenStore();
  SaveN(s, 2);
  auto l = s.LoadNewestValid();
  ASSERT_TRUE(l.ok()) << l.status().ToString();
  EXPECT_EQ(l->info.id, 2);
  EXPECT_EQ(l->info.step, 200);
  EXPECT_EQ(l->info.parent, 1);
  EXPECT_EQ(l->info.meta_json, R"({"epoch":0})");
  EXPECT_EQ(ValueOf(l->container), 2);
  EXPECT_TRUE(l->skipped.empty());
  std::vector<VersionInfo> all = s.List();
  ASSERT_EQ(all.size(), 2u);
  EXPECT_EQ(all[0].id, 2);
}

TEST_F(StoreTest, EmptyDirectoryHasNoValidVersion) {
  CheckpointStore s = OpenStore();
  auto l = s.LoadNewestValid();
  EXPECT_EQ(l.status().code(), StatusCode::kNotFound);
}

TEST_F(StoreTest, RetentionKeepsTheLastVersions) {
  CheckpointStore s = OpenStore(2);
  SaveN(s, 5);
  std::vector<VersionInfo> all = s.List();
  ASSERT_EQ(all.size(), 2u);
  EXPECT_EQ(all[0].id, 5);
  EXPECT_EQ(all[1].id, 4);
  EXPECT_FALSE(fs::exists(dir_ / CheckpointStore::DataFileName(3)));
}

struct Damage {
  const char* name;
  void (*apply)(const fs::path& data, const fs::path& manifest);
  const char* reason;
};

const Damage kDamages[] = {
    {"truncate",
     [](const fs::path& d, const fs::path&) { fs::resize_file(d, fs::file_size(d) / 2); },
     "truncated"},
    {"flip",
     [](const fs::path& d, const fs::path&) {
       std::fstream f(d, std::ios::in | std::ios::out | std::ios::binary);
       f.seekg(200);
       char ch;
       f.get(ch);
       f.seekp(200);
       f.put(static_cast<char>(ch ^ 0x10));
     },
     "checksum"},
    {"no_manifest", [](const fs::path&, const fs::path& m) { fs::remove(m); }, "no manifest"},
    {"no_data", [](const fs::path& d, const fs::path&) { fs::remove(d); }, "missing"},
    {"bad_manifest",
     [](const fs::path&, const fs::path& m) { std::ofstream(m) << "{\"format\": 3"; },
     "malformed manifest"},
};

TEST_F(StoreTest, DamagedNewestFallsBackToPrevious) {
  for (const Damage& dmg : kDamages) {
    SCOPED_TRACE(dmg.name);
    fs::remove_all(dir_);
    CheckpointStore s = OpenStore();
    SaveN(s, 3);
    dmg.apply(dir_ / CheckpointStore::DataFileName(3), dir_ / CheckpointStore::ManifestFileName(3));
    auto l = s.LoadNewestValid();
    ASSERT_TRUE(l.ok()) << l.status().ToString();
    EXPECT_EQ(l->info.id, 2);
    EXPECT_EQ(ValueOf(l->container), 2);
    ASSERT_EQ(l->skipped.size(), 1u);
    EXPECT_NE(l->skipped[0].find(dmg.reason), std::string::npos) << l->skipped[0];
    EXPECT_NE(l->skipped[0].find("ckpt-000003"), std::string::npos) << l->skipped[0];
    // The next save gets a fresh id and descends from the version loaded.
    Container c = WithValue(9);
    auto v = s.Save(c, 300, l->info.id, "");
    ASSERT_TRUE(v.ok());
    EXPECT_EQ(v->id, 4);
    EXPECT_EQ(v->parent, 2);
  }
}

TEST_F(StoreTest, NoValidVersionSaysWhy) {
  CheckpointStore s = OpenStore();
  SaveN(s, 1);
  fs::resize_file(dir_ / CheckpointStore::DataFileName(1), 10);
  auto l = s.LoadNewestValid();
  ASSERT_EQ(l.status().code(), StatusCode::kNotFound);
  EXPECT_NE(l.status().message().find("skipped"), std::string::npos);
}

TEST_F(StoreTest, OpenRemovesLeftoverTemporaryFiles) {
  fs::create_directories(dir_);
  std::ofstream(dir_ / (std::string(kTempFilePrefix) + "ckpt-000001.bin.123")) << "partial";
  CheckpointStore s = OpenStore();
  EXPECT_TRUE(fs::is_empty(dir_));
}

}  // namespace
}  // namespace spot::ckpt
