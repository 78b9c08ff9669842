#include "ckpt/blob_store.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "ckpt/blob_store_contract.h"
#include "ckpt/container.h"
#include "core/file_io.h"
#include "core/temp_dir.h"

namespace spot::ckpt {
namespace {

namespace fs = std::filesystem;

std::vector<std::string> DirEntries(const fs::path& dir) {
  std::vector<std::string> out;
  for (const auto& e : fs::directory_iterator(dir)) out.push_back(e.path().filename().string());
  std::sort(out.begin(), out.end());
  return out;
}

void WriteRaw(const fs::path& p, std::string_view bytes) {
  std::ofstream f(p, std::ios::binary);
  f.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

// The shared contract (blob_store_contract.h) over directories; the tests
// below add what is particular to a directory (files, temporary files).
struct DirectoryFactory {
  void SetUp() {
    auto d = TempDir::Create("spot_blob_contract");
    ASSERT_TRUE(d.ok()) << d.status().ToString();
    tmp.emplace(std::move(d).value());
  }
  Result<std::unique_ptr<BlobStore>> Open(const std::string& name) {
    auto s = DirectoryBlobStore::Open((tmp->path() / name).string());
    if (!s.ok()) return s.status();
    return std::unique_ptr<BlobStore>(std::move(s).value());
  }
  std::optional<TempDir> tmp;
};
INSTANTIATE_TYPED_TEST_SUITE_P(Directory, BlobStoreContractTest, DirectoryFactory);

class BlobStoreTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto d = TempDir::Create("spot_blob_test");
    ASSERT_TRUE(d.ok()) << d.status().ToString();
    tmp_.emplace(std::move(d).value());
    dir_ = (tmp_->path() / "blobs").string();
    auto s = DirectoryBlobStore::Open(dir_);
    ASSERT_TRUE(s.ok()) << s.status().ToString();
    store_ = std::move(s).value();
  }

  std::optional<TempDir> tmp_;
  std::string dir_;
  std::unique_ptr<DirectoryBlobStore> store_;
};

TEST_F(BlobStoreTest, OpenCreatesTheDirectory) {
  EXPECT_TRUE(fs::is_directory(dir_));
  EXPECT_EQ(store_->dir(), dir_);
  EXPECT_EQ(store_->Describe("x.bin"), (fs::path(dir_) / "x.bin").string());
  auto nested = DirectoryBlobStore::Open((tmp_->path() / "a" / "b" / "c").string());
  ASSERT_TRUE(nested.ok()) << nested.status().ToString();
  EXPECT_TRUE(fs::is_directory(tmp_->path() / "a" / "b" / "c"));
  EXPECT_EQ(DirectoryBlobStore::Open("").status().code(), StatusCode::kInvalidArgument);
}

TEST_F(BlobStoreTest, PutReadSize) {
  ASSERT_TRUE(store_->Put("a", "hello world").ok());
  auto r = store_->Read("a");
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(*r, "hello world");
  auto n = store_->Size("a");
  ASSERT_TRUE(n.ok());
  EXPECT_EQ(*n, 11u);
  // The blob is a plain file of that name.
  auto f = ReadFile((fs::path(dir_) / "a").string());
  ASSERT_TRUE(f.ok());
  EXPECT_EQ(*f, "hello world");

  // An empty blob.
  ASSERT_TRUE(store_->Put("empty", "").ok());
  EXPECT_EQ(*store_->Size("empty"), 0u);
  EXPECT_EQ(*store_->Read("empty"), "");

  // Put replaces.
  ASSERT_TRUE(store_->Put("a", "xy").ok());
  EXPECT_EQ(*store_->Read("a"), "xy");
}

TEST_F(BlobStoreTest, ListIsSortedAndHidesTemporaryFilesAndDirectories) {
  for (const char* n : {"c", "a", "b.json", "ckpt-000002.bin", "ckpt-000001.bin"}) {
    ASSERT_TRUE(store_->Put(n, n).ok());
  }
  WriteRaw(fs::path(dir_) / ".tmp.zzz.123", "partial");
  fs::create_directory(fs::path(dir_) / "subdir");
  auto l = store_->List();
  ASSERT_TRUE(l.ok()) << l.status().ToString();
  EXPECT_EQ(*l,
            (std::vector<std::string>{"a", "b.json", "c", "ckpt-000001.bin", "ckpt-000002.bin"}));
  // An empty store lists nothing.
  auto e = DirectoryBlobStore::Open((tmp_->path() / "empty").string());
  ASSERT_TRUE(e.ok());
  auto el = (*e)->List();
  ASSERT_TRUE(el.ok());
  EXPECT_TRUE(el->empty());
}

TEST_F(BlobStoreTest, ListSkipsEntriesItCannotStat) {
  // A dangling symlink (or a file deleted while listing) must not make the
  // whole listing fail: the checkpoint store would see an empty directory.
  ASSERT_TRUE(store_->Put("ckpt-000001.json", "{}").ok());
  fs::create_symlink(tmp_->path() / "nowhere", fs::path(dir_) / "ckpt-000002.json");
  auto l = store_->List();
  ASSERT_TRUE(l.ok()) << l.status().ToString();
  EXPECT_EQ(*l, std::vector<std::string>{"ckpt-000001.json"});
}

TEST_F(BlobStoreTest, UncommittedWriterLeavesNothingVisible) {
  {
    auto w = store_->Create("pending");
    ASSERT_TRUE(w.ok()) << w.status().ToString();
    ASSERT_TRUE((*w)->Append("some bytes").ok());
    ASSERT_TRUE((*w)->Append(std::string(100000, 'z')).ok());
    EXPECT_EQ(store_->Size("pending").status().code(), StatusCode::kNotFound);
    EXPECT_TRUE(store_->List()->empty());
    // The bytes sit in a temporary file meanwhile.
    std::vector<std::string> entries = DirEntries(dir_);
    ASSERT_EQ(entries.size(), 1u);
    EXPECT_TRUE(entries[0].starts_with(kTempFilePrefix)) << entries[0];
  }
  // Destroyed without Commit: the temporary file is gone too.
  EXPECT_TRUE(DirEntries(dir_).empty());
  EXPECT_EQ(store_->Size("pending").status().code(), StatusCode::kNotFound);
}

TEST_F(BlobStoreTest, UncommittedWriterKeepsThePreviousBlob) {
  ASSERT_TRUE(store_->Put("v", "old").ok());
  {
    auto w = store_->Create("v");
    ASSERT_TRUE(w.ok());
    ASSERT_TRUE((*w)->Append("new").ok());
    EXPECT_EQ(*store_->Read("v"), "old");
  }
  EXPECT_EQ(*store_->Read("v"), "old");
  auto w = store_->Create("v");
  ASSERT_TRUE(w.ok());
  ASSERT_TRUE((*w)->Append("ne").ok());
  ASSERT_TRUE((*w)->Append("w!").ok());
  ASSERT_TRUE((*w)->Commit().ok());
  EXPECT_EQ(*store_->Read("v"), "new!");
  EXPECT_EQ(DirEntries(dir_), std::vector<std::string>{"v"});
}

TEST_F(BlobStoreTest, OpenRemovesLeftoverTemporaryFiles) {
  ASSERT_TRUE(store_->Put("keep", "k").ok());
  WriteRaw(fs::path(dir_) / ".tmp.ckpt-000001.bin.4242", "interrupted");
  WriteRaw(fs::path(dir_) / ".tmp.other", "x");
  WriteRaw(fs::path(dir_) / "not.tmp.file", "y");  // only the prefix counts
  auto reopened = DirectoryBlobStore::Open(dir_);
  ASSERT_TRUE(reopened.ok()) << reopened.status().ToString();
  EXPECT_EQ(DirEntries(dir_), (std::vector<std::string>{"keep", "not.tmp.file"}));
  EXPECT_EQ(*(*reopened)->Read("keep"), "k");
}

TEST_F(BlobStoreTest, InvalidNamesAreRejected) {
  for (const std::string& bad : {std::string(""), std::string("a/b"), std::string("/abs"),
                                 std::string("."), std::string(".."), std::string(".tmp.x"),
                                 std::string(kTempFilePrefix), std::string("../up")}) {
    auto w = store_->Create(bad);
    EXPECT_EQ(w.status().code(), StatusCode::kInvalidArgument) << "'" << bad << "'";
    EXPECT_EQ(store_->Put(bad, "x").code(), StatusCode::kInvalidArgument) << "'" << bad << "'";
  }
  EXPECT_TRUE(DirEntries(dir_).empty());
  EXPECT_FALSE(fs::exists(tmp_->path() / "up"));
  // Names that merely contain dots are fine.
  EXPECT_TRUE(store_->Put("...", "x").ok());
  EXPECT_TRUE(store_->Put("a.tmp.b", "x").ok());
}

}  // namespace
}  // namespace spot::ckpt
