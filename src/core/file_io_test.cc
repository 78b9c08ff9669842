#include "core/file_io.h"

#include <gtest/gtest.h>
#include <sys/stat.h>

#include <filesystem>
#include <optional>

#include "core/temp_dir.h"

namespace spot {
namespace {

namespace fs = std::filesystem;

class FileIoTest : public ::testing::Test {
 protected:
  void SetUp() override {
    tmp_.emplace(TempDir::Create("spot_file_io_test").value());
    dir_ = tmp_->path();
  }
  std::optional<TempDir> tmp_;
  fs::path dir_;
};

TEST_F(FileIoTest, WriteThenReadBack) {
  std::string path = (dir_ / "a.bin").string();
  std::string_view pieces[] = {"hello ", "", "world"};
  ASSERT_TRUE(WriteFileAtomically(path, pieces).ok());
  auto r = ReadFile(path);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(*r, "hello world");
  // Overwrite replaces the whole file.
  ASSERT_TRUE(WriteFileAtomically(path, "x").ok());
  EXPECT_EQ(*ReadFile(path), "x");
  // No temporary file is left behind.
  int files = 0;
  for (auto& e : fs::directory_iterator(dir_)) {
    ++files;
    EXPECT_FALSE(e.path().filename().string().starts_with(kTempFilePrefix));
  }
  EXPECT_EQ(files, 1);
}

TEST_F(FileIoTest, LargeFileRoundTrips) {
  std::string big(3 << 20, '\0');
  for (size_t i = 0; i < big.size(); ++i) big[i] = static_cast<char>(i * 131 % 251);
  std::string path = (dir_ / "big").string();
  ASSERT_TRUE(WriteFileAtomically(path, big).ok());
  EXPECT_EQ(*ReadFile(path), big);
}

TEST_F(FileIoTest, MissingFileIsNotFound) {
  auto r = ReadFile((dir_ / "nope").string());
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kNotFound);
  EXPECT_NE(r.status().message().find("nope"), std::string::npos);
}

TEST_F(FileIoTest, WriteIntoMissingDirectoryFailsCleanly) {
  Status s = WriteFileAtomically((dir_ / "no" / "such" / "f").string(), "x");
  EXPECT_FALSE(s.ok());
  EXPECT_FALSE(fs::exists(dir_ / "no"));
}

TEST_F(FileIoTest, AppendLogAddsWholeLinesAndAnEmptyPathWritesNothing) {
  const std::string path = (dir_ / "log.csv").string();
  {
    auto log = AppendLog::Open(path);
    ASSERT_TRUE(log.ok()) << log.status().message();
    log->Append("1,a\n");
    AppendLog moved = std::move(*log);
    EXPECT_FALSE(log->on());
    moved.Append("2,b\n");
    // Line-buffered: a reader sees the lines before the log is closed.
    EXPECT_EQ(*ReadFile(path), "1,a\n2,b\n");
    EXPECT_TRUE(moved.Sync().ok());
  }
  auto again = AppendLog::Open(path);
  ASSERT_TRUE(again.ok());
  again->Append("3,c\n");
  EXPECT_EQ(*ReadFile(path), "1,a\n2,b\n3,c\n");

  auto off = AppendLog::Open("");
  ASSERT_TRUE(off.ok());
  EXPECT_FALSE(off->on());
  off->Append("ignored\n");
  EXPECT_TRUE(off->Sync().ok());

  auto bad = AppendLog::Open((dir_ / "no" / "such" / "log").string());
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("no/such/log"), std::string::npos);
}

// Anything but a regular file is refused before a byte is read, with the
// path and what it is: a directory (whose lseek(SEEK_END) on ext4 is 2^63 - 1,
// once a std::bad_alloc), a FIFO (whose open blocked until a writer came), a
// device (/dev/zero never ends).
TEST_F(FileIoTest, OnlyRegularFilesAreRead) {
  const std::string fifo = (dir_ / "fifo").string();
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  const struct {
    std::string path, kind;
  } cases[] = {{dir_.string(), "is a directory"},
               {fifo, "is a named pipe (FIFO)"},
               {"/dev/zero", "is a character device"},
               {"/dev/null", "is a character device"}};
  for (const auto& c : cases) {
    auto r = ReadFile(c.path);
    ASSERT_FALSE(r.ok()) << c.path;
    EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument) << c.path;
    EXPECT_EQ(r.status().message(), c.path + ": " + c.kind + ", expected a regular file");
    char byte;
    Status range = ReadFileRange(c.path, 0, std::span<char>(&byte, 1));
    EXPECT_EQ(range.code(), StatusCode::kInvalidArgument) << c.path;
  }
}

// A file opened once reads the file it opened: its name replaced
// (rename) or removed, the reads go on; past its end is DataLoss.
TEST_F(FileIoTest, AReadOnlyFileReadsTheFileItOpened) {
  const std::string path = (dir_ / "blob").string();
  ASSERT_TRUE(WriteFileAtomically(path, "0123456789").ok());
  auto f = ReadOnlyFile::Open(path);
  ASSERT_TRUE(f.ok()) << f.status().ToString();
  EXPECT_EQ(f->size(), 10u);
  ASSERT_TRUE(WriteFileAtomically(path, "abc").ok());
  char buf[4];
  ASSERT_TRUE(f->ReadAt(6, buf).ok());
  EXPECT_EQ(std::string_view(buf, 4), "6789");
  std::filesystem::remove(path);
  ASSERT_TRUE(f->ReadAt(0, buf).ok());
  EXPECT_EQ(std::string_view(buf, 4), "0123");
  Status past = f->ReadAt(8, buf);
  EXPECT_EQ(past.code(), StatusCode::kDataLoss);
  EXPECT_NE(past.message().find(path), std::string::npos) << past.message();
  EXPECT_EQ(ReadOnlyFile::Open(path).status().code(), StatusCode::kNotFound);
  EXPECT_EQ(ReadOnlyFile::Open(dir_.string()).status().code(), StatusCode::kInvalidArgument);
  ReadOnlyFile moved = std::move(f).value();  // the descriptor moves with it
  ASSERT_TRUE(moved.ReadAt(2, std::span<char>(buf, 2)).ok());
  EXPECT_EQ(std::string_view(buf, 2), "23");
}

// Mapped, a file opened once is still the file it opened: replaced or
// removed, the mapping keeps its bytes; it moves with the object.
TEST_F(FileIoTest, AMappedReadOnlyFileIsTheFileItOpened) {
  const std::string path = (dir_ / "mapped").string();
  ASSERT_TRUE(WriteFileAtomically(path, "0123456789").ok());
  auto f = ReadOnlyFile::Open(path);
  ASSERT_TRUE(f.ok()) << f.status().ToString();
  EXPECT_TRUE(f->mapped().empty());
  ASSERT_TRUE(f->Map());
  EXPECT_EQ(f->mapped(), "0123456789");
  const char* first = f->mapped().data();
  ASSERT_TRUE(f->Map());  // once
  EXPECT_EQ(f->mapped().data(), first);
  ASSERT_TRUE(WriteFileAtomically(path, "abc").ok());
  std::filesystem::remove(path);
  EXPECT_EQ(f->mapped(), "0123456789");
  ReadOnlyFile moved = std::move(f).value();
  EXPECT_EQ(moved.mapped(), "0123456789");
  ReadOnlyFile assigned = std::move(moved);
  EXPECT_EQ(assigned.mapped(), "0123456789");
  EXPECT_TRUE(moved.mapped().empty());  // NOLINT(bugprone-use-after-move): moved from

  const std::string empty = (dir_ / "empty").string();
  ASSERT_TRUE(WriteFileAtomically(empty, "").ok());
  auto e = ReadOnlyFile::Open(empty);
  ASSERT_TRUE(e.ok());
  EXPECT_FALSE(e->Map());  // nothing to map: reads go through ReadAt
  EXPECT_TRUE(e->mapped().empty());
}

TEST_F(FileIoTest, SizeLimit) {
  const std::string path = (dir_ / "ten").string();
  ASSERT_TRUE(WriteFileAtomically(path, "0123456789").ok());
  EXPECT_EQ(*ReadFile(path, 10), "0123456789");
  auto r = ReadFile(path, 9);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(r.status().message().find(path + ": too large (10 bytes"), std::string::npos)
      << r.status().message();
  // An empty file, and one whose size stat does not know (procfs).
  ASSERT_TRUE(WriteFileAtomically(path, "").ok());
  EXPECT_EQ(*ReadFile(path, 0), "");
  auto stat = ReadFile("/proc/self/stat");
  ASSERT_TRUE(stat.ok()) << stat.status().ToString();
  EXPECT_FALSE(stat->empty());
}

}  // namespace
}  // namespace spot
