// A command workload's reports: what the API takes, and the progress, step
// log and record it keeps.
#include "control/worker_report.h"

#include <fmt/format.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>

#include "core/file_io.h"

namespace spot::control {
namespace {

namespace fs = std::filesystem;

TEST(WorkerReportTest, ParsesEveryField) {
  auto r = ParseWorkerReport(
      R"({"instance":"i-1","rank":0,"step":12,"total_steps":300,"epoch":1,"loss":0.5,)"
      R"("samples":64,"metrics":{"test_accuracy":0.8,"lr":0.01},"done":false})");
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->instance, "i-1");
  EXPECT_EQ(r->step, 12);
  EXPECT_EQ(*r->total_steps, 300);
  EXPECT_EQ(*r->epoch, 1);
  EXPECT_DOUBLE_EQ(*r->loss, 0.5);
  EXPECT_EQ(*r->samples, 64);
  EXPECT_DOUBLE_EQ(r->metrics.at("lr"), 0.01);
  EXPECT_FALSE(r->done);
  auto minimal = ParseWorkerReport(R"({"step":0})");
  ASSERT_TRUE(minimal.ok());
  EXPECT_FALSE(minimal->loss.has_value());
}

TEST(WorkerReportTest, RefusesWhatIsNotAReportNamingTheField) {
  const struct {
    std::string body, message;
  } bad[] = {
      {"", "report"},
      {"[1]", "expected a JSON object"},
      {R"({"loss":1})", "step: required field is missing"},
      {R"({"step":-1})", "step: expected an integer >= 0"},
      {R"({"step":1.5})", "step: expected an integer"},
      {R"({"step":"3"})", "step: expected an integer"},
      {R"({"step":18446744073709551615})", "step: expected an integer >= 0 and < 2^63"},
      {R"({"step":1,"loss":"x"})", "loss: expected a number"},
      {R"({"step":1,"done":1})", "done: expected true or false"},
      {R"({"step":1,"metrics":[1]})", "metrics: expected an object of numbers"},
      {R"({"step":1,"metrics":{"a":"b"}})", "metrics.a: expected a number"},
      {R"({"step":1,"stpe":2})", "stpe: unknown field"},
      {R"({"step":1,"step":2})", "report"},  // duplicate keys: strict JSON
  };
  for (const auto& b : bad) {
    auto r = ParseWorkerReport(b.body);
    ASSERT_FALSE(r.ok()) << b.body;
    EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument) << b.body;
    EXPECT_NE(r.status().message().find(b.message), std::string::npos)
        << b.body << ": " << r.status().message();
  }
}

TEST(WorkerReportTest, KeepsProgressStepLogAndRecordsAcrossARestart) {
  const fs::path dir = fs::temp_directory_path() / fmt::format("spot_report_{}", ::getpid());
  fs::remove_all(dir);
  fs::create_directories(dir);
  const JobFiles files{dir.string()};
  {
    ReportSink sink("job", files, nullptr);
    EXPECT_EQ(sink.last_report_unix_s(), 0);
    ASSERT_TRUE(sink.Take(R"({"step":1,"total_steps":4,"loss":2.5})").ok());
    ASSERT_TRUE(sink.Take(R"({"step":2,"loss":2.0,"metrics":{"test_accuracy":0.5}})").ok());
    EXPECT_GT(sink.last_report_unix_s(), 0);
    EXPECT_FALSE(sink.Take(R"({"step":3,"loss":"nan"})").ok());  // refused, nothing kept
  }
  auto progress = ParseProgressReport(*ReadFile(files.progress()));
  ASSERT_TRUE(progress.ok());
  EXPECT_EQ(progress->job, "job");
  EXPECT_EQ(progress->step, 2);
  EXPECT_EQ(progress->total_steps, 4);
  EXPECT_DOUBLE_EQ(progress->test_accuracy, 0.5);
  EXPECT_FALSE(progress->done);
  {
    // A restarted controller goes on; a resumed program redoes step 2.
    ReportSink sink("job", files, nullptr);
    ASSERT_TRUE(sink.Take(R"({"step":2,"loss":2.0})").ok());  // the last logged: not again
    ASSERT_TRUE(sink.Take(R"({"step":3,"loss":1.5})").ok());
    ASSERT_TRUE(sink.Take(R"({"step":2,"loss":2.0})").ok());  // resumed from step 1: redone
    ASSERT_TRUE(sink.Take(R"({"step":4,"loss":1.0,"done":true})").ok());
  }
  std::vector<StepLogRow> rows = ReadStepLog(files.step_log());
  std::vector<int64_t> steps;
  for (const StepLogRow& r : rows) steps.push_back(r.step);
  EXPECT_EQ(steps, (std::vector<int64_t>{1, 2, 3, 2, 4}));
  progress = ParseProgressReport(*ReadFile(files.progress()));
  EXPECT_EQ(progress->step, 4);
  EXPECT_EQ(progress->total_steps, 4);  // kept from the first controller's reports
  EXPECT_TRUE(progress->done);
  auto records = ReadFile((dir / "reports.jsonl").string());
  ASSERT_TRUE(records.ok());
  EXPECT_EQ(std::count(records->begin(), records->end(), '\n'), 6);
  fs::remove_all(dir);
}

// A program that never reports: its progress is the step of the newest
// checkpoint the Python client's manifests name, damaged ones skipped.
TEST(WorkerReportTest, NewestManifestStepReadsTheClientsManifests) {
  const fs::path dir = fs::temp_directory_path() / fmt::format("spot_manifests_{}", ::getpid());
  fs::remove_all(dir);
  EXPECT_FALSE(NewestManifestStep(dir.string()).has_value());  // no directory
  fs::create_directories(dir);
  EXPECT_FALSE(NewestManifestStep(dir.string()).has_value());
  auto manifest = [&](int64_t step, const std::string& body) {
    std::ofstream(dir / fmt::format("ckpt-{:012d}.json", step)) << body;
  };
  manifest(100, R"({"format":"spottrain-ckpt-1","step":100,"file":"ckpt-000000000100.pt"})");
  manifest(200, R"({"format":"spottrain-ckpt-1","step":200})");
  manifest(300, R"({"format":"spottrain-ckpt-1","step":30})");  // its name says 300: not it
  manifest(400, R"({"format":"spottrain-ckpt-1","step":4)");    // torn
  manifest(500, R"({"format":"other","step":500})");
  std::ofstream(dir / "ckpt-000000000600.pt") << "payload without a manifest";
  EXPECT_EQ(NewestManifestStep(dir.string()), 200);
  fs::remove_all(dir);
}

}  // namespace
}  // namespace spot::control
