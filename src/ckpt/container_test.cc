#include "ckpt/container.h"

#include <gtest/gtest.h>

#include <cstring>

namespace spot::ckpt {
namespace {

Container Sample() {
  Container c;
  std::span<char> w = c.AddUninitialized("model/w", DType::kF32, {2, 3});
  for (size_t i = 0; i < w.size(); ++i) w[i] = static_cast<char>(i * 7 + 1);
  c.AddUninitialized("model/empty", DType::kF64, {0, 4});
  std::span<char> s = c.AddUninitialized("step", DType::kI64, {});
  int64_t step = 1234;
  std::memcpy(s.data(), &step, 8);
  c.AddBytes("trainer/state", R"({"epoch":1})");
  return c;
}

std::string EncodeToString(Container& c) {
  std::string scratch;
  uint64_t sum = 0;
  std::string out;
  for (std::string_view p : c.Encode(&scratch, &sum)) out.append(p);
  EXPECT_EQ(sum, Container::Checksum(std::string_view(out).substr(0, out.size() - 16)));
  return out;
}

TEST(ContainerTest, RoundTripsRecords) {
  Container c = Sample();
  std::string bytes = EncodeToString(c);
  EXPECT_EQ(bytes.substr(0, 8), "SPOTCKPT");
  auto d = Container::Decode(bytes, "x.bin");
  ASSERT_TRUE(d.ok()) << d.status().ToString();
  ASSERT_EQ(d->records().size(), 4u);
  for (const Record& r : c.records()) {
    const Record* got = d->Find(r.name);
    ASSERT_NE(got, nullptr) << r.name;
    EXPECT_EQ(got->dtype, r.dtype);
    EXPECT_EQ(got->shape, r.shape);
    EXPECT_EQ(got->data, r.data);
    // Data is aligned for zero-copy reads.
    EXPECT_EQ((got->data.data() - d->records()[0].data.data()) % kAlignment, 0);
  }
  EXPECT_EQ(d->Find("trainer/state")->data, R"({"epoch":1})");
  EXPECT_EQ(d->VerifyRecords(), "");
  EXPECT_EQ(d->Find("nope"), nullptr);
  EXPECT_EQ(c.payload_bytes(), 24u + 0 + 8 + 11);
}

TEST(ContainerTest, EveryTruncationIsDetected) {
  Container c = Sample();
  std::string bytes = EncodeToString(c);
  for (size_t n = 0; n < bytes.size(); ++n) {
    auto d = Container::Decode(bytes.substr(0, n), "x.bin");
    ASSERT_FALSE(d.ok()) << "truncated to " << n;
    EXPECT_EQ(d.status().code(), StatusCode::kDataLoss);
    EXPECT_NE(d.status().message().find("x.bin"), std::string::npos);
  }
}

TEST(ContainerTest, EveryByteFlipIsDetected) {
  Container c = Sample();
  std::string bytes = EncodeToString(c);
  for (size_t i = 0; i < bytes.size(); ++i) {
    for (int bit : {0, 7}) {
      std::string bad = bytes;
      bad[i] = static_cast<char>(bad[i] ^ (1 << bit));
      auto d = Container::Decode(bad, "x.bin");
      ASSERT_FALSE(d.ok()) << "flip at " << i;
      EXPECT_EQ(d.status().code(), StatusCode::kDataLoss);
    }
  }
}

TEST(ContainerTest, DtypeSizes) {
  EXPECT_EQ(DTypeSize(DType::kBF16), 2u);
  EXPECT_EQ(DTypeSize(DType::kF64), 8u);
  EXPECT_EQ(DTypeName(DType::kF32), "f32");
}

}  // namespace
}  // namespace spot::ckpt
