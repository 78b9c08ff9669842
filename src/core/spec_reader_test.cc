#include "core/spec_reader.h"

#include <gtest/gtest.h>

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
    EXPECT_NE(st.message().find(c.expected), std::string::npos)
        << "yaml:\n" << c.yaml << "message:\n" << st.message();
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

}  // namespace
}  // namespace spot
