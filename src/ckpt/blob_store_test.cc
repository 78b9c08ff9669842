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

TEST_F(BlobStoreTest, MissingBlobsAreNotFound) {
  EXPECT_EQ(store_->Size("nope").status().code(), StatusCode::kNotFound);
  EXPECT_EQ(store_->Read("nope").status().code(), StatusCode::kNotFound);
  char buf[4];
  EXPECT_EQ(store_->ReadInto("nope", 0, buf).code(), StatusCode::kNotFound);
}

TEST_F(BlobStoreTest, ReadIntoRanges) {
  std::string data(1000, '\0');
  for (size_t i = 0; i < data.size(); ++i) data[i] = static_cast<char>(i * 7 + 3);
  ASSERT_TRUE(store_->Put("r", data).ok());
  struct Case {
    uint64_t offset;
    size_t n;
  };
  for (Case c : {Case{0, 0}, Case{0, 1}, Case{0, 1000}, Case{1, 999}, Case{500, 17}, Case{999, 1},
                 Case{1000, 0}}) {
    std::string buf(c.n, '\x55');
    Status st = store_->ReadInto("r", c.offset, std::span<char>(buf));
    ASSERT_TRUE(st.ok()) << c.offset << "+" << c.n << ": " << st.ToString();
    EXPECT_EQ(buf, data.substr(c.offset, c.n)) << c.offset << "+" << c.n;
  }
  // Past the end: DataLoss.
  for (Case c : {Case{0, 1001}, Case{999, 2}, Case{1000, 1}, Case{5000, 3}}) {
    std::string buf(c.n, '\0');
    EXPECT_EQ(store_->ReadInto("r", c.offset, std::span<char>(buf)).code(), StatusCode::kDataLoss)
        << c.offset << "+" << c.n;
  }
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

TEST_F(BlobStoreTest, DeleteRemovesAndMissingIsOk) {
  ASSERT_TRUE(store_->Put("x", "1").ok());
  ASSERT_TRUE(store_->Put("y", "2").ok());
  EXPECT_TRUE(store_->Delete("x").ok());
  EXPECT_EQ(store_->Size("x").status().code(), StatusCode::kNotFound);
  EXPECT_TRUE(store_->Delete("x").ok());  // again: still OK
  EXPECT_TRUE(store_->Delete("never-existed").ok());
  EXPECT_EQ(*store_->List(), std::vector<std::string>{"y"});
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

TEST_F(BlobStoreTest, CopyBlobReturnsTheChecksumOfTheBytes) {
  auto other = DirectoryBlobStore::Open((tmp_->path() / "other").string());
  ASSERT_TRUE(other.ok());
  std::mt19937_64 rng(7);
  // Larger than CopyBlob's 8 MiB buffer, so it streams in several pieces.
  std::string big((8u << 20) + 12345, '\0');
  for (size_t i = 0; i < big.size(); i += 8) {
    uint64_t x = rng();
    std::memcpy(big.data() + i, &x, std::min<size_t>(8, big.size() - i));
  }
  for (const auto& [name, data] : std::vector<std::pair<std::string, std::string>>{
           {"small", "abc"}, {"empty", ""}, {"big", big}}) {
    ASSERT_TRUE(store_->Put(name, data).ok());
    auto sum = CopyBlob(*store_, **other, name);
    ASSERT_TRUE(sum.ok()) << name << ": " << sum.status().ToString();
    EXPECT_EQ(*sum, Checksum(data)) << name;
    auto copy = (*other)->Read(name);
    ASSERT_TRUE(copy.ok());
    EXPECT_TRUE(*copy == data) << name;
  }
  EXPECT_EQ(CopyBlob(*store_, **other, "missing").status().code(), StatusCode::kNotFound);
  EXPECT_EQ(DirEntries((*other)->dir()), (std::vector<std::string>{"big", "empty", "small"}));
}

}  // namespace
}  // namespace spot::ckpt
