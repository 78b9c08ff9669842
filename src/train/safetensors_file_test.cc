#include "train/safetensors_file.h"

#include <gtest/gtest.h>

#include <cstring>
#include <nlohmann/json.hpp>
#include <optional>

#include "core/file_io.h"
#include "core/temp_dir.h"

namespace spot::train {
namespace {

using nlohmann::json;

// A file as safetensors writes it: the header's length, the header, the bytes.
std::string Safetensors(const json& header, const std::string& data) {
  const std::string h = header.dump();
  std::string out(8, '\0');
  const uint64_t n = h.size();
  std::memcpy(out.data(), &n, 8);
  return out + h + data;
}

class SafetensorsTest : public ::testing::Test {
 protected:
  void SetUp() override { tmp_.emplace(TempDir::Create("spot_safetensors_test").value()); }
  std::string Write(const std::string& name, const std::string& bytes) {
    const std::string path = (tmp_->path() / name).string();
    EXPECT_TRUE(WriteFileAtomically(path, bytes).ok());
    return path;
  }
  std::string Why(const std::string& bytes, const std::vector<std::string>& names = {"x"}) {
    auto r = ReadSafetensors(Write("bad.safetensors", bytes), names);
    EXPECT_FALSE(r.ok());
    EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
    EXPECT_NE(r.status().message().find("bad.safetensors"), std::string::npos);
    return r.status().message();
  }
  std::optional<TempDir> tmp_;
};

TEST_F(SafetensorsTest, ReadsTheTensorsByName) {
  const float x[6] = {0, 1, 2, 3, 4, 5.5f};
  const int64_t y[3] = {2, 0, 1};
  std::string data(reinterpret_cast<const char*>(x), sizeof x);
  data.append(reinterpret_cast<const char*>(y), sizeof y);
  const json header = {{"__metadata__", {{"format", "np"}}},
                       {"x", {{"dtype", "F32"}, {"shape", {3, 2}}, {"data_offsets", {0, 24}}}},
                       {"y", {{"dtype", "I64"}, {"shape", {3}}, {"data_offsets", {24, 48}}}}};
  auto got = ReadSafetensors(Write("d.safetensors", Safetensors(header, data)), {"y", "x"});
  ASSERT_TRUE(got.ok()) << got.status().message();
  EXPECT_EQ(got->at("x").dtype, "f4");
  EXPECT_EQ(got->at("x").shape, (std::vector<int64_t>{3, 2}));
  EXPECT_EQ(got->at("x").data, data.substr(0, 24));
  EXPECT_EQ(got->at("y").dtype, "i8");
  EXPECT_EQ(got->at("y").data, data.substr(24));
}

TEST_F(SafetensorsTest, BadFilesNameTheTensorAndTheReason) {
  const json ok = {{"x", {{"dtype", "U8"}, {"shape", {4}}, {"data_offsets", {0, 4}}}},
                   {"w", {{"dtype", "U8"}, {"shape", {1}}, {"data_offsets", {4, 5}}}}};
  EXPECT_NE(Why(Safetensors(ok, "abcde"), {"y"}).find("no tensor y (the file holds: w, x)"),
            std::string::npos);
  EXPECT_NE(Why("short").find("too short"), std::string::npos);
  std::string huge = Safetensors(ok, "abcde");
  huge[5] = 1;  // a header length past the end of the file
  EXPECT_NE(Why(huge).find("header of"), std::string::npos);
  std::string not_json(8, '\0');
  not_json[0] = 3;
  EXPECT_NE(Why(not_json + "{x}").find("JSON syntax error"), std::string::npos);
  EXPECT_NE(Why(not_json + "[1]").find("not a JSON object"), std::string::npos);
  // A tensor named twice: which one would be read is the reader's whim.
  const std::string twice = R"({"x":{"dtype":"U8","shape":[1],"data_offsets":[0,1]},)"
                            R"("x":{"dtype":"U8","shape":[1],"data_offsets":[1,2]}})";
  std::string dup(8, '\0');
  dup[0] = static_cast<char>(twice.size());
  EXPECT_NE(Why(dup + twice + "ab").find("x: given twice"), std::string::npos);
  EXPECT_NE(Why(Safetensors(ok, "abc")).find("do not hold its 4 bytes"), std::string::npos);
  json bf16 = {{"x", {{"dtype", "BF16"}, {"shape", {2}}, {"data_offsets", {0, 4}}}}};
  EXPECT_NE(Why(Safetensors(bf16, "abcd")).find("dtype BF16 is not supported"), std::string::npos);
  json wrong = {{"x", {{"dtype", "F32"}, {"shape", {2}}, {"data_offsets", {0, 4}}}}};
  EXPECT_NE(Why(Safetensors(wrong, "abcd")).find("x: data_offsets [0, 4] do not hold its 8 bytes"),
            std::string::npos);
  json partial = {{"x", {{"dtype", "F32"}}}};
  EXPECT_NE(Why(Safetensors(partial, "")).find("needs dtype, shape and data_offsets"),
            std::string::npos);
  json negative = {{"x", {{"dtype", "U8"}, {"shape", {-1}}, {"data_offsets", {0, 1}}}}};
  EXPECT_NE(Why(Safetensors(negative, "a")).find("non-size"), std::string::npos);
}

}  // namespace
}  // namespace spot::train
