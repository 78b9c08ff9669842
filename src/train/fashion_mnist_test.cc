#include "core/temp_dir.h"
#include "train/fashion_mnist.h"

#include <optional>
#include <gtest/gtest.h>
#include <unistd.h>
#include <zlib.h>

#include <array>
#include <filesystem>

namespace spot::train {
namespace {

namespace fs = std::filesystem;
constexpr const char* kDir = "/usr/share/datasets/fashion-mnist";

TEST(FashionMnistTest, LoadsTheTestSplit) {
  auto s = LoadFashionMnist(kDir, Split::kTest);
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  EXPECT_EQ(s->count, 10000);
  EXPECT_EQ(s->rows, 28);
  EXPECT_EQ(s->cols, 28);
  EXPECT_EQ(s->pixels.size(), 10000u * 28 * 28);
  std::array<int, 10> per_class{};
  for (uint8_t l : s->labels) ++per_class[l];
  for (int c : per_class) EXPECT_EQ(c, 1000);  // Fashion-MNIST's test split is balanced
  EXPECT_EQ(MissingFashionMnistFiles(kDir), "");
}

class BadDataTest : public ::testing::Test {
 protected:
  void SetUp() override {
    tmp_.emplace(TempDir::Create("spot_fmnist_test").value());
    dir_ = tmp_->path();
  }
  void WriteGz(const std::string& name, const std::string& bytes) {
    gzFile f = gzopen((dir_ / name).c_str(), "wb");
    gzwrite(f, bytes.data(), static_cast<unsigned>(bytes.size()));
    gzclose(f);
  }
  std::optional<TempDir> tmp_;
  fs::path dir_;
};

TEST_F(BadDataTest, MissingFilesAreNamed) {
  auto s = LoadFashionMnist(dir_.string(), Split::kTrain);
  EXPECT_EQ(s.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.status().message().find("train-images-idx3-ubyte.gz: no such file"),
            std::string::npos);
  EXPECT_NE(MissingFashionMnistFiles(dir_.string()).find("t10k-labels-idx1-ubyte.gz"),
            std::string::npos);
}

TEST_F(BadDataTest, MalformedFilesAreDataLoss) {
  WriteGz("t10k-images-idx3-ubyte.gz", std::string("\0\0\x08\x03\0\0\0\x02\0\0\0\x1c\0\0\0\x1c", 16) + "short");
  WriteGz("t10k-labels-idx1-ubyte.gz", std::string("\0\0\x08\x01\0\0\0\x02\x01\x02", 10));
  auto s = LoadFashionMnist(dir_.string(), Split::kTest);
  EXPECT_EQ(s.status().code(), StatusCode::kDataLoss);
  EXPECT_NE(s.status().message().find("truncated"), std::string::npos) << s.status().message();

  WriteGz("t10k-images-idx3-ubyte.gz", "not an idx file at all");
  s = LoadFashionMnist(dir_.string(), Split::kTest);
  EXPECT_EQ(s.status().code(), StatusCode::kDataLoss);
  EXPECT_NE(s.status().message().find("magic 2051"), std::string::npos);
}

}  // namespace
}  // namespace spot::train
