#include "ckpt/s3_location.h"

#include <gtest/gtest.h>

#include <string>

namespace spot::ckpt {
namespace {

TEST(S3LocationTest, ParsesBucketAndPrefix) {
  auto l = ParseS3Location("s3://ckpts/jobs/mnist/");
  ASSERT_TRUE(l.ok()) << l.status().ToString();
  EXPECT_EQ(l->bucket, "ckpts");
  EXPECT_EQ(l->prefix, "jobs/mnist");
  EXPECT_EQ(l->Key("ckpt-000001.bin"), "jobs/mnist/ckpt-000001.bin");
  EXPECT_EQ(l->Url("x"), "s3://ckpts/jobs/mnist/x");
  auto root = ParseS3Location("s3://my.bucket-1");
  ASSERT_TRUE(root.ok());
  EXPECT_EQ(root->prefix, "");
  EXPECT_EQ(root->Key("x"), "x");
  EXPECT_EQ(root->Url(), "s3://my.bucket-1");
  EXPECT_TRUE(IsS3Location("s3://a"));
  EXPECT_FALSE(IsS3Location("/data/s3://a"));
}

TEST(S3LocationTest, RejectsBadLocationsNamingThem) {
  for (const char* bad : {"s3://", "s3://ab", "s3://UPPER/x", "s3://-dash/x", "s3://a_b/x",
                          "s3://bucket//x", "s3://bucket/a//b", "/local/dir", "S3://bucket"}) {
    auto l = ParseS3Location(bad);
    ASSERT_EQ(l.status().code(), StatusCode::kInvalidArgument) << bad;
    EXPECT_NE(l.status().message().find(bad), std::string::npos) << l.status().message();
  }
}

}  // namespace
}  // namespace spot::ckpt
