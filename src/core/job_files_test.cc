#include "core/job_files.h"

#include <gtest/gtest.h>

#include <fstream>

#include "core/temp_dir.h"

namespace spot {
namespace {

TEST(JobFiles, OneDirectoryLayout) {
  JobFiles f{.dir = "runs/job"};
  EXPECT_EQ(f.progress(), "runs/job/progress.json");
  EXPECT_EQ(f.step_log(), "runs/job/steps.csv");
  EXPECT_EQ(f.summary(), "runs/job/summary.json");
  EXPECT_EQ(f.tensorboard(), "runs/job/tensorboard");
  EXPECT_EQ(f.instances(), "runs/job/instances");
  EXPECT_EQ(f.decisions(), "runs/job/decisions.jsonl");
  EXPECT_EQ(f.worker_job(), "runs/job/train.yaml");
  EXPECT_EQ(StateDbPath(f.state_dir()), "runs/job/controller/state.db");
}

TEST(ProgressReport, RoundTripsAndKeepsDefaults) {
  ProgressReport r{.job = "j",
                   .step = 12,
                   .total_steps = 100,
                   .epoch = 1,
                   .loss = 0.25,
                   .test_accuracy = 0.9,
                   .world = 2,
                   .generation = 3,
                   .restored_step = 10,
                   .done = true};
  auto back = ParseProgressReport(ProgressReportJson(r));
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_EQ(back->job, "j");
  EXPECT_EQ(back->step, 12);
  EXPECT_EQ(back->total_steps, 100);
  EXPECT_EQ(back->loss, 0.25);
  EXPECT_EQ(back->world, 2);
  EXPECT_EQ(back->restored_step, 10);
  EXPECT_TRUE(back->done);
  EXPECT_EQ(back->fraction, -1);  // not written when unknown
  r.fraction = 0.5;
  EXPECT_EQ(ParseProgressReport(ProgressReportJson(r))->fraction, 0.5);
  EXPECT_TRUE(back->stragglers.empty());
  r.stragglers = {"i-0a", "i-0b"};
  EXPECT_EQ(ParseProgressReport(ProgressReportJson(r))->stragglers, r.stragglers);
  EXPECT_FALSE(ParseProgressReport(R"({"stragglers": "i-0a"})").ok());
  EXPECT_FALSE(ParseProgressReport(R"({"stragglers": [3]})").ok());
  auto sparse = ParseProgressReport(R"({"step": 3})");
  ASSERT_TRUE(sparse.ok());
  EXPECT_EQ(sparse->step, 3);
  EXPECT_EQ(sparse->test_accuracy, -1);
}

TEST(ProgressReport, BadReportsNameTheField) {
  EXPECT_EQ(ParseProgressReport("not json").status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(ParseProgressReport("[1]").status().code(), StatusCode::kInvalidArgument);
  auto wrong = ParseProgressReport(R"({"step": "five"})");
  ASSERT_FALSE(wrong.ok());
  EXPECT_NE(wrong.status().message().find("'step'"), std::string::npos);
  EXPECT_FALSE(ParseProgressReport(R"({"step": 1.5})").ok());  // a step is whole
  EXPECT_FALSE(ParseProgressReport(R"({"done": 1})").ok());
}

}  // namespace
}  // namespace spot

namespace spot {
namespace {

TEST(StepLog, LinesRoundTripAndTornLinesAreSkipped) {
  const StepLogRow r{.step = 12, .epoch = 1, .loss = 0.123456789f, .lr = 1e-3};
  const std::string line = StepLogLine(r);
  EXPECT_EQ(line, "12,1,0.123456791,0.001\n");  // the float's value, 9 digits
  auto back = ParseStepLogLine(line.substr(0, line.size() - 1));
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_EQ(back->step, 12);
  EXPECT_EQ(static_cast<float>(back->loss), 0.123456789f);  // exact for a float
  EXPECT_TRUE(ParseStepLogLine("3,0,nan,0.1").ok());        // a diverged step is a step
  EXPECT_FALSE(ParseStepLogLine("3,0,0.5").ok());
  EXPECT_FALSE(ParseStepLogLine("3,0,0.5,0.1,9").ok());
  EXPECT_FALSE(ParseStepLogLine("x,0,0.5,0.1").ok());
  auto dir = TempDir::Create("step_log_test");
  ASSERT_TRUE(dir.ok());
  const std::string path = (dir->path() / "steps.csv").string();
  std::ofstream(path) << StepLogLine({1, 0, 2.5, 0.1}) << StepLogLine({2, 0, 2.25, 0.1})
                      << "3,0,2.";
  std::vector<StepLogRow> rows = ReadStepLog(path);
  ASSERT_EQ(rows.size(), 2u);
  EXPECT_EQ(rows[1].loss, 2.25);
  EXPECT_TRUE(ReadStepLog(path + ".missing").empty());
}

}  // namespace
}  // namespace spot
