#include "core/spec_reader.h"

#include <gtest/gtest.h>

#include <filesystem>

#include "core/file_io.h"

namespace spot {
namespace {

struct Spec {
  int64_t batch = 64;
  double lr = 0.1;
  std::string model = "cnn";
  bool flag = false;
};

Status Read(const std::string& yaml, Spec* spec) {
  auto r = SpecReader::FromString(yaml, "job.yaml");
  if (!r.ok()) return r.status();
  SpecReader& top = *r;
  top.Int("batch_size", &spec->batch, {.min = 1});
  top.Enum("model", &spec->model, {"cnn", "mlp"}, /*required=*/true);
  top.Bool("flag", &spec->flag);
  SpecReader& opt = top.Section("optimizer");
  opt.Double("lr", &spec->lr, {.min = 0, .min_exclusive = true});
  return top.Finish();
}

TEST(SpecReaderTest, ReadsFieldsAndKeepsDefaults) {
  Spec s;
  ASSERT_TRUE(Read("model: mlp\noptimizer:\n  lr: 0.5\n", &s).ok());
  EXPECT_EQ(s.model, "mlp");
  EXPECT_EQ(s.batch, 64);
  EXPECT_DOUBLE_EQ(s.lr, 0.5);
}

TEST(SpecReaderTest, ErrorsNameFileLineAndField) {
  struct Case {
    std::string yaml;
    std::string expected;
  };
  const Case cases[] = {
      {"batch_size: 8\n", "job.yaml:1:1: model: required field is missing"},
      {"model: cnn\nbatch_size: -4\n", "job.yaml:2:13: batch_size: must be >= 1 (got -4)"},
      {"model: cnn\nbatch_size: many\n",
       "job.yaml:2:13: batch_size: expected an integer (got 'many')"},
      {"model: cnn\nbatch_size: 1.5\n", "batch_size: expected an integer (got '1.5')"},
      {"model: rnn\n", "job.yaml:1:8: model: unknown value 'rnn' (expected one of: cnn, mlp)"},
      {"model: cnn\noptimizer:\n  lr: 0\n", "job.yaml:3:7: optimizer.lr: must be > 0 (got 0)"},
      {"model: cnn\noptimizer:\n  lr: .nan\n", "optimizer.lr: must be a finite number"},
      {"model: cnn\nbatch_sise: 3\n",
       "job.yaml:2:13: batch_sise: unknown field (did you mean 'batch_size'?)"},
      {"model: cnn\noptimizer:\n  momentun: 3\n", "optimizer.momentun: unknown field"},
      {"model: cnn\noptimizer: 3\n", "optimizer: expected a mapping of fields (got '3')"},
      {"model: [a]\n", "model: expected a string (got a list)"},
      {"model: cnn\nflag: maybe\n", "flag: expected true or false (got 'maybe')"},
      // yaml-cpp's LoadAll never returned on these (fuzz/regressions/spec_reader/).
      {",", "job.yaml:1:1: invalid YAML: unexpected ','"},
      {"[a],", "job.yaml:1:4: invalid YAML: unexpected ','"},
      {"model: cnn\nflag: yes\n", "flag: expected true or false (got 'yes')"},
      {"model: cnn\nflag: off\n", "flag: expected true or false (got 'off')"},
      {"model: cnn\nflag: \"true\"\n", "flag: expected true or false"},
      {"- 1\n- 2\n", "job.yaml: expected a mapping of fields at the top level"},
      {"model: cnn\n  bad: [\n", "job.yaml:2:"},
      {"model: cnn\nbatch_size: 8\nbatch_size: 9\n",
       "job.yaml:3:1: batch_size: given twice (first at job.yaml:2:13)"},
      {"model: cnn\noptimizer:\n  lr: 1\n  lr: 2\n", "optimizer.lr: given twice"},
  };
  for (const Case& c : cases) {
    Spec s;
    Status st = Read(c.yaml, &s);
    EXPECT_EQ(st.code(), StatusCode::kInvalidArgument) << c.yaml;
    EXPECT_NE(st.message().find(c.expected), std::string::npos) << "yaml:\n"
                                                                << c.yaml << "message:\n"
                                                                << st.message();
  }
}

TEST(SpecReaderTest, ReportsEveryError) {
  Spec s;
  Status st = Read("model: x\nbatch_size: 0\nzzz: 1\n", &s);
  EXPECT_NE(st.message().find("model"), std::string::npos);
  EXPECT_NE(st.message().find("batch_size"), std::string::npos);
  EXPECT_NE(st.message().find("zzz: unknown field"), std::string::npos);
}

TEST(SpecReaderTest, MissingFileIsInvalidArgument) {
  auto r = SpecReader::FromFile("/nonexistent/job.yaml");
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(r.status().message().find("/nonexistent/job.yaml: no such file"), std::string::npos);
}

// Numbers are written plainly: a quoted one is a string, and a leading zero
// is ambiguous (yaml-cpp read "010" as octal 8).
TEST(SpecReaderTest, NumbersAreStrict) {
  struct Case {
    std::string yaml;
    std::string expected;
  };
  const Case cases[] = {
      {"model: cnn\nbatch_size: \"64\"\n",
       "job.yaml:2:13: batch_size: expected an integer, got the string \"64\" (write numbers "
       "without quotes)"},
      {"model: cnn\nbatch_size: '64'\n", "batch_size: expected an integer, got the string"},
      {"model: cnn\nbatch_size: !!str 64\n", "batch_size: expected an integer, got the string"},
      {"model: cnn\noptimizer:\n  lr: \"0.5\"\n",
       "optimizer.lr: expected a number, got the string \"0.5\""},
      {"model: cnn\nbatch_size: 010\n",
       "job.yaml:2:13: batch_size: '010' has a leading zero, which is ambiguous"},
      {"model: cnn\nbatch_size: 0x10\n", "batch_size: expected an integer (got '0x10')"},
      {"model: cnn\nbatch_size: 99999999999999999999\n",
       "batch_size: is out of range for a 64-bit integer"},
      {"model: cnn\noptimizer:\n  lr: 1e999\n", "optimizer.lr: is out of range for a number"},
      {"model: cnn\noptimizer:\n  lr: 05\n", "optimizer.lr: '05' has a leading zero"},
  };
  for (const Case& c : cases) {
    Spec s;
    Status st = Read(c.yaml, &s);
    EXPECT_EQ(st.code(), StatusCode::kInvalidArgument) << c.yaml;
    EXPECT_NE(st.message().find(c.expected), std::string::npos) << "yaml:\n"
                                                                << c.yaml << "message:\n"
                                                                << st.message();
    EXPECT_EQ(s.batch, 64) << "a refused value leaves the default";
  }
  Spec s;
  ASSERT_TRUE(Read("model: cnn\nbatch_size: +8\noptimizer: {lr: 1e-3}\n", &s).ok());
  EXPECT_EQ(s.batch, 8);
  EXPECT_DOUBLE_EQ(s.lr, 1e-3);
}

// A value out of bounds is reported and not stored: a later check that
// divides by it (width % heads) never sees heads: 0.
TEST(SpecReaderTest, ValuesOutOfBoundsAreNotStored) {
  auto r = SpecReader::FromString("a: 0\nb: 7000000000\nc: 70000\n", "job.yaml");
  ASSERT_TRUE(r.ok());
  int64_t a = 4;
  int b = 5;
  int c = 6;
  r->Int("a", &a, {.min = 1});
  r->Int("b", &b);
  r->Int("c", &c, {.max = 1000});
  EXPECT_EQ(a, 4);
  EXPECT_EQ(b, 5);
  EXPECT_EQ(c, 6);
  const std::string m(r->Finish().message());
  EXPECT_NE(m.find("job.yaml:1:4: a: must be >= 1 (got 0)"), std::string::npos) << m;
  EXPECT_NE(m.find("job.yaml:2:4: b: is out of range for a 32-bit integer (got 7000000000)"),
            std::string::npos)
      << m;
  EXPECT_NE(m.find("c: must be <= 1000 (got 70000)"), std::string::npos) << m;
}

Status Parse(const std::string& text) { return SpecReader::FromString(text, "job.yaml").status(); }

TEST(SpecReaderTest, MalformedFilesNameFileAndReason) {
  using namespace std::string_literals;
  struct Case {
    std::string text;
    std::string expected;
  };
  const std::string deep = "a: " + std::string(100000, '[') + "\n";
  const std::string deep_block = [] {
    std::string y;
    for (int i = 0; i < 2500; ++i) y += std::string(i, ' ') + "k:\n";
    return y;
  }();
  const Case cases[] = {
      // yaml-cpp says "bad file" for this.
      {deep,
       "job.yaml: invalid YAML: mappings and lists nested more than 499 levels deep (by "
       "line "},
      {deep_block, "job.yaml: invalid YAML: mappings and lists nested more than 499 levels deep"},
      {"\xFF\xFEm\0o\0d\0e\0l\0:\0 \0c\0n\0n\0\n\0"s,
       "job.yaml: is UTF-16 text (it starts with a UTF-16 byte-order mark): save it as UTF-8"},
      {"\xFE\xFF\0m\0o\0d\0e\0l"s, "job.yaml: is UTF-16 text"},
      {"\xFF\xFE\0\0m\0\0\0"s, "job.yaml: is UTF-32 text"},
      {"m\0o\0d\0e\0l\0:\0 \0c\0n\0n\0"s,
       "job.yaml: line 1 holds a NUL byte: not a text file, or UTF-16/UTF-32 text without a "
       "byte-order mark: save it as UTF-8"},
      {"model: cnn\n---\nmodel: mlp\n",
       "job.yaml:2:1: a second YAML document (after '---'): a job file holds one"},
      {"model: cnn\n...\n---\n", "a second YAML document"},
      {"model: cnn\n# " + std::string(kMaxSpecFileBytes, 'x') + "\n",
       "job.yaml: too large (4194318 bytes; a job file holds at most 4194304)"},
  };
  for (const Case& c : cases) {
    Status st = Parse(c.text);
    EXPECT_EQ(st.code(), StatusCode::kInvalidArgument) << c.expected;
    EXPECT_NE(st.message().find(c.expected), std::string::npos)
        << "expected: " << c.expected << "\nmessage: " << st.message().substr(0, 300);
  }
  // One document, with or without markers; a UTF-8 byte-order mark is fine.
  EXPECT_TRUE(Parse("---\nmodel: cnn\n...\n").ok());
  EXPECT_TRUE(Parse("\xEF\xBB\xBFmodel: cnn\n").ok());
  EXPECT_TRUE(Parse("model: caf\xC3\xA9\n").ok());
}

TEST(SpecReaderTest, OnlyRegularFilesAreRead) {
  auto dir = SpecReader::FromFile("/tmp");
  ASSERT_FALSE(dir.ok());
  EXPECT_EQ(dir.status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(dir.status().message(), "/tmp: is a directory, expected a regular file");
  auto zero = SpecReader::FromFile("/dev/zero");
  EXPECT_EQ(zero.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(zero.status().message().find("/dev/zero: is a character device"), std::string::npos);
}

// Every input the fuzzers found to hang or crash the reader is refused with
// a message, in finite time.
TEST(SpecReaderTest, FuzzRegressionsAreRefused) {
  const std::filesystem::path dir =
      std::filesystem::path(SPOT_SOURCE_DIR) / "fuzz" / "regressions" / "spec_reader";
  int n = 0;
  for (const auto& e : std::filesystem::directory_iterator(dir)) {
    auto text = ReadFile(e.path().string());
    ASSERT_TRUE(text.ok()) << text.status().ToString();
    auto r = SpecReader::FromString(*text, "job.yaml");
    EXPECT_FALSE(r.ok()) << e.path().filename();
    if (!r.ok()) {
      EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
      EXPECT_EQ(r.status().message().rfind("job.yaml", 0), 0u) << r.status().message();
    }
    ++n;
  }
  EXPECT_GE(n, 3);
}

}  // namespace
}  // namespace spot
