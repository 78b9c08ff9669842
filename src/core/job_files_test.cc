#include "core/job_files.h"

#include <gtest/gtest.h>

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
