#include "core/temp_dir.h"

#include <gtest/gtest.h>

#include <fstream>

namespace spot {
namespace {

namespace fs = std::filesystem;

TEST(TempDirTest, CreatesUniqueDirectoriesAndRemovesThem) {
  fs::path kept;
  {
    auto a = TempDir::Create("spot_tmp_test");
    auto b = TempDir::Create("spot_tmp_test");
    ASSERT_TRUE(a.ok() && b.ok());
    EXPECT_NE(a->path(), b->path());
    EXPECT_TRUE(fs::is_directory(a->path()));
    std::ofstream(a->path() / "f") << "x";
    fs::create_directories(a->path() / "sub" / "deeper");
    kept = a->path();
    TempDir moved = std::move(a).value();
    EXPECT_EQ(moved.path(), kept);
  }
  EXPECT_FALSE(fs::exists(kept));
}

TEST(TempDirTest, KeepLeavesTheDirectory) {
  fs::path p;
  {
    auto d = TempDir::Create("spot_tmp_keep");
    ASSERT_TRUE(d.ok());
    p = d->path();
    d->Keep();
  }
  EXPECT_TRUE(fs::is_directory(p));
  fs::remove_all(p);
}

}  // namespace
}  // namespace spot
