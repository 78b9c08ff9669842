#include "monitor/tensorboard.h"

#include <gtest/gtest.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <csignal>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <optional>
#include <string>
#include <vector>

#include "core/file_io.h"
#include "core/temp_dir.h"
#include "monitor/test_shell.h"

namespace spot::monitor {
namespace {

namespace fs = std::filesystem;

// ---- an independent reader of event files, for checking the writer ----

// Bit-at-a-time CRC32C: no table, nothing shared with the code under test.
uint32_t SlowCrc32c(std::string_view data) {
  uint32_t c = 0xFFFFFFFFu;
  for (unsigned char b : data) {
    c ^= b;
    for (int k = 0; k < 8; ++k) c = (c >> 1) ^ (0x82F63B78u & (0u - (c & 1u)));
  }
  return ~c;
}
uint32_t Mask(uint32_t c) { return ((c >> 15) | (c << 17)) + 0xa282ead8u; }

uint64_t LittleEndian(std::string_view bytes) {
  uint64_t v = 0;
  for (size_t i = bytes.size(); i-- > 0;) v = v << 8 | static_cast<unsigned char>(bytes[i]);
  return v;
}

struct TestRecord {
  size_t offset = 0;
  std::string data;
};

// Splits a file into records, failing the test on bad framing or a bad CRC.
std::vector<TestRecord> SplitRecords(const std::string& file) {
  std::vector<TestRecord> out;
  size_t off = 0;
  while (off < file.size()) {
    if (file.size() - off < 16) {
      ADD_FAILURE() << "short record at " << off;
      break;
    }
    std::string_view header(file.data() + off, 8);
    uint64_t length = LittleEndian(header);
    EXPECT_EQ(LittleEndian(std::string_view(file).substr(off + 8, 4)), Mask(SlowCrc32c(header)))
        << "length CRC at " << off;
    if (length > file.size() - off - 16) {
      ADD_FAILURE() << "record at " << off << " runs past the end";
      break;
    }
    std::string data = file.substr(off + 12, length);
    EXPECT_EQ(LittleEndian(std::string_view(file).substr(off + 12 + length, 4)),
              Mask(SlowCrc32c(data)))
        << "data CRC at " << off;
    out.push_back({off, data});
    off += 16 + length;
  }
  return out;
}

struct Field {
  uint32_t number = 0, wire = 0;
  uint64_t number_value = 0;  // varint, fixed32 or fixed64
  std::string bytes;          // length-delimited
};

std::vector<Field> Fields(std::string_view msg) {
  std::vector<Field> out;
  size_t i = 0;
  auto varint = [&] {
    uint64_t v = 0;
    for (int shift = 0; i < msg.size(); shift += 7) {
      auto b = static_cast<unsigned char>(msg[i++]);
      v |= uint64_t{b & 0x7Fu} << shift;
      if (!(b & 0x80)) break;
    }
    return v;
  };
  while (i < msg.size()) {
    Field f;
    uint64_t key = varint();
    f.number = static_cast<uint32_t>(key >> 3);
    f.wire = static_cast<uint32_t>(key & 7);
    if (f.wire == 0) {
      f.number_value = varint();
    } else if (f.wire == 1 || f.wire == 5) {
      size_t n = f.wire == 1 ? 8 : 4;
      f.number_value = LittleEndian(msg.substr(i, n));
      i += n;
    } else if (f.wire == 2) {
      uint64_t n = varint();
      f.bytes = std::string(msg.substr(i, n));
      i += n;
    } else {
      ADD_FAILURE() << "wire type " << f.wire;
      break;
    }
    out.push_back(f);
  }
  EXPECT_EQ(i, msg.size()) << "message overrun";
  return out;
}

struct TestEvent {
  std::optional<double> wall_time;
  std::optional<int64_t> step;
  std::string file_version;
  std::vector<std::pair<std::string, float>> values;
};

TestEvent Decode(std::string_view data) {
  TestEvent e;
  for (const Field& f : Fields(data)) {
    if (f.number == 1 && f.wire == 1) {
      double d;
      std::memcpy(&d, &f.number_value, 8);
      e.wall_time = d;
    } else if (f.number == 2 && f.wire == 0) {
      e.step = static_cast<int64_t>(f.number_value);
    } else if (f.number == 3 && f.wire == 2) {
      e.file_version = f.bytes;
    } else if (f.number == 5 && f.wire == 2) {
      for (const Field& v : Fields(f.bytes)) {
        EXPECT_EQ(v.number, 1u);
        std::string tag;
        float value = 0;
        for (const Field& x : Fields(v.bytes)) {
          if (x.number == 1) tag = x.bytes;
          auto bits = static_cast<uint32_t>(x.number_value);
          if (x.number == 2 && x.wire == 5) std::memcpy(&value, &bits, 4);
        }
        e.values.emplace_back(tag, value);
      }
    } else {
      ADD_FAILURE() << "unexpected field " << f.number;
    }
  }
  return e;
}

// ---- helpers ----

using testing::RunShell;

void WriteBytes(const std::string& path, std::string_view bytes) {
  std::ofstream(path, std::ios::binary | std::ios::trunc) << bytes;
}

bool AllDigits(std::string_view s) {
  return !s.empty() && s.find_first_not_of("0123456789") == std::string_view::npos;
}

// "events.out.tfevents.<seconds>.<host>.<our pid>.<counter>" (the host may hold dots).
bool IsEventFileName(std::string_view name) {
  constexpr std::string_view kPrefix = "events.out.tfevents.";
  if (!name.starts_with(kPrefix)) return false;
  name.remove_prefix(kPrefix.size());
  size_t dot = name.find('.');
  size_t last = name.rfind('.');
  if (dot == std::string_view::npos || !AllDigits(name.substr(0, dot))) return false;
  if (!AllDigits(name.substr(last + 1))) return false;
  name = name.substr(dot + 1, last - dot - 1);  // "<host>.<pid>"
  const std::string pid = "." + std::to_string(::getpid());
  return name.ends_with(pid) && name.size() > pid.size();
}

constexpr double kWall = 1700000000.25;

class TensorBoardTest : public ::testing::Test {
 protected:
  void SetUp() override { tmp_.emplace(TempDir::Create("spot_tensorboard_test").value()); }
  std::string Dir(const std::string& name = "run") const { return (tmp_->path() / name).string(); }

  // A file with the version event and three scalar events; returns its path.
  std::string WriteSample() {
    auto w = EventWriter::Open(Dir());
    EXPECT_TRUE(w.ok()) << w.status().ToString();
    EXPECT_TRUE((*w)->AddScalars(1, {{"train/loss", 0.5}, {"train/lr", 0.001}}, kWall).ok());
    EXPECT_TRUE((*w)->AddScalars(2, {{"train/loss", 0.25}, {"train/lr", 0.001}}, kWall + 1).ok());
    EXPECT_TRUE((*w)->AddScalar("eval/test_accuracy", 7, 0.875, kWall + 2).ok());
    return (*w)->path();
  }

  std::optional<TempDir> tmp_;
};

TEST(TensorBoardCrcTest, KnownValues) {
  EXPECT_EQ(Crc32c("123456789"), 0xE3069283u);
  EXPECT_EQ(Crc32c(""), 0u);
  uint32_t c = 0xE3069283u;
  EXPECT_EQ(MaskedCrc32c("123456789"), ((c >> 15) | (c << 17)) + 0xa282ead8u);
  std::string data;
  for (int i = 0; i < 1000; ++i) {
    data += static_cast<char>(i * 7919 % 256);
    if (i % 97 == 0) {
      EXPECT_EQ(Crc32c(data), SlowCrc32c(data)) << i;
    }
  }
}

TEST_F(TensorBoardTest, WriterOutputDecodesIndependently) {
  auto w = EventWriter::Open(Dir("a/b/run"));  // parents created
  ASSERT_TRUE(w.ok()) << w.status().ToString();
  const std::string path = (*w)->path();
  EXPECT_TRUE(IsEventFileName(fs::path(path).filename().string())) << path;
  EXPECT_EQ(fs::path(path).parent_path(), fs::path(Dir("a/b/run")));

  // The version event is on disk at once.
  std::vector<TestRecord> records = SplitRecords(ReadFile(path).value());
  ASSERT_EQ(records.size(), 1u);
  TestEvent version = Decode(records[0].data);
  EXPECT_EQ(version.file_version, "brain.Event:2");
  ASSERT_TRUE(version.wall_time.has_value());
  EXPECT_NEAR(*version.wall_time, static_cast<double>(std::time(nullptr)), 60);
  EXPECT_TRUE(version.values.empty());

  ASSERT_TRUE((*w)->AddScalars(3, {{"train/loss", 2.5}, {"train/lr", 0.1}}, kWall).ok());
  ASSERT_TRUE((*w)->AddScalar("big", -4, 1e40, kWall + 0.5).ok());  // beyond float: +Inf
  ASSERT_TRUE((*w)->AddScalars(1LL << 40, {}, kWall + 1).ok());
  ASSERT_TRUE((*w)->AddScalar("now", 5, -1).ok());

  // Every AddScalars call is flushed: read while the writer is open.
  records = SplitRecords(ReadFile(path).value());
  ASSERT_EQ(records.size(), 5u);
  TestEvent e = Decode(records[1].data);
  EXPECT_EQ(e.wall_time, kWall);
  EXPECT_EQ(e.step, 3);
  EXPECT_EQ(e.file_version, "");
  EXPECT_EQ(e.values,
            (std::vector<std::pair<std::string, float>>{{"train/loss", 2.5f}, {"train/lr", 0.1f}}));
  e = Decode(records[2].data);
  EXPECT_EQ(e.step, -4);
  ASSERT_EQ(e.values.size(), 1u);
  EXPECT_EQ(e.values[0].second, std::numeric_limits<float>::infinity());
  e = Decode(records[3].data);
  EXPECT_EQ(e.step, int64_t{1} << 40);
  EXPECT_TRUE(e.values.empty());
  e = Decode(records[4].data);
  EXPECT_NEAR(*e.wall_time, static_cast<double>(std::time(nullptr)), 60);
  EXPECT_EQ(e.values, (std::vector<std::pair<std::string, float>>{{"now", -1.0f}}));

  EXPECT_EQ((*w)->AddScalar("", 1, 1).code(), StatusCode::kInvalidArgument);
}

TEST_F(TensorBoardTest, PythonCrc32cAgrees) {
  const std::string path = WriteSample();
  // Recomputes both masked CRCs of every record with Debian's python3-crc32c.
  const std::string script =
      "import crc32c, struct, sys\n"
      "d = open(sys.argv[1], 'rb').read()\n"
      "m = lambda c: ((((c >> 15) | (c << 17)) & 0xffffffff) + 0xa282ead8) & 0xffffffff\n"
      "o = n = 0\n"
      "while o < len(d):\n"
      "    (l,) = struct.unpack('<Q', d[o:o + 8])\n"
      "    assert struct.unpack('<I', d[o + 8:o + 12])[0] == m(crc32c.crc32c(d[o:o + 8])), o\n"
      "    p = d[o + 12:o + 12 + l]\n"
      "    assert len(p) == l, o\n"
      "    assert struct.unpack('<I', d[o + 12 + l:o + 16 + l])[0] == m(crc32c.crc32c(p)), o\n"
      "    o += 16 + l\n"
      "    n += 1\n"
      "print('records', n)\n";
  ASSERT_EQ(::setenv("SPOT_TB_SCRIPT", script.c_str(), 1), 0);
  auto [code, out] = RunShell("/usr/bin/python3 -c \"$SPOT_TB_SCRIPT\" '" + path + "'");
  ::unsetenv("SPOT_TB_SCRIPT");
  EXPECT_EQ(code, 0) << out;
  EXPECT_EQ(out, "records 4\n");
}

TEST_F(TensorBoardTest, ProtocDecodesPayloads) {
  const std::string path = WriteSample();
  std::vector<TestRecord> records = SplitRecords(ReadFile(path).value());
  ASSERT_EQ(records.size(), 4u);
  std::vector<std::string> decoded;
  for (const TestRecord& r : records) {
    std::string payload = (tmp_->path() / "payload.bin").string();
    WriteBytes(payload, r.data);
    auto [code, out] = RunShell("/usr/bin/protoc --decode_raw < '" + payload + "'");
    EXPECT_EQ(code, 0) << out;
    decoded.push_back(out);
  }
  EXPECT_NE(decoded[0].find("3: \"brain.Event:2\""), std::string::npos) << decoded[0];
  EXPECT_NE(decoded[1].find("2: 1\n"), std::string::npos) << decoded[1];
  EXPECT_NE(decoded[1].find("1: \"train/loss\""), std::string::npos) << decoded[1];
  EXPECT_NE(decoded[1].find("1: \"train/lr\""), std::string::npos) << decoded[1];
  EXPECT_NE(decoded[1].find("2: 0x3f000000"), std::string::npos) << decoded[1];          // 0.5f
  EXPECT_NE(decoded[1].find("1: 0x41d954fc40100000"), std::string::npos) << decoded[1];  // kWall
  EXPECT_NE(decoded[3].find("2: 7\n"), std::string::npos) << decoded[3];
  EXPECT_NE(decoded[3].find("1: \"eval/test_accuracy\""), std::string::npos) << decoded[3];
  EXPECT_NE(decoded[3].find("2: 0x3f600000"), std::string::npos) << decoded[3];  // 0.875f
}

TEST_F(TensorBoardTest, ReadEventFileRoundTrips) {
  const std::string path = WriteSample();
  auto file = ReadEventFile(path);
  ASSERT_TRUE(file.ok()) << file.status().ToString();
  EXPECT_EQ(file->file_version, "brain.Event:2");
  EXPECT_EQ(file->records, 4);
  ASSERT_EQ(file->scalars.size(), 5u);
  const ScalarPoint& p = file->scalars[1];
  EXPECT_EQ(p.tag, "train/lr");
  EXPECT_EQ(p.step, 1);
  EXPECT_EQ(p.value, 0.001f);
  EXPECT_EQ(p.wall_time, kWall);
  EXPECT_EQ(file->scalars[4].tag, "eval/test_accuracy");
  EXPECT_EQ(file->scalars[4].value, 0.875f);
  EXPECT_EQ(file->scalars[4].wall_time, kWall + 2);
  EXPECT_EQ(ReadEventFile(Dir("nope")).status().code(), StatusCode::kNotFound);
}

TEST_F(TensorBoardTest, WritersShareARunDirectory) {
  auto a = EventWriter::Open(Dir());
  auto b = EventWriter::Open(Dir());
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_NE((*a)->path(), (*b)->path());
  ASSERT_TRUE((*a)->AddScalar("x", 1, 1, 10).ok());
  ASSERT_TRUE((*b)->AddScalar("x", 5, 2, 20).ok());
  ASSERT_TRUE((*b)->AddScalar("x", 3, 3, 20).ok());
  ASSERT_TRUE((*a)->AddScalar("x", 2, 4, 30).ok());
  WriteBytes(Dir() + "/notes.txt", "not an event file");
  fs::create_directories(Dir() + "/sub.tfevents.dir");  // a directory, skipped
  // A writer still appending: its last record is cut short.
  WriteBytes(Dir() + "/events.out.tfevents.1.other", ReadFile((*a)->path()).value() + "\x10\x00");
  auto points = ReadRunScalars(Dir());
  ASSERT_TRUE(points.ok()) << points.status().ToString();
  std::vector<std::pair<int64_t, float>> got;
  for (const ScalarPoint& p : *points) got.emplace_back(p.step, p.value);
  EXPECT_EQ(got, (std::vector<std::pair<int64_t, float>>{
                     {1, 1}, {1, 1}, {3, 3}, {5, 2}, {2, 4}, {2, 4}}));
  EXPECT_EQ(ReadRunScalars(Dir("missing")).status().code(), StatusCode::kNotFound);
}

TEST_F(TensorBoardTest, DamageIsDataLossNamingTheOffset) {
  const std::string path = WriteSample();
  const std::string good = ReadFile(path).value();
  std::vector<TestRecord> records = SplitRecords(good);
  ASSERT_EQ(records.size(), 4u);
  const size_t off = records[2].offset;
  const size_t len = records[2].data.size();
  struct Case {
    size_t at;
    const char* want;
  };
  const Case cases[] = {{off + 0, "length CRC mismatch"},
                        {off + 9, "length CRC mismatch"},
                        {off + 12 + len / 2, "data CRC mismatch"},
                        {off + 12 + len + 1, "data CRC mismatch"}};
  const std::string damaged = Dir("damaged.tfevents");
  for (const Case& c : cases) {
    std::string bytes = good;
    bytes[c.at] = static_cast<char>(bytes[c.at] ^ 0x20);
    WriteBytes(damaged, bytes);
    for (bool partial : {false, true}) {
      auto file = ReadEventFile(damaged, partial);
      ASSERT_FALSE(file.ok()) << c.at;
      EXPECT_EQ(file.status().code(), StatusCode::kDataLoss);
      const std::string& m = file.status().message();
      EXPECT_NE(m.find(damaged), std::string::npos) << m;
      EXPECT_NE(m.find("record at byte " + std::to_string(off) + ":"), std::string::npos) << m;
      EXPECT_NE(m.find(c.want), std::string::npos) << m;
    }
  }
}

TEST_F(TensorBoardTest, TruncatedTail) {
  const std::string path = WriteSample();
  const std::string good = ReadFile(path).value();
  const size_t last = SplitRecords(good).back().offset;
  const std::string cut = Dir("cut.tfevents");
  for (size_t keep : {last + 5, last + 12, last + 14, good.size() - 1}) {
    WriteBytes(cut, good.substr(0, keep));
    auto strict = ReadEventFile(cut);
    ASSERT_FALSE(strict.ok()) << keep;
    EXPECT_EQ(strict.status().code(), StatusCode::kDataLoss);
    EXPECT_NE(strict.status().message().find("byte " + std::to_string(last) + ": truncated"),
              std::string::npos)
        << strict.status().message();
    auto lenient = ReadEventFile(cut, /*allow_partial_tail=*/true);
    ASSERT_TRUE(lenient.ok()) << lenient.status().ToString();
    EXPECT_EQ(lenient->records, 3);
    EXPECT_EQ(lenient->scalars.size(), 4u);
  }
}

// Opens a writer in `dir`, lowers the file size limit to what is written,
// adds scalars twice and exits 0 when both fail as Unavailable naming the file.
[[noreturn]] void AddScalarsOverFileSizeLimit(const std::string& dir) {
  std::signal(SIGXFSZ, SIG_IGN);  // EFBIG instead of the signal
  auto w = EventWriter::Open(dir);
  if (!w.ok()) std::_Exit(2);
  struct stat st {};
  if (::stat((*w)->path().c_str(), &st) != 0) std::_Exit(3);
  rlimit limit{};
  limit.rlim_cur = static_cast<rlim_t>(st.st_size);
  limit.rlim_max = RLIM_INFINITY;
  if (::setrlimit(RLIMIT_FSIZE, &limit) != 0) std::_Exit(4);
  Status s = (*w)->AddScalar("loss", 1, 0.5);
  Status again = (*w)->AddScalar("loss", 2, 0.5);
  limit.rlim_cur = RLIM_INFINITY;  // the death test's capture of stderr is a file too
  if (::setrlimit(RLIMIT_FSIZE, &limit) != 0) std::_Exit(5);
  std::fprintf(stderr, "%s | %s\n", s.ToString().c_str(), again.ToString().c_str());
  bool named = s.message().find((*w)->path()) != std::string::npos;
  bool sticky = again.code() == s.code() && again.message() == s.message();
  std::_Exit(s.code() == StatusCode::kUnavailable && named && sticky ? 0 : 1);
}

using TensorBoardDeathTest = TensorBoardTest;

// The writer reports a failed write (here the file size limit, EFBIG; a full
// disk, ENOSPC, takes the same path) naming the file, and stays failed. In a
// child process, since it lowers a process-wide limit.
TEST_F(TensorBoardDeathTest, WriteErrorsAreReported) {
  EXPECT_EXIT(AddScalarsOverFileSizeLimit(Dir()), ::testing::ExitedWithCode(0),
              "UNAVAILABLE: writing events file .*events.out.tfevents.*File too large");
}

}  // namespace
}  // namespace spot::monitor
