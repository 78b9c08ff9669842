// The controller's HTTP API against its contract, docs/openapi.yaml.
//
// schemathesis (PyPI; in the project's .venv, made by
// scripts/install-python-peers.sh, which `make deps` runs) generates requests
// from the description (its examples, the edge cases of each parameter, then
// random ones, positive and negative) and sends them to a live ApiServer on
// loopback that serves what a controller serves: a job store with a running
// and an ended job, a JobMonitor's metrics, scrape targets (one worker with a
// real /metrics endpoint) and dashboard data, the dashboard page, and cancel
// wired as `spot run` wires it. Every answer is checked: no server error, a
// documented status code and content type, a body that matches its schema.
// Once with the API token, once without.
//
// Skips (saying why) only when the environment could not be made because
// PyPI was unreachable; a missing schemathesis is otherwise a failure.
#include <gtest/gtest.h>
#include <prometheus/counter.h>
#include <prometheus/registry.h>

#include <filesystem>
#include <fstream>
#include <mutex>
#include <nlohmann/json.hpp>
#include <sstream>

#include "control/api_server.h"
#include "control/job_monitor.h"
#include "control/worker_report.h"
#include "core/clock.h"
#include "core/process.h"
#include "core/temp_dir.h"
#include "monitor/dashboard.h"
#include "monitor/metrics.h"
#include "monitor/metrics_server.h"

namespace spot::control {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

constexpr char kRunning[] = "fashion-mnist-spot";  // the spec's examples of a job id
constexpr char kEnded[] = "finished-job";
constexpr double kEpoch = 1'700'000'000;
constexpr double kGap = 60;
// Test cases per operation and phase; deterministic generation makes every
// run the same.
constexpr char kMaxExamples[] = "100";
constexpr double kRunTimeoutS = 240;
// The operations (path and method) docs/openapi.yaml describes.
constexpr int kOperations = 13;

std::string ReadFile(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

fs::path VenvDir() {
  const char* env = std::getenv("SPOT_VENV");
  return env != nullptr && *env != '\0' ? fs::path(env) : fs::path(SPOT_SOURCE_DIR) / ".venv";
}

market::Trace Zone(const std::string& name, double price) {
  market::Trace t;
  t.pool = {.cloud = "aws", .region = "us-east-1", .zone = name, .instance_type = "p3.2xlarge"};
  t.name = name;
  t.gap_seconds = kGap;
  t.available.assign(100, 4);
  t.available[3] = 0;
  t.price.assign(t.available.size(), price);
  return t;
}

class ApiContractTest : public ::testing::Test {
 protected:
  void SetUp() override {
    schemathesis_ = VenvDir() / "bin" / "schemathesis";
    if (!fs::exists(schemathesis_)) {
      const fs::path unavailable = VenvDir() / "peers-unavailable";
      if (fs::exists(unavailable)) {
        GTEST_SKIP() << "SKIPPED: schemathesis is not installed because PyPI was unreachable "
                        "when the Python environment was made:\n"
                     << ReadFile(unavailable);
      }
      FAIL() << schemathesis_
             << " does not exist: run `make deps` (scripts/install-python-peers.sh) to make the "
                "project's Python environment";
    }
    auto dir = TempDir::Create("spot_api_contract");
    ASSERT_TRUE(dir.ok()) << dir.status().ToString();
    dir_.emplace(std::move(dir).value());
    auto store = JobStore::Open((dir_->path() / "state.db").string());
    ASSERT_TRUE(store.ok()) << store.status().ToString();
    store_ = std::move(store).value();
    zones_ = {Zone("us-east-1a", 0.9), Zone("us-east-1b", 1.2)};
    ASSERT_NO_FATAL_FAILURE(Populate());
    StartMonitor();
    ASSERT_NO_FATAL_FAILURE(StartApi());
  }

  void TearDown() override {
    api_.reset();
    monitor_.reset();
    worker_metrics_.reset();
  }

  // A running job with live and ended instances, bills, events, decisions and
  // progress; an ended one with nothing else.
  void Populate() {
    ASSERT_TRUE(store_
                    ->CreateJob({.id = kRunning,
                                 .spec_path = "/jobs/fashion-mnist-spot.yaml",
                                 .spec_hash = "abcd",
                                 .state = JobState::kRunning,
                                 .message = "running on spot",
                                 .wall_epoch_unix_s = kEpoch,
                                 .time_compression = 60,
                                 .start_tick = 0})
                    .ok());
    ASSERT_TRUE(store_
                    ->CreateJob({.id = kEnded,
                                 .spec_path = "/jobs/finished.yaml",
                                 .spec_hash = "ef01",
                                 .state = JobState::kSucceeded,
                                 .message = "finished",
                                 .wall_epoch_unix_s = kEpoch})
                    .ok());
    InstanceRecord gone{.id = "i-0000000000000000a",
                        .job_id = kRunning,
                        .zone = 1,
                        .zone_name = "us-east-1b",
                        .instance_type = "p3.2xlarge",
                        .spot = true,
                        .provider_data = R"({"pid":111,"metadata_port":9001})"};
    InstanceRecord live{.id = "i-0000000000000000b",
                        .job_id = kRunning,
                        .zone = 0,
                        .zone_name = "us-east-1a",
                        .instance_type = "p3.2xlarge",
                        .spot = true,
                        .provider_data = "not json",
                        .launched_s = 240,
                        .billed_until_s = 240};
    ASSERT_TRUE(store_->PutInstance(gone).ok());
    ASSERT_TRUE(store_->PutInstance(live).ok());
    std::vector<LedgerEntry> rows = {{gone.id, 0, 60, 1.2, 0}, {gone.id, 60, 120, 1.2, 0}};
    ASSERT_TRUE(store_->Bill(gone.id, rows).ok());
    ASSERT_TRUE(store_->EndInstance(gone.id, 180, "preempted").ok());
    rows = {{live.id, 240, 300, 0.9, 0}};
    ASSERT_TRUE(store_->Bill(live.id, rows).ok());
    for (int i = 0; i < 60; ++i) {
      EventRecord e{i * 10.0, kEpoch + i, i % 3 ? "tick" : "launch", i % 2 ? gone.id : "",
                    "event " + std::to_string(i)};
      ASSERT_TRUE(store_->AppendEvent(kRunning, e).ok());
    }
    ASSERT_TRUE(store_->AppendDecision(kRunning, {0, 0, 0, "idle", 0, false, "spot:1"}).ok());
    ASSERT_TRUE(store_->AppendDecision(kRunning, {3, 3, 0.05, "spot:1", 0, true, "spot:0"}).ok());
    ASSERT_TRUE(store_->PutValue(kRunning, "progress", R"({"step":120,"loss":1.5})").ok());
    // The live worker's /metrics endpoint, which the monitor lists and scrapes.
    auto registry = std::make_shared<prometheus::Registry>();
    monitor::AddCounter(*registry, "spot_train_compute_seconds_total", "busy").Add({}).Increment(3);
    auto server = monitor::MetricsServer::Start(registry, {});
    ASSERT_TRUE(server.ok()) << server.status().ToString();
    worker_metrics_ = std::move(server).value();
    ASSERT_TRUE(
        store_->PutValue(kRunning, MetricsPortKey(live.id), std::to_string(worker_metrics_->port()))
            .ok());
  }

  void StartMonitor() {
    RunSpec spec;
    spec.name = kRunning;
    spec.compute_hours = 1;
    spec.deadline_hours = 3;
    spec.resources.nodes = 1;
    spec.resources.ondemand_price = 3.06;
    monitor_ = std::make_unique<JobMonitor>(
        JobMonitorOptions{.spec = spec,
                          .store = store_.get(),
                          .zones = {&zones_[0], &zones_[1]},
                          .job_dir = dir_->path().string(),
                          .progress_path = (dir_->path() / "progress.json").string(),
                          .epochs = 2,
                          .clock = &clock_});
    Status s = monitor_->Refresh();
    ASSERT_TRUE(s.ok()) << s.ToString();
  }

  // The pages, cancel and reports as JobRunner wires them for `spot run`.
  void StartApi() {
    JobMonitor* m = monitor_.get();
    ApiPages pages{
        .metrics = [m] { return m->MetricsText(); },
        .targets = [m] { return m->TargetsJson(); },
        .dashboard_data = [m](const std::string&) { return m->DashboardJson(true); },
        .dashboard_html =
            [](const std::string& id) {
              return monitor::DashboardHtml(
                  {.title = id + " · SpotTrain", .data_url = "/api/v1/jobs/" + id + "/dashboard"});
            }};
    reports_ = std::make_unique<ReportSink>(kRunning, JobFiles{dir_->path().string()}, &clock_);
    ReportSink* r = reports_.get();
    auto api = ApiServer::Start(
        store_.get(),
        {.token_path = (dir_->path() / "api.token").string(),
         .pages = std::move(pages),
         .report =
             [r](const std::string& id, const std::string& body) {
               if (id != kRunning)
                 return NotFoundError(std::string("this controller runs job ") + kRunning);
               return r->Take(body);
             }},
        [this](const std::string& id) {
          if (id != kRunning)
            return NotFoundError(std::string("this controller runs job ") + kRunning);
          std::lock_guard<std::mutex> l(mu_);
          ++cancels_;
          return Status::Ok();
        });
    ASSERT_TRUE(api.ok()) << api.status().ToString();
    api_ = std::move(api).value();
  }

  // Runs schemathesis on the spec against the server; its JSON report.
  json Schemathesis(const std::string& name, std::vector<std::string> extra) {
    const fs::path log = dir_->path() / (name + ".log");
    const fs::path report = dir_->path() / (name + ".json");
    // In a directory of its own: schemathesis keeps a cache of the failures
    // it found (and replays them) and Hypothesis its data in the working
    // directory, which would make one run depend on the last.
    const fs::path work = dir_->path() / name;
    fs::create_directories(work);
    std::vector<std::string> argv = {
        "/usr/bin/env",
        "-C",
        work.string(),
        schemathesis_.string(),
        "run",
        (fs::path(SPOT_SOURCE_DIR) / "docs" / "openapi.yaml").string(),
        "--url",
        api_->url(),
        "--checks",
        "not_a_server_error,status_code_conformance,content_type_conformance,"
        "response_schema_conformance",
        "--phases",
        "examples,coverage,fuzzing",
        "--max-examples",
        kMaxExamples,
        "--generation-deterministic",
        "--workers",
        "1",
        "--max-redirects",
        "0",
        "--request-timeout",
        "30",
        "--continue-on-failure",
        "--no-color",
        "--report",
        "json",
        "--report-json-path",
        report.string()};
    argv.insert(argv.end(), extra.begin(), extra.end());
    auto pid = Spawn({.argv = argv,
                      .log_path = log.string(),
                      .truncate = true,
                      .group = ProcessGroup::kNewGroup});
    EXPECT_TRUE(pid.ok()) << pid.status().ToString();
    if (!pid.ok()) return json();
    auto ended = WaitProcess(*pid, kRunTimeoutS);
    if (!ended.ok()) {
      (void)StopProcess(*pid, 1, /*whole_group=*/true);
      ADD_FAILURE() << "schemathesis did not finish in " << kRunTimeoutS << " s:\n"
                    << ReadFile(log);
      return json();
    }
    const std::string output = ReadFile(log);
    EXPECT_EQ(ended->exit_code, 0) << "schemathesis " << DescribeExit(*ended) << ":\n" << output;
    json parsed = json::parse(ReadFile(report), nullptr, /*allow_exceptions=*/false);
    EXPECT_FALSE(parsed.is_discarded()) << report << " is not JSON:\n" << output;
    if (parsed.is_discarded()) return json();
    // Every operation of the spec was tested, none failed, none errored.
    EXPECT_EQ(parsed["complete"], true) << output;
    EXPECT_EQ(parsed["operations"]["total"], kOperations) << output;
    EXPECT_EQ(parsed["operations"]["tested"], kOperations) << output;
    EXPECT_EQ(parsed["failures"], json::array()) << output;
    EXPECT_EQ(parsed["errors"], json::array()) << output;
    std::cout << "schemathesis, " << name << ": " << parsed["operations"]["tested"]
              << " operations, " << parsed["test_cases"]["generated"] << " test cases, "
              << parsed["test_cases"]["with_failures"] << " with failures\n";
    return parsed;
  }

  fs::path schemathesis_;
  std::optional<TempDir> dir_;
  std::unique_ptr<JobStore> store_;
  std::vector<market::Trace> zones_;
  ManualClock clock_{kEpoch + 300 / 60.0};
  std::unique_ptr<monitor::MetricsServer> worker_metrics_;
  std::unique_ptr<JobMonitor> monitor_;
  std::unique_ptr<ReportSink> reports_;
  std::unique_ptr<ApiServer> api_;
  std::mutex mu_;
  int cancels_ = 0;  // GUARDED_BY(mu_)
};

TEST_F(ApiContractTest, EveryOperationConformsWithTheToken) {
  json report = Schemathesis("with-token", {"--header", "Authorization: Bearer " + api_->token()});
  ASSERT_FALSE(report.is_null());
  std::lock_guard<std::mutex> l(mu_);
  EXPECT_GT(cancels_, 0) << "no authorized cancel reached the controller";
}

// Without the token schemathesis makes up Authorization headers of its own
// (none, other schemes, wrong bearer tokens): 401 and 403, never a cancel.
TEST_F(ApiContractTest, EveryOperationConformsWithoutTheToken) {
  json report = Schemathesis("without-token", {});
  ASSERT_FALSE(report.is_null());
  std::lock_guard<std::mutex> l(mu_);
  EXPECT_EQ(cancels_, 0) << "a cancel without the token reached the controller";
}

}  // namespace
}  // namespace spot::control
