#include "ckpt/container.h"

#include <gtest/gtest.h>
#include <sys/mman.h>
#include <unistd.h>
#include <xxhash.h>

#include <cerrno>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

namespace spot::ckpt {
namespace {

TEST(ContainerTest, DTypeSizesAndNames) {
  const size_t sizes[kNumDTypes] = {1, 1, 2, 4, 8, 2, 2, 4, 8, 1};
  const char* names[kNumDTypes] = {"u8",  "i8",   "i16", "i32", "i64",
                                   "f16", "bf16", "f32", "f64", "bool"};
  for (int i = 0; i < kNumDTypes; ++i) {
    EXPECT_EQ(DTypeSize(static_cast<DType>(i)), sizes[i]) << i;
    EXPECT_EQ(DTypeName(static_cast<DType>(i)), names[i]) << i;
  }
  EXPECT_EQ(DTypeSize(static_cast<DType>(kNumDTypes)), 0u);
  EXPECT_EQ(DTypeName(static_cast<DType>(200)), "invalid");
}

TEST(ContainerTest, ChecksumIsXxh3) {
  // XXH3-64 of the empty input (seed 0), from the xxHash reference.
  EXPECT_EQ(Checksum(""), 0x2D06800538D394C2ULL);
  EXPECT_NE(Checksum("a"), Checksum("b"));
  EXPECT_EQ(Checksum(std::string(1000, 'x')), Checksum(std::string(1000, 'x')));
}

TEST(ContainerTest, ChecksumMatchesTheBaselineXxh3OfOlderFiles) {
  // Checksum runs XXH3 on the CPU's widest vectors; files written before
  // hold the hashes of the baseline build (XXH3_64bits here, without the
  // run-time dispatch): the two must agree on every input length class.
  std::string bytes(size_t{1} << 20 | 3, '\0');
  for (size_t i = 0; i < bytes.size(); ++i) bytes[i] = static_cast<char>((i * 2654435761u) >> 13);
  for (size_t n :
       {size_t{0}, size_t{1}, size_t{3}, size_t{16}, size_t{17}, size_t{128}, size_t{129},
        size_t{240}, size_t{241}, size_t{1024}, size_t{4096} + 7, bytes.size()}) {
    EXPECT_EQ(Checksum(std::string_view(bytes.data(), n)), XXH3_64bits(bytes.data(), n)) << n;
  }
}

TEST(ContainerTest, AddUninitializedSizesStorageByShape) {
  Container c;
  EXPECT_TRUE(c.empty());
  std::span<char> w = c.AddUninitialized("model/w", DType::kF32, {2, 3});
  EXPECT_EQ(w.size(), 24u);
  std::span<char> s = c.AddUninitialized("step", DType::kI64, {});
  EXPECT_EQ(s.size(), 8u);  // a scalar has one element
  std::span<char> e = c.AddUninitialized("model/empty", DType::kF64, {0, 4});
  EXPECT_EQ(e.size(), 0u);
  std::span<char> h = c.AddUninitialized("model/h", DType::kBF16, {5});
  EXPECT_EQ(h.size(), 10u);
  ASSERT_EQ(c.records().size(), 4u);
  EXPECT_FALSE(c.empty());
  EXPECT_EQ(c.payload_bytes(), 24u + 8u + 0u + 10u);

  const Record& r = c.records()[0];
  EXPECT_EQ(r.name, "model/w");
  EXPECT_EQ(r.dtype, DType::kF32);
  EXPECT_EQ(r.shape, (std::vector<int64_t>{2, 3}));
  EXPECT_EQ(r.numel(), 6);
  EXPECT_EQ(c.records()[1].numel(), 1);
  EXPECT_EQ(c.records()[2].numel(), 0);
  // Fresh storage is zeroed, and the record's view is the returned span.
  for (char b : w) EXPECT_EQ(b, 0);
  EXPECT_EQ(r.data.data(), w.data());
  EXPECT_EQ(c.mutable_data(0).data(), w.data());
  EXPECT_EQ(c.mutable_data(0).size(), 24u);

  // Writes through the span are visible in the record.
  for (size_t i = 0; i < w.size(); ++i) w[i] = static_cast<char>(i + 1);
  EXPECT_EQ(c.records()[0].data[23], 24);
}

TEST(ContainerTest, FindAndFindIndex) {
  Container c;
  c.AddUninitialized("a", DType::kU8, {1});
  c.AddUninitialized("b", DType::kI32, {2});
  c.AddBytes("c", "xyz");
  EXPECT_EQ(c.FindIndex("a"), 0);
  EXPECT_EQ(c.FindIndex("b"), 1);
  EXPECT_EQ(c.FindIndex("c"), 2);
  EXPECT_EQ(c.FindIndex("d"), -1);
  EXPECT_EQ(c.FindIndex(""), -1);
  ASSERT_NE(c.Find("b"), nullptr);
  EXPECT_EQ(c.Find("b")->dtype, DType::kI32);
  EXPECT_EQ(c.Find("missing"), nullptr);
  EXPECT_EQ(c.Find("c")->data, "xyz");
  EXPECT_EQ(c.Find("c")->dtype, DType::kU8);
  EXPECT_EQ(c.Find("c")->shape, (std::vector<int64_t>{3}));
}

TEST(ContainerTest, AddBytesCopiesAndHandlesEmpty) {
  Container c;
  std::string src = "hello";
  c.AddBytes("s", src);
  src[0] = 'j';
  EXPECT_EQ(c.Find("s")->data, "hello");
  c.AddBytes("empty", "");
  EXPECT_EQ(c.Find("empty")->data.size(), 0u);
  EXPECT_EQ(c.Find("empty")->shape, (std::vector<int64_t>{0}));
}

TEST(ContainerTest, RecycleReusesStorageOfTheSameSize) {
  Container c;
  std::span<char> a = c.AddUninitialized("a", DType::kF32, {64, 64});
  std::span<char> b = c.AddUninitialized("b", DType::kI64, {100});
  std::span<char> s = c.AddUninitialized("s", DType::kI64, {});  // small (SSO-sized) storage
  std::memset(a.data(), 0x5a, a.size());
  const char* pa = a.data();
  const char* pb = b.data();
  const char* ps = s.data();

  c.Recycle();
  EXPECT_TRUE(c.empty());
  EXPECT_EQ(c.records().size(), 0u);
  EXPECT_EQ(c.FindIndex("a"), -1);
  EXPECT_EQ(c.payload_bytes(), 0u);

  // Same sizes in the same order: the same buffers, contents as left.
  std::span<char> a2 = c.AddUninitialized("a", DType::kF32, {64, 64});
  std::span<char> b2 = c.AddUninitialized("b", DType::kI64, {100});
  std::span<char> s2 = c.AddUninitialized("s", DType::kI64, {});
  EXPECT_EQ(a2.data(), pa);
  EXPECT_EQ(b2.data(), pb);
  EXPECT_EQ(s2.data(), ps);
  EXPECT_EQ(c.records()[0].data.data(), pa);
  EXPECT_EQ(static_cast<unsigned char>(a2[100]), 0x5a);  // not re-zeroed

  // Again, with a different shape but the same byte size: still reused.
  c.Recycle();
  std::span<char> a3 = c.AddUninitialized("a", DType::kF64, {32, 64});
  EXPECT_EQ(a3.data(), pa);
  EXPECT_EQ(c.records()[0].dtype, DType::kF64);
}

TEST(ContainerTest, RecycleMatchesByPosition) {
  // A record that changed size gets new storage; the records after it still
  // reuse the storage of their own position.
  Container c;
  c.AddUninitialized("a", DType::kF32, {1000});
  std::span<char> b = c.AddUninitialized("b", DType::kF32, {2000});
  std::span<char> d = c.AddUninitialized("d", DType::kF32, {3000});
  const char* pb = b.data();
  const char* pd = d.data();
  c.Recycle();
  std::span<char> a2 = c.AddUninitialized("a", DType::kF32, {500});  // resized
  EXPECT_EQ(a2.size(), 2000u);
  std::span<char> b2 = c.AddUninitialized("b", DType::kF32, {2000});
  std::span<char> d2 = c.AddUninitialized("d", DType::kF32, {3000});
  EXPECT_EQ(b2.data(), pb);
  EXPECT_EQ(d2.data(), pd);
  EXPECT_EQ(c.records()[0].data.size(), 2000u);
}

TEST(ContainerTest, RecycleWithDifferentSizeAllocatesCorrectly) {
  Container c;
  c.AddUninitialized("a", DType::kF32, {10});
  c.Recycle();
  std::span<char> a = c.AddUninitialized("a", DType::kF32, {20});
  EXPECT_EQ(a.size(), 80u);
  EXPECT_EQ(c.records()[0].data.size(), 80u);
  // More records than before the Recycle: the extra ones get fresh storage.
  std::span<char> extra = c.AddUninitialized("extra", DType::kU8, {7});
  EXPECT_EQ(extra.size(), 7u);
  EXPECT_EQ(c.records().size(), 2u);
}

TEST(ContainerTest, AddWithStorageTakesOverTheBuffer) {
  Container c;
  Buffer buf(4096, '\0');
  for (size_t i = 0; i < buf.size(); ++i) buf[i] = static_cast<char>(i * 13);
  const std::string copy(buf.data(), buf.size());
  const char* p = buf.data();
  std::span<char> s = c.AddWithStorage("model/w", DType::kF32, {32, 32}, std::move(buf));
  EXPECT_EQ(s.data(), p);  // moved, not copied
  EXPECT_EQ(s.size(), 4096u);
  EXPECT_EQ(c.records()[0].data, copy);
  EXPECT_EQ(c.records()[0].shape, (std::vector<int64_t>{32, 32}));

  // Small buffers (stored inline in the string) work as well.
  std::span<char> t = c.AddWithStorage("t", DType::kI16, {2}, Buffer("\x01\x02\x03\x04", 4));
  EXPECT_EQ(t.size(), 4u);
  EXPECT_EQ(c.Find("t")->data, std::string_view("\x01\x02\x03\x04", 4));
  EXPECT_EQ(c.Find("t")->data.data(), t.data());
}

TEST(ContainerTest, ReleaseStorageMovesTheBytesOut) {
  Container c;
  std::span<char> w = c.AddUninitialized("w", DType::kI32, {256});
  for (size_t i = 0; i < w.size(); ++i) w[i] = static_cast<char>(i);
  std::string expect(w.data(), w.size());
  const char* p = w.data();
  c.AddBytes("small", "abc");

  Buffer got = c.ReleaseStorage(0);
  EXPECT_EQ(std::string_view(got), expect);
  EXPECT_EQ(got.data(), p);  // the buffer itself moved out
  EXPECT_EQ(c.records()[0].data.size(), 0u);
  EXPECT_EQ(c.records()[0].name, "w");  // the record stays, empty
  EXPECT_EQ(c.payload_bytes(), 3u);

  Buffer small = c.ReleaseStorage(1);
  EXPECT_EQ(std::string_view(small), "abc");
  EXPECT_EQ(c.payload_bytes(), 0u);

  // A released buffer can back a record of another container.
  Container d;
  d.AddWithStorage("w", DType::kI32, {256}, std::move(got));
  EXPECT_EQ(d.records()[0].data, expect);
  EXPECT_EQ(d.records()[0].data.data(), p);
}

TEST(ContainerTest, SharedRecordsLiveAsLongAsTheirOwner) {
  const size_t bytes = kPageAllocBytes + 4096;  // from the kernel, page-aligned
  SharedMemory m = AllocateSharedRecordMemory(bytes);
  ASSERT_EQ(m.bytes.size(), bytes);
  for (size_t i = 0; i < bytes; ++i) m.bytes[i] = static_cast<char>(i * 7);
  const std::string expect(m.bytes.data(), bytes);
  const char* p = m.bytes.data();
  std::shared_ptr<void> kept;
  {
    Container c;
    c.AddUninitialized("own", DType::kU8, {8});
    std::span<char> s =
        c.AddShared("shared", DType::kF32, {static_cast<int64_t>(bytes / 4)}, std::move(m));
    EXPECT_EQ(s.data(), p);  // the memory itself, not a copy
    EXPECT_EQ(c.records()[1].data.data(), p);
    EXPECT_EQ(c.mutable_data(1).data(), p);
    EXPECT_EQ(c.SharedOwner(0), nullptr);  // a record of the Container's own storage
    kept = c.SharedOwner(1);
    ASSERT_NE(kept, nullptr);
  }
  // The Container is gone; the owner's share keeps the bytes.
  EXPECT_EQ(std::string_view(p, bytes), expect);
  kept.reset();

  // Small ones come from malloc and work the same way.
  SharedMemory small = AllocateSharedRecordMemory(3);
  std::memcpy(small.bytes.data(), "xyz", 3);
  Container c;
  c.AddShared("s", DType::kU8, {3}, std::move(small));
  EXPECT_EQ(c.Find("s")->data, "xyz");
  EXPECT_EQ(AllocateSharedRecordMemory(0).bytes.size(), 0u);
}

TEST(ContainerTest, ReleaseStorageAndRecycleNeverHandOutSharedMemory) {
  const size_t bytes = kPageAllocBytes;
  SharedMemory m = AllocateSharedRecordMemory(bytes);
  std::memset(m.bytes.data(), 0x5a, bytes);
  const char* p = m.bytes.data();
  Container c;
  c.AddShared("w", DType::kU8, {static_cast<int64_t>(bytes)}, std::move(m));
  std::shared_ptr<void> kept = c.SharedOwner(0);
  EXPECT_EQ(kept.use_count(), 2);
  // Another holder may still use the memory: the released buffer is a copy.
  Buffer got = c.ReleaseStorage(0);
  EXPECT_NE(got.data(), p);
  EXPECT_EQ(got, Buffer(bytes, '\x5a'));
  EXPECT_EQ(kept.use_count(), 1);  // the Container let go of its share
  EXPECT_TRUE(c.records()[0].data.empty());

  c.AddShared("v", DType::kU8, {static_cast<int64_t>(bytes)},
              {{static_cast<char*>(kept.get()), bytes}, kept});
  c.Recycle();
  EXPECT_EQ(kept.use_count(), 1);
  // The next record at the same position gets memory of its own.
  std::span<char> s = c.AddUninitialized("v", DType::kU8, {static_cast<int64_t>(bytes)});
  EXPECT_NE(s.data(), p);
  std::memset(s.data(), 0, s.size());
  EXPECT_EQ(std::string_view(p, bytes), std::string(bytes, '\x5a'));
}

TEST(ContainerTest, LargeBuffersDoNotComeFromTheMallocHeap) {
  // A freed heap chunk of the right size is what malloc hands out next; a
  // large record must not take it (see kPageAllocBytes).
  const size_t big = 4 * kPageAllocBytes;
  void* chunk = std::malloc(big);
  ASSERT_NE(chunk, nullptr);
  std::free(chunk);
  Container c;
  std::span<char> s = c.AddUninitialized("model/w", DType::kF32, {static_cast<int64_t>(big / 4)});
  EXPECT_NE(static_cast<void*>(s.data()), chunk);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(s.data()) % 4096, 0u) << "not page-aligned: not from mmap";
  for (char& b : s) EXPECT_EQ(b, 0) << "zero-filled";
  // Released, moved to another container and dropped: freed by the same means.
  Container d;
  d.AddWithStorage("w", DType::kF32, {static_cast<int64_t>(big / 4)}, c.ReleaseStorage(0));
  d.Clear();
  // Small buffers still come from malloc.
  std::span<char> t = c.AddUninitialized("small", DType::kU8, {100});
  EXPECT_EQ(t.size(), 100u);
}

TEST(ContainerTest, VerifyRecordsNamesMismatches) {
  Container c;
  c.AddBytes("a", "alpha");
  c.AddBytes("b", "beta");
  c.AddBytes("c", "gamma");
  c.AddUninitialized("empty", DType::kF32, {0});
  for (size_t i = 0; i < c.records().size(); ++i) {
    c.mutable_record(i).checksum = Checksum(c.records()[i].data);
  }
  EXPECT_EQ(c.VerifyRecords(), "");
  c.mutable_data(1)[0] ^= 1;
  EXPECT_EQ(c.VerifyRecords(), "b");
  c.mutable_data(2)[4] ^= 0x80;
  EXPECT_EQ(c.VerifyRecords(), "b, c");
  c.mutable_record(3).checksum ^= 1;
  EXPECT_EQ(c.VerifyRecords(), "b, c, empty");
}

TEST(ContainerTest, MoveKeepsRecordViewsValid) {
  Container c;
  c.AddBytes("tiny", "xy");  // inline std::string storage
  std::span<char> big = c.AddUninitialized("big", DType::kU8, {1000});
  std::memset(big.data(), 7, big.size());
  Container moved = std::move(c);
  EXPECT_EQ(moved.Find("tiny")->data, "xy");
  EXPECT_EQ(moved.Find("big")->data, std::string(1000, '\7'));
  Container assigned;
  assigned.AddBytes("old", "zzz");
  assigned = std::move(moved);
  EXPECT_EQ(assigned.records().size(), 2u);
  EXPECT_EQ(assigned.Find("tiny")->data, "xy");
  EXPECT_EQ(assigned.Find("old"), nullptr);
}

TEST(ContainerTest, ClearDropsRecordsAndRecycledStorage) {
  Container c;
  c.AddUninitialized("a", DType::kF32, {100});
  c.Recycle();
  c.Clear();
  EXPECT_TRUE(c.empty());
  std::span<char> a = c.AddUninitialized("a", DType::kF32, {100});
  EXPECT_EQ(a.size(), 400u);
  for (char x : a) ASSERT_EQ(x, 0);  // fresh, zeroed storage
}

}  // namespace

TEST(ContainerTest, RecordsOfHugePagesAreAlignedToThemAndFreedWhole) {
  constexpr size_t kHuge = size_t{2} << 20;
  const size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
  const size_t bytes = 3 * kHuge + page + 3;  // a tail that is neither
  const size_t mapped = (bytes + page - 1) / page * page;
  std::vector<unsigned char> resident(mapped / page);
  char* p = nullptr;
  {
    SharedMemory m = AllocateSharedRecordMemory(bytes);
    p = m.bytes.data();
    ASSERT_EQ(m.bytes.size(), bytes);
    EXPECT_EQ(reinterpret_cast<uintptr_t>(p) % kHuge, 0u) << "not aligned to a huge page";
    for (size_t i = 0; i < bytes; i += 512) p[i] = static_cast<char>(i);
    p[bytes - 1] = 'z';
    EXPECT_EQ(p[bytes - 1], 'z');
    // Every page of [p, p + bytes) is mapped...
    EXPECT_EQ(mincore(p, mapped, resident.data()), 0) << std::strerror(errno);
  }
  // ...and none of them once the record is freed (the trimmed mapping was
  // exactly the record's pages, so the one munmap took them all).
  errno = 0;
  EXPECT_EQ(mincore(p, mapped, resident.data()), -1);
  EXPECT_EQ(errno, ENOMEM);
}

}  // namespace spot::ckpt
