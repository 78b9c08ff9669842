#include "core/strict_json.h"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <string>

namespace spot {
namespace {

TEST(StrictJsonTest, ParsesDocuments) {
  auto j = ParseStrictJson(R"({"a": {"x": 1, "y": [{"x": 2}, {"x": 3}]}, "b": [1, 2], "x": 4})",
                           "f.json");
  ASSERT_TRUE(j.ok()) << j.status().ToString();
  EXPECT_EQ((*j)["a"]["y"][1]["x"], 3);
  EXPECT_EQ((*j)["x"], 4);
  // The same key in different objects is fine.
  EXPECT_TRUE(ParseStrictJson(R"([{"k": 1}, {"k": 2}])", "f.json").ok());
}

// nlohmann (like most readers) keeps the last of two equal keys without a
// word; a trace with two "data" arrays is a broken file.
TEST(StrictJsonTest, DuplicateKeysAreRefusedWithTheirPath) {
  const struct {
    std::string text, message;
  } cases[] = {
      {R"({"data": [1], "data": [2]})", "t.json: data: given twice (JSON keys must be unique)"},
      {R"({"metadata": {"gap_seconds": 1, "gap_seconds": 2}})",
       "t.json: metadata.gap_seconds: given twice"},
      {R"({"h": [{"a": 1}, {"a": 1, "b": 2, "a": 3}]})", "t.json: h[1].a: given twice"},
      {R"({"h": [[1, 2], {"z": {}, "z": 1}]})", "t.json: h[1].z: given twice"},
  };
  for (const auto& c : cases) {
    auto j = ParseStrictJson(c.text, "t.json");
    ASSERT_FALSE(j.ok()) << c.text;
    EXPECT_EQ(j.status().code(), StatusCode::kInvalidArgument);
    EXPECT_NE(j.status().message().find(c.message), std::string::npos) << j.status().message();
  }
}

TEST(StrictJsonTest, SyntaxErrorsNameTheLine) {
  auto j = ParseStrictJson("{\"a\": 1,\n \"b\": [1,,]}", "t.json");
  ASSERT_FALSE(j.ok());
  EXPECT_EQ(j.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(j.status().message().find("t.json:2: JSON syntax error"), std::string::npos)
      << j.status().message();
}

TEST(StrictJsonTest, DeepNestingIsRefused) {
  std::string deep(100000, '[');
  deep += std::string(100000, ']');
  auto j = ParseStrictJson(deep, "t.json");
  ASSERT_FALSE(j.ok());
  EXPECT_EQ(j.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(j.status().message().find("nested more than 256 deep"), std::string::npos)
      << j.status().message();
  std::string ok(kMaxJsonDepth, '[');
  ok += std::string(kMaxJsonDepth, ']');
  EXPECT_TRUE(ParseStrictJson(ok, "t.json").ok());
}

TEST(StrictJsonTest, IntegersAreNeverConvertedFromFloats) {
  using nlohmann::json;
  EXPECT_EQ(JsonInt64(json::parse("42")).value(), 42);
  EXPECT_EQ(JsonInt64(json::parse("-7")).value(), -7);
  EXPECT_EQ(JsonInt64(json::parse("9223372036854775807")).value(), INT64_MAX);
  for (const char* bad : {"1e19", "5.0", "1784467440737095500000000000", "9223372036854775808",
                          "\"5\"", "true", "null"}) {
    auto v = JsonInt64(json::parse(bad));
    ASSERT_FALSE(v.ok()) << bad;
    EXPECT_EQ(v.status().code(), StatusCode::kInvalidArgument);
    EXPECT_NE(v.status().message().find("expected an integer"), std::string::npos);
  }
}

}  // namespace
}  // namespace spot
