#include "monitor/chrome_trace.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <nlohmann/json.hpp>
#include <set>

#include "core/file_io.h"
#include "core/temp_dir.h"

namespace spot::monitor {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;
using Steady = std::chrono::steady_clock;

TEST(ChromeTraceTest, WorkersTracesMergeIntoOneDocumentWithPhaseShares) {
  auto dir = TempDir::Create("trace");
  ASSERT_TRUE(dir.ok());
  const std::string run = dir->path();
  const Steady::time_point t0 = Steady::now();
  {
    auto a = TraceLog::Open(TracePathFor(run, "i-0a/rank 0"));
    ASSERT_TRUE(a.ok()) << a.status().message();
    auto b = TraceLog::Open(TracePathFor(run, "i-0b"));
    ASSERT_TRUE(b.ok());
    for (int step = 1; step <= 20; ++step) {
      Steady::time_point at = t0 + std::chrono::milliseconds(10 * step);
      (*a)->Complete("data", TraceLane::kStep, at, 0.001, step);
      (*a)->Complete("forward", TraceLane::kStep, at + std::chrono::milliseconds(1), 0.003, step);
      (*a)->Complete("backward", TraceLane::kStep, at + std::chrono::milliseconds(4), 0.006, step);
      (*b)->Complete("forward", TraceLane::kStep, at, 0.002, step);
    }
    (*a)->Complete("save", TraceLane::kCheckpoint, t0, 0.05, 20);
    EXPECT_EQ((*a)->events(), 61);
  }
  std::vector<std::string> files = TraceFilesOf(run);
  ASSERT_EQ(files.size(), 2u);
  EXPECT_TRUE(files[0].ends_with("/profile/i-0a_rank_0.trace.jsonl")) << files[0];
  // A worker killed mid-line: its last line is cut short, and skipped.
  {
    auto text = ReadFile(files[1]);
    ASSERT_TRUE(text.ok());
    ASSERT_TRUE(WriteFileAtomically(files[1], *text + "{\"name\":\"forw").ok());
  }
  ProfileSummary sum;
  auto doc = MergeTraceFiles(files, &sum);
  ASSERT_TRUE(doc.ok()) << doc.status().message();
  EXPECT_EQ(sum.events, 81);
  EXPECT_EQ(sum.skipped_lines, 1);
  json j = json::parse(*doc);
  ASSERT_TRUE(j["traceEvents"].is_array());
  std::set<std::string> processes;
  int64_t complete = 0, earliest = INT64_MAX;
  for (const json& e : j["traceEvents"]) {
    if (e["ph"] == "M" && e["name"] == "process_name") processes.insert(e["args"]["name"]);
    if (e["ph"] == "X") {
      ++complete;
      earliest = std::min(earliest, e["ts"].get<int64_t>());
      EXPECT_GE(e["pid"].get<int>(), 1);
    }
  }
  EXPECT_EQ(complete, 81);
  EXPECT_EQ(processes, (std::set<std::string>{"i-0a_rank_0", "i-0b"}));
  // Unix microseconds: the events are of today, not of the steady clock's epoch.
  EXPECT_GT(earliest, int64_t{1'600'000'000} * 1'000'000);
  // Worker a: 1 + 3 + 6 ms per step: shares 0.1, 0.3, 0.6; the save in its own lane.
  ASSERT_EQ(sum.rows.size(), 5u);
  EXPECT_EQ(sum.rows[0].phase, "data");
  EXPECT_EQ(sum.rows[0].count, 20);
  EXPECT_NEAR(sum.rows[0].share, 0.1, 1e-9);
  EXPECT_NEAR(sum.rows[1].share, 0.3, 1e-9);
  EXPECT_NEAR(sum.rows[2].mean_ms, 6, 1e-9);
  EXPECT_NEAR(sum.rows[2].p95_ms, 6, 1e-9);
  EXPECT_EQ(sum.rows[3].lane, "checkpoint");
  EXPECT_EQ(sum.rows[3].share, 0);
  EXPECT_EQ(sum.rows[4].process, "i-0b");
  EXPECT_NEAR(sum.rows[4].share, 1.0, 1e-9);
}

TEST(ChromeTraceTest, ADamagedLineIsAnErrorNamingFileAndLine) {
  auto dir = TempDir::Create("trace");
  ASSERT_TRUE(dir.ok());
  const std::string path = TracePathFor(dir->path(), "w");
  ASSERT_TRUE(CreateDirectories(fs::path(path).parent_path().string()).ok());
  ASSERT_TRUE(WriteFileAtomically(path,
                                  "{\"name\":\"data\",\"ph\":\"X\",\"ts\":1,\"dur\":2,\"tid\":0}\n"
                                  "{\"name\":\"data\",\"ph\":\"X\",\"ts\":1,\"dur\":-2,\"tid\":0}\n"
                                  "{\"name\":\"data\",\"ph\":\"X\",\"ts\":5,\"dur\":2,\"tid\":0}\n")
                  .ok());
  auto doc = MergeTraceFiles({path}, nullptr);
  ASSERT_FALSE(doc.ok());
  EXPECT_EQ(doc.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(doc.status().message().find(path + ":2:"), std::string::npos) << doc.status().message();
}

TEST(ChromeTraceTest, PastItsBudgetALogKeepsEveryHundredthStep) {
  auto dir = TempDir::Create("trace");
  ASSERT_TRUE(dir.ok());
  auto log = TraceLog::Open(TracePathFor(dir->path(), "w"), /*max_events=*/10);
  ASSERT_TRUE(log.ok());
  for (int step = 1; step <= 1000; ++step) {
    (*log)->Complete("forward", TraceLane::kStep, Steady::now(), 0.001, step);
  }
  EXPECT_EQ((*log)->events(), 10 + 10);  // steps 1-10, then 100, 200, ..., 1000
}

}  // namespace
}  // namespace spot::monitor
