#include "train/numpy_file.h"

#include <gtest/gtest.h>
#include <zip.h>

#include <cstring>
#include <filesystem>
#include <optional>

#include "core/file_io.h"
#include "core/temp_dir.h"

namespace spot::train {
namespace {

namespace fs = std::filesystem;

// A .npy file as np.save writes it (format 1.0; `version` 2 for 2.0): the
// header padded with spaces so the data starts at a multiple of 64.
std::string Npy(const std::string& descr, const std::string& shape, std::string_view data,
                const std::string& fortran = "False", int version = 1) {
  std::string dict =
      "{'descr': '" + descr + "', 'fortran_order': " + fortran + ", 'shape': " + shape + ", }";
  const size_t prefix = version == 1 ? 10 : 12;
  while ((prefix + dict.size() + 1) % 64 != 0) dict += ' ';
  dict += '\n';
  std::string out = "\x93NUMPY";
  out += static_cast<char>(version);
  out += '\0';
  const uint32_t n = static_cast<uint32_t>(dict.size());
  out += static_cast<char>(n & 0xff);
  out += static_cast<char>(n >> 8 & 0xff);
  if (version != 1) {
    out += static_cast<char>(n >> 16 & 0xff);
    out += static_cast<char>(n >> 24 & 0xff);
  }
  return out + dict + std::string(data);
}

template <typename T>
std::string Bytes(std::initializer_list<T> v) {
  std::string s(v.size() * sizeof(T), '\0');
  std::memcpy(s.data(), std::data(v), s.size());
  return s;
}

TEST(NumpyFileTest, ParsesWhatNumpyWrites) {
  auto a = ParseNpy(Npy("<f4", "(2, 3)", Bytes<float>({1, 2, 3, 4, 5, 6.5f})), "a.npy");
  ASSERT_TRUE(a.ok()) << a.status().message();
  EXPECT_EQ(a->dtype, "f4");
  EXPECT_EQ(a->shape, (std::vector<int64_t>{2, 3}));
  EXPECT_EQ(a->count(), 6);
  float last;
  std::memcpy(&last, a->data.data() + 20, 4);
  EXPECT_EQ(last, 6.5f);

  auto labels = ParseNpy(Npy("|u1", "(4,)", "\x01\x02\x03\x09", "False", 2), "y.npy");
  ASSERT_TRUE(labels.ok()) << labels.status().message();
  EXPECT_EQ(labels->shape, std::vector<int64_t>{4});
  EXPECT_EQ(labels->data, "\x01\x02\x03\x09");

  auto scalar = ParseNpy(Npy("<i8", "()", Bytes<int64_t>({42})), "s.npy");
  ASSERT_TRUE(scalar.ok());
  EXPECT_TRUE(scalar->shape.empty());
  EXPECT_EQ(scalar->count(), 1);
}

TEST(NumpyFileTest, BadArraysNameTheArrayAndTheReason) {
  auto why = [](std::string_view bytes) {
    auto r = ParseNpy(bytes, "data.npz: x_train");
    EXPECT_FALSE(r.ok());
    EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
    EXPECT_NE(r.status().message().find("data.npz: x_train"), std::string::npos)
        << r.status().message();
    return r.status().message();
  };
  EXPECT_NE(why("PK\x03\x04 a zip, not an array").find("no \\x93NUMPY magic"), std::string::npos);
  EXPECT_NE(why(Npy("<f4", "(2, 3)", Bytes<float>({1, 2, 3, 4, 5}))).find("needs 24 bytes"),
            std::string::npos);
  EXPECT_NE(why(Npy("<f4", "(1,)", Bytes<float>({1, 2}))).find("the file has 8"),
            std::string::npos);
  EXPECT_NE(why(Npy("<f4", "(2,)", Bytes<float>({1, 2}), "True")).find("Fortran"),
            std::string::npos);
  EXPECT_NE(why(Npy(">f4", "(1,)", Bytes<float>({1}))).find("big-endian"), std::string::npos);
  EXPECT_NE(why(Npy("|O", "(1,)", "12345678")).find("not supported"), std::string::npos);
  EXPECT_NE(why(Npy("<c8", "(1,)", "12345678")).find("not supported"), std::string::npos);
  EXPECT_NE(why(Npy("<f4", "(two,)", "1234")).find("bad shape"), std::string::npos);
  std::string v9 = Npy("<f4", "(1,)", "1234");
  v9[6] = 9;
  EXPECT_NE(why(v9).find("version 9"), std::string::npos);
  EXPECT_NE(why(Npy("<f4", "(1,)", "1234").substr(0, 30)).find("truncated"), std::string::npos);
}

class NpzTest : public ::testing::Test {
 protected:
  void SetUp() override { tmp_.emplace(TempDir::Create("spot_npz_test").value()); }
  // An archive as np.savez (stored) or np.savez_compressed (deflated) writes it.
  std::string Write(const std::string& name,
                    const std::vector<std::pair<std::string, std::string>>& entries,
                    bool compressed) {
    const std::string path = (tmp_->path() / name).string();
    int err = 0;
    zip_t* z = zip_open(path.c_str(), ZIP_CREATE | ZIP_TRUNCATE, &err);
    EXPECT_NE(z, nullptr);
    for (const auto& [entry, bytes] : entries) {
      zip_source_t* s = zip_source_buffer(z, bytes.data(), bytes.size(), 0);
      zip_int64_t i = zip_file_add(z, entry.c_str(), s, ZIP_FL_OVERWRITE);
      EXPECT_GE(i, 0);
      zip_set_file_compression(z, static_cast<zip_uint64_t>(i),
                               compressed ? ZIP_CM_DEFLATE : ZIP_CM_STORE, 0);
    }
    EXPECT_EQ(zip_close(z), 0);
    return path;
  }
  std::optional<TempDir> tmp_;
};

TEST_F(NpzTest, ReadsStoredAndCompressedArchives) {
  const std::string x = Npy("<f4", "(3, 2)", Bytes<float>({0, 1, 2, 3, 4, 5}));
  const std::string y = Npy("<i8", "(3,)", Bytes<int64_t>({2, 0, 1}));
  for (bool compressed : {false, true}) {
    std::string path =
        Write(compressed ? "c.npz" : "s.npz", {{"x_train.npy", x}, {"y_train.npy", y}}, compressed);
    auto got = ReadNpz(path, {"x_train", "y_train"});
    ASSERT_TRUE(got.ok()) << got.status().message();
    EXPECT_EQ(got->at("x_train").shape, (std::vector<int64_t>{3, 2}));
    EXPECT_EQ(got->at("y_train").data, Bytes<int64_t>({2, 0, 1}));
  }
}

TEST_F(NpzTest, MissingArraysAndDamagedArchivesAreClearErrors) {
  const std::string x = Npy("<f4", "(64,)", std::string(256, '\0'));
  std::string path = Write("a.npz", {{"x_train.npy", x}, {"labels.npy", x}}, true);
  auto missing = ReadNpz(path, {"x_train", "y_train"});
  ASSERT_FALSE(missing.ok());
  EXPECT_NE(missing.status().message().find(path + ": no array y_train (the archive holds: "
                                                   "x_train.npy, labels.npy)"),
            std::string::npos)
      << missing.status().message();

  const std::string junk = (tmp_->path() / "junk.npz").string();
  ASSERT_TRUE(WriteFileAtomically(junk, "not a zip archive at all").ok());
  auto bad = ReadNpz(junk, {"x_train"});
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find(junk + ": not a NumPy .npz archive"), std::string::npos)
      << bad.status().message();

  // A cut archive loses its central directory: refused, never half-read.
  std::string bytes = *ReadFile(path);
  const std::string cut = (tmp_->path() / "cut.npz").string();
  ASSERT_TRUE(WriteFileAtomically(cut, bytes.substr(0, bytes.size() / 2)).ok());
  auto truncated = ReadNpz(cut, {"x_train"});
  ASSERT_FALSE(truncated.ok());
  EXPECT_EQ(truncated.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(truncated.status().message().find(cut), std::string::npos);
}

}  // namespace
}  // namespace spot::train
