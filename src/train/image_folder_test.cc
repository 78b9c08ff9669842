#include "train/image_folder.h"

#include <gtest/gtest.h>
#include <png.h>
#include <turbojpeg.h>

#include <filesystem>
#include <fstream>

#include "core/file_io.h"
#include "core/temp_dir.h"
#include "train/csv_table.h"

namespace spot::train {
namespace {

namespace fs = std::filesystem;

// A w x h RGB image whose pixel (x, y) is (x * 10, y * 10, 200), as PNG or JPEG bytes.
std::vector<uint8_t> Pixels(int w, int h) {
  std::vector<uint8_t> p;
  for (int y = 0; y < h; ++y) {
    for (int x = 0; x < w; ++x) p.insert(p.end(), {uint8_t(x * 10), uint8_t(y * 10), 200});
  }
  return p;
}

std::string Png(int w, int h) {
  png_image image{};
  image.version = PNG_IMAGE_VERSION;
  image.width = w;
  image.height = h;
  image.format = PNG_FORMAT_RGB;
  std::vector<uint8_t> px = Pixels(w, h);
  png_alloc_size_t size = 0;
  EXPECT_TRUE(png_image_write_to_memory(&image, nullptr, &size, 0, px.data(), 0, nullptr));
  std::string out(size, '\0');
  EXPECT_TRUE(png_image_write_to_memory(&image, out.data(), &size, 0, px.data(), 0, nullptr));
  return out;
}

std::string Jpeg(int w, int h) {
  tjhandle tj = tjInitCompress();
  std::vector<uint8_t> px = Pixels(w, h);
  unsigned char* buf = nullptr;
  unsigned long size = 0;
  EXPECT_EQ(tjCompress2(tj, px.data(), w, 0, h, TJPF_RGB, &buf, &size, TJSAMP_444, 100, 0), 0);
  std::string out(reinterpret_cast<char*>(buf), size);
  tjFree(buf);
  tjDestroy(tj);
  return out;
}

TEST(ImageFolderTest, PngAndJpegDecodeToTheirPixels) {
  auto png = DecodeImage(Png(5, 3), 3, "a.png");
  ASSERT_TRUE(png.ok()) << png.status().ToString();
  EXPECT_EQ(png->width, 5);
  EXPECT_EQ(png->height, 3);
  EXPECT_EQ(png->pixels, Pixels(5, 3)) << "lossless";
  auto grey = DecodeImage(Png(5, 3), 1, "a.png");
  ASSERT_TRUE(grey.ok());
  EXPECT_EQ(grey->pixels.size(), 15u);

  auto jpeg = DecodeImage(Jpeg(8, 8), 3, "b.jpg");
  ASSERT_TRUE(jpeg.ok()) << jpeg.status().ToString();
  ASSERT_EQ(jpeg->pixels.size(), 8u * 8 * 3);
  const std::vector<uint8_t> want = Pixels(8, 8);
  for (size_t i = 0; i < want.size(); ++i) {
    EXPECT_NEAR(jpeg->pixels[i], want[i], 6) << "quality 100, pixel byte " << i;
  }
}

TEST(ImageFolderTest, DamagedImagesNameTheFile) {
  std::string png = Png(16, 16);
  auto cut = DecodeImage(png.substr(0, png.size() / 2), 3, "cut.png");
  ASSERT_FALSE(cut.ok());
  EXPECT_EQ(cut.status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(cut.status().message().rfind("cut.png: ", 0), 0u) << cut.status().message();
  EXPECT_NE(cut.status().message().find("PNG image"), std::string::npos);
  std::string jpeg = Jpeg(16, 16);
  auto bad = DecodeImage(jpeg.substr(0, jpeg.size() / 2), 3, "cut.jpg");
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().message().rfind("cut.jpg: ", 0), 0u) << bad.status().message();
  EXPECT_NE(bad.status().message().find("JPEG image"), std::string::npos);
  auto text = DecodeImage("hello", 3, "x.png");
  ASSERT_FALSE(text.ok());
  EXPECT_EQ(text.status().message(), "x.png: neither a PNG nor a JPEG image");
}

TEST(ImageFolderTest, ClassesAreSortedDirectoriesAndTestUsesTrainsLabels) {
  TempDir tmp = TempDir::Create("image_folder_test").value();
  const fs::path d = tmp.path();
  for (auto [split, cls, file] :
       std::vector<std::tuple<std::string, std::string, std::string>>{{"train", "dog", "b.png"},
                                                                      {"train", "dog", "a.jpg"},
                                                                      {"train", "cat", "z.PNG"},
                                                                      {"val", "dog", "c.png"}}) {
    fs::create_directories(d / split / cls);
    std::ofstream(d / split / cls / file) << Png(4, 4);
  }
  auto train = ScanImageFolder(d.string(), "train");
  ASSERT_TRUE(train.ok()) << train.status().ToString();
  EXPECT_EQ(train->classes, (std::vector<std::string>{"cat", "dog"}));
  EXPECT_EQ(train->labels, (std::vector<int64_t>{0, 1, 1}));
  EXPECT_EQ(fs::path(train->files[1]).filename(), "a.jpg");
  auto test = ScanImageFolder(d.string(), "test", &train->classes);  // finds val/
  ASSERT_TRUE(test.ok()) << test.status().ToString();
  EXPECT_EQ(test->labels, (std::vector<int64_t>{1}));

  fs::create_directories(d / "val" / "bird");
  std::ofstream(d / "val" / "bird" / "x.png") << Png(4, 4);
  auto unknown = ScanImageFolder(d.string(), "test", &train->classes);
  ASSERT_FALSE(unknown.ok());
  EXPECT_NE(unknown.status().message().find("class bird is not a class of the train split"),
            std::string::npos);
  std::ofstream(d / "train" / "cat" / "notes.txt") << "x";
  auto stray = ScanImageFolder(d.string(), "train");
  ASSERT_FALSE(stray.ok());
  EXPECT_NE(stray.status().message().find("notes.txt: not a .png, .jpg or .jpeg image"),
            std::string::npos);
  auto none = ScanImageFolder((d / "nowhere").string(), "train");
  ASSERT_FALSE(none.ok());
  EXPECT_NE(none.status().message().find("no train directory"), std::string::npos);
}

TEST(CsvTableTest, ReadsQuotedFieldsAndNamesBadRecords) {
  TempDir tmp = TempDir::Create("csv_table_test").value();
  const std::string f = (tmp.path() / "t.csv").string();
  std::ofstream(f) << "x1,\"x, two\",label\n1.5,-2,0\n\"3\",4e-1,2\n";
  auto t = ReadCsvTable(f, "label");
  ASSERT_TRUE(t.ok()) << t.status().ToString();
  EXPECT_EQ(t->features, (std::vector<std::string>{"x1", "x, two"}));
  EXPECT_EQ(t->values, (std::vector<float>{1.5f, -2.0f, 3.0f, 0.4f}));
  EXPECT_EQ(t->labels, (std::vector<int64_t>{0, 2}));

  for (const auto& [text, want] : std::vector<std::pair<std::string, std::string>>{
           {"a,label\n1,0\n2\n", "t.csv:3: 1 fields; the header has 2"},
           {"a,label\n1,0\nx,1\n", "t.csv:3: a is \"x\", not a finite number"},
           {"a,label\n1,-1\n", "t.csv:2: label is \"-1\"; class labels are integers >= 0"},
           {"a,label\n1,0.5\n", "t.csv:2: label is \"0.5\""},
           {"a,b\n1,0\n", "t.csv:1: no column label (dataset.label) among a, b"},
           {"a,label\n", "t.csv: a header but no rows"},
           {"a,label\n\"1,0\n", "not valid CSV"}}) {
    std::ofstream(f, std::ios::trunc) << text;
    auto bad = ReadCsvTable(f, "label");
    ASSERT_FALSE(bad.ok()) << text;
    EXPECT_NE(bad.status().message().find(want), std::string::npos) << bad.status().message();
  }
  // The header alone: rows are not parsed (a bad one goes unnoticed here).
  std::ofstream(f, std::ios::trunc) << "a,label,c\n1,0,2\nx,y\n";
  auto features = ReadCsvFeatures(f, "label");
  ASSERT_TRUE(features.ok()) << features.status().ToString();
  EXPECT_EQ(*features, (std::vector<std::string>{"a", "c"}));
  EXPECT_FALSE(ReadCsvFeatures(f, "species").ok());

  std::ofstream(f, std::ios::trunc) << "b,label\n1,0\n";
  const std::vector<std::string> train_features = {"a"};
  auto other = ReadCsvTable(f, "label", &train_features);
  ASSERT_FALSE(other.ok());
  EXPECT_NE(other.status().message().find("feature columns b differ from train.csv's a"),
            std::string::npos);
}

}  // namespace
}  // namespace spot::train
