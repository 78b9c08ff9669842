// The contract every BlobStore keeps, as a typed test suite each store's test
// instantiates with a factory of fresh, empty stores:
//
//   struct DirFactory {
//     void SetUp();  // may GTEST_SKIP() or fail
//     Result<std::unique_ptr<BlobStore>> Open(const std::string& name);  // a new empty store
//   };
//   INSTANTIATE_TYPED_TEST_SUITE_P(Directory, BlobStoreContractTest, DirFactory);
//
// What it checks: committed blobs read back whole and by ranges, sizes,
// NotFound and DataLoss, sorted listing, deletion, that nothing is visible
// before Commit() (and an uncommitted writer keeps the previous blob), name
// validation and CopyBlob across stores.
#pragma once

#include <gtest/gtest.h>

#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "ckpt/blob_store.h"
#include "ckpt/container.h"
#include "core/file_io.h"

namespace spot::ckpt {

// `n` bytes that depend only on `seed`.
inline std::string RandomBytes(size_t n, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::string out(n, '\0');
  for (size_t i = 0; i < n; i += 8) {
    uint64_t x = rng();
    std::memcpy(out.data() + i, &x, std::min<size_t>(8, n - i));
  }
  return out;
}

template <typename Factory>
class BlobStoreContractTest : public ::testing::Test {
 protected:
  void SetUp() override {
    factory_.SetUp();
    if (this->HasFatalFailure() || this->IsSkipped()) return;
    store_ = NewStore("main");
  }

  std::unique_ptr<BlobStore> NewStore(const std::string& name) {
    auto s = factory_.Open(name);
    EXPECT_TRUE(s.ok()) << s.status().ToString();
    return s.ok() ? std::move(s).value() : nullptr;
  }

  Factory factory_;
  std::unique_ptr<BlobStore> store_;
};

TYPED_TEST_SUITE_P(BlobStoreContractTest);

TYPED_TEST_P(BlobStoreContractTest, PutReadSizeReplace) {
  BlobStore& s = *this->store_;
  ASSERT_TRUE(s.Put("a", "hello world").ok());
  auto r = s.Read("a");
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(*r, "hello world");
  EXPECT_EQ(*s.Size("a"), 11u);
  ASSERT_TRUE(s.Put("empty", "").ok());
  EXPECT_EQ(*s.Size("empty"), 0u);
  EXPECT_EQ(*s.Read("empty"), "");
  ASSERT_TRUE(s.Put("a", "xy").ok());
  EXPECT_EQ(*s.Read("a"), "xy");
  EXPECT_NE(s.Describe("a").find("a"), std::string::npos);
}

TYPED_TEST_P(BlobStoreContractTest, MissingBlobsAreNotFound) {
  BlobStore& s = *this->store_;
  EXPECT_EQ(s.Size("nope").status().code(), StatusCode::kNotFound);
  EXPECT_EQ(s.Read("nope").status().code(), StatusCode::kNotFound);
  char buf[4];
  EXPECT_EQ(s.ReadInto("nope", 0, buf).code(), StatusCode::kNotFound);
}

TYPED_TEST_P(BlobStoreContractTest, ReadIntoRanges) {
  BlobStore& s = *this->store_;
  std::string data(1000, '\0');
  for (size_t i = 0; i < data.size(); ++i) data[i] = static_cast<char>(i * 7 + 3);
  ASSERT_TRUE(s.Put("r", data).ok());
  struct Case {
    uint64_t offset;
    size_t n;
  };
  for (Case c : {Case{0, 0}, Case{0, 1}, Case{0, 1000}, Case{1, 999}, Case{500, 17}, Case{999, 1},
                 Case{1000, 0}}) {
    std::string buf(c.n, '\x55');
    Status st = s.ReadInto("r", c.offset, std::span<char>(buf));
    ASSERT_TRUE(st.ok()) << c.offset << "+" << c.n << ": " << st.ToString();
    EXPECT_EQ(buf, data.substr(c.offset, c.n)) << c.offset << "+" << c.n;
  }
  for (Case c : {Case{0, 1001}, Case{999, 2}, Case{1000, 1}, Case{5000, 3}}) {
    std::string buf(c.n, '\0');
    EXPECT_EQ(s.ReadInto("r", c.offset, std::span<char>(buf)).code(), StatusCode::kDataLoss)
        << c.offset << "+" << c.n;
  }
}

TYPED_TEST_P(BlobStoreContractTest, AReaderReadsRangesOfItsBlob) {
  BlobStore& s = *this->store_;
  EXPECT_EQ(s.OpenReader("nope").status().code(), StatusCode::kNotFound);
  std::string data(1000, '\0');
  for (size_t i = 0; i < data.size(); ++i) data[i] = static_cast<char>(i * 5 + 1);
  ASSERT_TRUE(s.Put("r", data).ok());
  auto reader = s.OpenReader("r");
  ASSERT_TRUE(reader.ok()) << reader.status().ToString();
  EXPECT_EQ((*reader)->size(), 1000u);
  for (auto [offset, n] : {std::pair<uint64_t, size_t>{0, 1000}, {999, 1}, {500, 17}, {1000, 0}}) {
    std::string buf(n, '\x55');
    Status st = (*reader)->ReadInto(offset, std::span<char>(buf));
    ASSERT_TRUE(st.ok()) << offset << "+" << n << ": " << st.ToString();
    EXPECT_EQ(buf, data.substr(offset, n)) << offset << "+" << n;
  }
  std::string past(2, '\0');
  EXPECT_EQ((*reader)->ReadInto(999, std::span<char>(past)).code(), StatusCode::kDataLoss);
}

TYPED_TEST_P(BlobStoreContractTest, ListIsSorted) {
  BlobStore& s = *this->store_;
  auto empty = s.List();
  ASSERT_TRUE(empty.ok()) << empty.status().ToString();
  EXPECT_TRUE(empty->empty());
  for (const char* n : {"c", "a", "b.json", "ckpt-000002.bin", "ckpt-000001.bin"}) {
    ASSERT_TRUE(s.Put(n, n).ok());
  }
  auto l = s.List();
  ASSERT_TRUE(l.ok()) << l.status().ToString();
  EXPECT_EQ(*l,
            (std::vector<std::string>{"a", "b.json", "c", "ckpt-000001.bin", "ckpt-000002.bin"}));
  // Another store sees none of them.
  auto other = this->NewStore("other");
  ASSERT_NE(other, nullptr);
  EXPECT_TRUE(other->List()->empty());
}

TYPED_TEST_P(BlobStoreContractTest, DeleteRemovesAndMissingIsOk) {
  BlobStore& s = *this->store_;
  ASSERT_TRUE(s.Put("x", "1").ok());
  ASSERT_TRUE(s.Put("y", "2").ok());
  EXPECT_TRUE(s.Delete("x").ok());
  EXPECT_EQ(s.Size("x").status().code(), StatusCode::kNotFound);
  EXPECT_TRUE(s.Delete("x").ok());
  EXPECT_TRUE(s.Delete("never-existed").ok());
  EXPECT_EQ(*s.List(), std::vector<std::string>{"y"});
}

TYPED_TEST_P(BlobStoreContractTest, NothingIsVisibleBeforeCommit) {
  BlobStore& s = *this->store_;
  {
    auto w = s.Create("pending");
    ASSERT_TRUE(w.ok()) << w.status().ToString();
    ASSERT_TRUE((*w)->Append("some bytes").ok());
    ASSERT_TRUE((*w)->Append(std::string(100000, 'z')).ok());
    EXPECT_EQ(s.Size("pending").status().code(), StatusCode::kNotFound);
    EXPECT_TRUE(s.List()->empty());
  }
  EXPECT_EQ(s.Size("pending").status().code(), StatusCode::kNotFound);
  EXPECT_TRUE(s.List()->empty());
}

TYPED_TEST_P(BlobStoreContractTest, UncommittedWriterKeepsThePreviousBlob) {
  BlobStore& s = *this->store_;
  ASSERT_TRUE(s.Put("v", "old").ok());
  {
    auto w = s.Create("v");
    ASSERT_TRUE(w.ok());
    ASSERT_TRUE((*w)->Append("new").ok());
    EXPECT_EQ(*s.Read("v"), "old");
  }
  EXPECT_EQ(*s.Read("v"), "old");
  auto w = s.Create("v");
  ASSERT_TRUE(w.ok());
  ASSERT_TRUE((*w)->Append("ne").ok());
  ASSERT_TRUE((*w)->Append("w!").ok());
  EXPECT_EQ(*s.Read("v"), "old");
  ASSERT_TRUE((*w)->Commit().ok());
  EXPECT_EQ(*s.Read("v"), "new!");
  EXPECT_EQ(*s.List(), std::vector<std::string>{"v"});
}

TYPED_TEST_P(BlobStoreContractTest, InvalidNamesAreRejected) {
  BlobStore& s = *this->store_;
  for (const std::string& bad : {std::string(""), std::string("a/b"), std::string("/abs"),
                                 std::string("."), std::string(".."), std::string(".tmp.x"),
                                 std::string(kTempFilePrefix), std::string("../up")}) {
    EXPECT_EQ(s.Create(bad).status().code(), StatusCode::kInvalidArgument) << "'" << bad << "'";
    EXPECT_EQ(s.Put(bad, "x").code(), StatusCode::kInvalidArgument) << "'" << bad << "'";
  }
  EXPECT_TRUE(s.List()->empty());
  EXPECT_TRUE(s.Put("...", "x").ok());
  EXPECT_TRUE(s.Put("a.tmp.b", "x").ok());
  EXPECT_TRUE(s.Put("with space+plus=%", "x").ok());
  EXPECT_EQ(*s.List(), (std::vector<std::string>{"...", "a.tmp.b", "with space+plus=%"}));
  EXPECT_EQ(*s.Read("with space+plus=%"), "x");
}

TYPED_TEST_P(BlobStoreContractTest, CopyBlobReturnsTheChecksumOfTheBytes) {
  BlobStore& s = *this->store_;
  auto other = this->NewStore("copy");
  ASSERT_NE(other, nullptr);
  // Larger than CopyBlob's 8 MiB buffer, so it streams in several pieces.
  const std::string big = RandomBytes((8u << 20) + 12345, 7);
  for (const auto& [name, data] : std::vector<std::pair<std::string, std::string>>{
           {"small", "abc"}, {"empty", ""}, {"big", big}}) {
    ASSERT_TRUE(s.Put(name, data).ok());
    auto sum = CopyBlob(s, *other, name);
    ASSERT_TRUE(sum.ok()) << name << ": " << sum.status().ToString();
    EXPECT_EQ(*sum, Checksum(data)) << name;
    auto copy = other->Read(name);
    ASSERT_TRUE(copy.ok());
    EXPECT_TRUE(*copy == data) << name;
  }
  EXPECT_EQ(CopyBlob(s, *other, "missing").status().code(), StatusCode::kNotFound);
  EXPECT_EQ(*other->List(), (std::vector<std::string>{"big", "empty", "small"}));
}

REGISTER_TYPED_TEST_SUITE_P(BlobStoreContractTest, PutReadSizeReplace, MissingBlobsAreNotFound,
                            ReadIntoRanges, AReaderReadsRangesOfItsBlob, ListIsSorted,
                            DeleteRemovesAndMissingIsOk, NothingIsVisibleBeforeCommit,
                            UncommittedWriterKeepsThePreviousBlob, InvalidNamesAreRejected,
                            CopyBlobReturnsTheChecksumOfTheBytes);

}  // namespace spot::ckpt
