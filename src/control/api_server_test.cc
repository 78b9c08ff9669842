#include "control/api_server.h"

#include <gtest/gtest.h>
#include <httplib.h>
#include <sys/stat.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <nlohmann/json.hpp>
#include <thread>
#include <vector>

#include "core/temp_dir.h"
#include "monitor/bad_clients_testing.h"

namespace spot::control {
namespace {

using json = nlohmann::json;

class ApiServerTest : public ::testing::Test {
 protected:
  // One store for the suite (filling it costs one fsync per commit); no test
  // changes it.
  static void SetUpTestSuite() {
    auto dir = TempDir::Create("spot_api_server_db");
    ASSERT_TRUE(dir.ok()) << dir.status().ToString();
    db_dir_ = new TempDir(std::move(dir).value());
    auto store = JobStore::Open((db_dir_->path() / "jobs.db").string());
    ASSERT_TRUE(store.ok()) << store.status().ToString();
    store_ = store->release();
    Populate();
  }
  static void TearDownTestSuite() {
    delete store_;
    store_ = nullptr;
    delete db_dir_;
    db_dir_ = nullptr;
  }

  void SetUp() override {
    ASSERT_NE(store_, nullptr);
    auto dir = TempDir::Create("spot_api_server_test");
    ASSERT_TRUE(dir.ok()) << dir.status().ToString();
    dir_.emplace(std::move(dir).value());
    token_path_ = (dir_->path() / "api.token").string();
    StartServer();
  }

  static void Populate() {
    JobRecord train{"train",
                    "/specs/train.yaml",
                    "abcd",
                    JobState::kRunning,
                    "running on spot",
                    1.7e9,
                    60,
                    500,
                    0,
                    0};
    JobRecord done{
        "done", "/specs/done.yaml", "ef01", JobState::kSucceeded, "finished", 1.7e9, 1, 0, 0, 0};
    ASSERT_TRUE(store_->CreateJob(train).ok());
    ASSERT_TRUE(store_->CreateJob(done).ok());
    InstanceRecord a{"i-0000000000000000a",
                     "train",
                     0,
                     "us-east-1a",
                     "p3.2xlarge",
                     true,
                     R"({"pid":111,"metadata_port":9001})",
                     0,
                     std::nullopt,
                     "",
                     0};
    InstanceRecord b{"i-0000000000000000b",
                     "train",
                     -1,
                     "",
                     "p3.2xlarge",
                     false,
                     R"({"pid":222,"metadata_port":9002})",
                     3600,
                     std::nullopt,
                     "",
                     0};
    ASSERT_TRUE(store_->PutInstance(a).ok());
    ASSERT_TRUE(store_->PutInstance(b).ok());
    std::vector<LedgerEntry> rows = {{a.id, 0, 3600, 0.9, 0}};
    ASSERT_TRUE(store_->Bill(a.id, rows).ok());
    ASSERT_TRUE(store_->EndInstance(a.id, 3600, "preempted").ok());
    rows = {{b.id, 3600, 5400, 3.06, 0}};
    ASSERT_TRUE(store_->Bill(b.id, rows).ok());
    for (int i = 0; i < 60; ++i) {
      EventRecord e{i * 10.0, 1.7e9 + i, "tick", i % 2 ? a.id : "", "event " + std::to_string(i)};
      ASSERT_TRUE(store_->AppendEvent("train", e).ok());
    }
    ASSERT_TRUE(store_->AppendDecision("train", {0, 500, 0, "idle", 0, false, "spot:0"}).ok());
    ASSERT_TRUE(store_->AppendDecision("train", {1, 501, 0.2, "spot:0", 0, true, "od"}).ok());
    ASSERT_TRUE(store_->PutValue("train", "progress", R"({"step":120,"loss":1.5})").ok());
  }

  void StartServer(ApiPages pages = {}) {
    server_.reset();
    ApiOptions options;
    options.token_path = token_path_;
    options.pages = std::move(pages);
    auto server = ApiServer::Start(store_, options, [this](const std::string& id) {
      std::lock_guard<std::mutex> l(mu_);
      cancelled_.push_back(id);
      return cancel_result_;
    });
    ASSERT_TRUE(server.ok()) << server.status().ToString();
    server_ = std::move(server).value();
    client_.emplace(server_->url());
    client_->set_connection_timeout(std::chrono::seconds(5));
    client_->set_read_timeout(std::chrono::seconds(5));
  }

  httplib::Result Cancel(const std::string& job, const std::string& auth) {
    httplib::Headers headers;
    if (!auth.empty()) headers.emplace("Authorization", auth);
    return client_->Post(("/api/v1/jobs/" + job + "/cancel").c_str(), headers, "", "text/plain");
  }

  json Body(const httplib::Result& r) {
    EXPECT_EQ(r->get_header_value("Content-Type"), "application/json");
    return json::parse(r->body);
  }

  std::vector<std::string> Cancelled() {
    std::lock_guard<std::mutex> l(mu_);
    return cancelled_;
  }

  static inline TempDir* db_dir_ = nullptr;
  static inline JobStore* store_ = nullptr;
  std::optional<TempDir> dir_;
  std::string token_path_;
  std::unique_ptr<ApiServer> server_;
  std::optional<httplib::Client> client_;
  std::mutex mu_;
  std::vector<std::string> cancelled_;  // GUARDED_BY(mu_)
  Status cancel_result_;
};

TEST_F(ApiServerTest, Healthz) {
  EXPECT_EQ(server_->url(), "http://127.0.0.1:" + std::to_string(server_->port()));
  auto r = client_->Get("/api/v1/healthz");
  ASSERT_TRUE(r) << httplib::to_string(r.error());
  EXPECT_EQ(r->status, 200);
  EXPECT_EQ(Body(r), json({{"ok", true}}));
}

// Issue 20: ten slow-loris clients (a header byte a second, never done) took
// every server thread and healthz timed out for 30 s; 200 idle sockets did
// the same for 12-20 s. Now healthz answers at once (the client gives it 5 s
// to), and the slow clients are closed (at the request timeout, 5 s, or
// sooner to make room for the crowd).
TEST_F(ApiServerTest, HealthzAnswersWhileSlowAndIdleClientsHoldConnections) {
  auto healthz = [&](const char* when) {
    for (int i = 0; i < 3; ++i) {
      httplib::Client fresh(server_->url());
      fresh.set_connection_timeout(std::chrono::seconds(5));
      fresh.set_read_timeout(std::chrono::seconds(5));
      auto r = fresh.Get("/api/v1/healthz");
      ASSERT_TRUE(r) << when << ", try " << i << ": " << httplib::to_string(r.error());
      EXPECT_EQ(r->status, 200);
    }
  };
  spot::testing::BadClients bad(server_->port());
  ASSERT_TRUE(bad.OpenSlow(10));
  const auto fed = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (bad.slow_bytes_sent() < 20 && std::chrono::steady_clock::now() < fed) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  healthz("with 10 slow clients");
  ASSERT_TRUE(bad.OpenIdle(200));
  healthz("with 10 slow and 200 idle clients");
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  while (bad.slow_closed() < 10 && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  EXPECT_EQ(bad.slow_closed(), 10) << "slow clients still open after 30 s";
}

// The monitor's pages: /metrics, the http_sd targets, the dashboard's page and
// data; "/" leads to the newest job's dashboard. Unset pages answer 404.
TEST_F(ApiServerTest, ServesTheMonitorsPages) {
  for (const char* path :
       {"/metrics", "/api/v1/targets", "/jobs/train", "/", "/api/v1/jobs/train/dashboard"}) {
    auto r = client_->Get(path);
    ASSERT_TRUE(r);
    EXPECT_EQ(r->status, 404) << path;
  }
  std::vector<std::string> asked;
  StartServer({.metrics = [] { return std::string("spot_up 1\n"); },
               .targets = [] { return std::string(R"([{"targets":["127.0.0.1:1"]}])"); },
               .dashboard_data = [&asked](const std::string& id) -> Result<std::string> {
                 asked.push_back(id);
                 return std::string(R"({"version":1})");
               },
               .dashboard_html = [](const std::string& id) { return "<html>" + id + "</html>"; }});
  auto metrics = client_->Get("/metrics");
  ASSERT_TRUE(metrics);
  EXPECT_EQ(metrics->status, 200);
  EXPECT_EQ(metrics->get_header_value("Content-Type"), "text/plain; version=0.0.4; charset=utf-8");
  EXPECT_EQ(metrics->body, "spot_up 1\n");
  auto targets = client_->Get("/api/v1/targets");
  ASSERT_TRUE(targets);
  EXPECT_EQ(Body(targets)[0]["targets"][0], "127.0.0.1:1");
  auto page = client_->Get("/jobs/done");
  ASSERT_TRUE(page);
  EXPECT_EQ(page->status, 200);
  EXPECT_EQ(page->get_header_value("Content-Type"), "text/html; charset=utf-8");
  EXPECT_EQ(page->body, "<html>done</html>");
  EXPECT_EQ(client_->Get("/jobs/nope")->status, 404);
  auto data = client_->Get("/api/v1/jobs/train/dashboard");
  ASSERT_TRUE(data);
  EXPECT_EQ(Body(data)["version"], 1);
  EXPECT_EQ(data->get_header_value("Cache-Control"), "no-store");
  EXPECT_EQ(client_->Get("/api/v1/jobs/nope/dashboard")->status, 404);
  EXPECT_EQ(asked, std::vector<std::string>{"train"});
  // "/" redirects to the newest job (created last: both have the same time
  // here, so either is fine, but it must be one of them).
  httplib::Client no_follow(server_->url());
  auto home = no_follow.Get("/");
  ASSERT_TRUE(home);
  EXPECT_EQ(home->status, 302);
  EXPECT_TRUE(home->get_header_value("Location").starts_with("/jobs/"));
  EXPECT_EQ(client_->Post("/metrics", "", "text/plain")->status, 405);
}

// A second server cannot share the port (no SO_REUSEPORT): it fails clearly.
TEST_F(ApiServerTest, RefusesATakenPort) {
  ApiOptions options;
  options.token_path = token_path_;
  options.port = server_->port();
  auto second = ApiServer::Start(store_, options, [](const std::string&) { return Status::Ok(); });
  ASSERT_FALSE(second.ok());
  EXPECT_EQ(second.status().code(), StatusCode::kUnavailable);
  EXPECT_NE(second.status().message().find(std::to_string(server_->port())), std::string::npos);
}

TEST_F(ApiServerTest, ListsJobs) {
  auto r = client_->Get("/api/v1/jobs");
  ASSERT_TRUE(r);
  ASSERT_EQ(r->status, 200);
  json jobs = Body(r)["jobs"];
  ASSERT_EQ(jobs.size(), 2u);
  EXPECT_EQ(jobs[0]["id"], "train");
  EXPECT_EQ(jobs[0]["state"], "RUNNING");
  EXPECT_EQ(jobs[0]["message"], "running on spot");
  EXPECT_NEAR(jobs[0]["cost_usd"].get<double>(), 0.9 + 3.06 / 2, 1e-9);
  EXPECT_EQ(jobs[1]["id"], "done");
  EXPECT_EQ(jobs[1]["state"], "SUCCEEDED");
  EXPECT_EQ(jobs[1]["cost_usd"], 0.0);
}

TEST_F(ApiServerTest, JobDetail) {
  auto r = client_->Get("/api/v1/jobs/train");
  ASSERT_TRUE(r);
  ASSERT_EQ(r->status, 200);
  json j = Body(r);
  EXPECT_EQ(j["id"], "train");
  EXPECT_EQ(j["state"], "RUNNING");
  EXPECT_EQ(j["message"], "running on spot");
  EXPECT_EQ(j["spec_path"], "/specs/train.yaml");
  EXPECT_GT(j["created_unix_s"].get<double>(), 1e9);
  EXPECT_GT(j["updated_unix_s"].get<double>(), 1e9);
  EXPECT_EQ(j["time_compression"], 60.0);
  EXPECT_EQ(j["start_tick"], 500);
  EXPECT_NEAR(j["cost_usd"].get<double>(), 2.43, 1e-9);

  ASSERT_EQ(j["instances"].size(), 2u);
  json a = j["instances"][0], b = j["instances"][1];
  EXPECT_EQ(a["id"], "i-0000000000000000a");
  EXPECT_EQ(a["zone"], 0);
  EXPECT_EQ(a["zone_name"], "us-east-1a");
  EXPECT_EQ(a["instance_type"], "p3.2xlarge");
  EXPECT_EQ(a["lifecycle"], "spot");
  EXPECT_EQ(a["provider_data"]["pid"], 111);
  EXPECT_EQ(a["launched_s"], 0.0);
  EXPECT_EQ(a["ended_s"], 3600.0);
  EXPECT_EQ(a["end_reason"], "preempted");
  EXPECT_EQ(a["billed_until_s"], 3600.0);
  EXPECT_EQ(b["lifecycle"], "on-demand");
  EXPECT_EQ(b["zone"], -1);
  EXPECT_TRUE(b["ended_s"].is_null());
  EXPECT_EQ(b["billed_until_s"], 5400.0);

  EXPECT_EQ(j["progress"], json({{"step", 120}, {"loss", 1.5}}));
  ASSERT_EQ(j["events"].size(), 50u);  // the last 50 of 60
  EXPECT_EQ(j["events"][0]["detail"], "event 10");
  json last = j["events"][49];
  EXPECT_EQ(last["detail"], "event 59");
  EXPECT_EQ(last["sim_s"], 590.0);
  EXPECT_EQ(last["wall_unix_s"], 1.7e9 + 59);
  EXPECT_EQ(last["kind"], "tick");
  EXPECT_EQ(last["instance_id"], "i-0000000000000000a");

  r = client_->Get("/api/v1/jobs/done");
  ASSERT_TRUE(r);
  ASSERT_EQ(r->status, 200);
  j = Body(r);
  EXPECT_TRUE(j["progress"].is_null());
  EXPECT_TRUE(j["instances"].empty());
  EXPECT_TRUE(j["events"].empty());
}

TEST_F(ApiServerTest, LedgerAndDecisions) {
  auto r = client_->Get("/api/v1/jobs/train/ledger");
  ASSERT_TRUE(r);
  ASSERT_EQ(r->status, 200);
  json l = Body(r);
  ASSERT_EQ(l["rows"].size(), 2u);
  EXPECT_EQ(l["rows"][0]["instance_id"], "i-0000000000000000a");
  EXPECT_EQ(l["rows"][0]["from_s"], 0.0);
  EXPECT_EQ(l["rows"][0]["to_s"], 3600.0);
  EXPECT_EQ(l["rows"][0]["usd_per_hour"], 0.9);
  EXPECT_NEAR(l["rows"][0]["usd"].get<double>(), 0.9, 1e-12);
  EXPECT_NEAR(l["total_usd"].get<double>(), 2.43, 1e-9);

  r = client_->Get("/api/v1/jobs/train/decisions");
  ASSERT_TRUE(r);
  ASSERT_EQ(r->status, 200);
  json d = Body(r)["decisions"];
  ASSERT_EQ(d.size(), 2u);
  EXPECT_EQ(d[1]["tick"], 1);
  EXPECT_EQ(d[1]["abs_tick"], 501);
  EXPECT_EQ(d[1]["progress_hours"], 0.2);
  EXPECT_EQ(d[1]["current"], "spot:0");
  EXPECT_EQ(d[1]["changeover_left_hours"], 0.0);
  EXPECT_EQ(d[1]["preempted"], true);
  EXPECT_EQ(d[1]["target"], "od");
}

TEST_F(ApiServerTest, CancelNeedsTheToken) {
  auto r = Cancel("train", "");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 401);
  EXPECT_EQ(r->get_header_value("WWW-Authenticate"), "Bearer");
  EXPECT_TRUE(Body(r).contains("error"));

  r = Cancel("train", "Basic dXNlcjpwYXNz");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 401);

  std::string wrong = server_->token();
  wrong.back() = wrong.back() == '0' ? '1' : '0';
  r = Cancel("train", "Bearer " + wrong);
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 403);
  r = Cancel("train", "Bearer " + server_->token() + "0");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 403);
  // Unauthorized callers learn nothing about which jobs exist.
  r = Cancel("ghost", "");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 401);
  EXPECT_TRUE(Cancelled().empty());

  r = Cancel("train", "Bearer " + server_->token());
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 202);
  EXPECT_EQ(Body(r), json({{"id", "train"}, {"state", "CANCELLED"}}));
  EXPECT_EQ(Cancelled(), std::vector<std::string>{"train"});
}

TEST_F(ApiServerTest, CancelOfEndedOrUnknownJobs) {
  std::string auth = "bearer " + server_->token();
  auto r = Cancel("done", auth);
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 409);
  EXPECT_NE(Body(r)["error"].get<std::string>().find("SUCCEEDED"), std::string::npos);
  r = Cancel("ghost", auth);
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 404);
  EXPECT_TRUE(Cancelled().empty());

  cancel_result_ = UnavailableError("fleet busy");
  r = Cancel("train", auth);
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 503);
  EXPECT_NE(Body(r)["error"].get<std::string>().find("fleet busy"), std::string::npos);
}

TEST_F(ApiServerTest, UnknownJobPathAndMethod) {
  for (const char* path :
       {"/api/v1/jobs/ghost", "/api/v1/jobs/ghost/ledger", "/api/v1/jobs/ghost/decisions"}) {
    auto r = client_->Get(path);
    ASSERT_TRUE(r);
    EXPECT_EQ(r->status, 404) << path;
    EXPECT_TRUE(Body(r).contains("error")) << path;
  }
  for (const char* path : {"/", "/api/v1/nope", "/api/v1/jobs/train/nope", "/api/v1/jobs/",
                           "/api/v2/jobs", "/api/v1/jobs/train/ledger/x"}) {
    auto r = client_->Get(path);
    ASSERT_TRUE(r);
    EXPECT_EQ(r->status, 404) << path;
  }
  auto r = client_->Post("/api/v1/jobs", "{}", "application/json");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 405);
  EXPECT_EQ(r->get_header_value("Allow"), "GET");
  r = client_->Get("/api/v1/jobs/train/cancel");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 405);
  EXPECT_EQ(r->get_header_value("Allow"), "POST");
  r = client_->Delete("/api/v1/jobs/train");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 405);
  r = client_->Put("/api/v1/healthz", "", "text/plain");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 405);
  EXPECT_TRUE(Cancelled().empty());
}

// The server serves its contract, docs/openapi.yaml, byte for byte as built.
TEST_F(ApiServerTest, ServesItsOpenApiDescription) {
  auto r = client_->Get("/api/v1/openapi.yaml");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 200);
  EXPECT_EQ(r->get_header_value("Content-Type"), "application/yaml");
  std::ifstream in(std::string(SPOT_SOURCE_DIR) + "/docs/openapi.yaml", std::ios::binary);
  ASSERT_TRUE(in) << "docs/openapi.yaml";
  std::string file((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  EXPECT_EQ(r->body, file);
  EXPECT_EQ(client_->Post("/api/v1/openapi.yaml", "", "text/plain")->status, 405);
}

// Issue 20 (the API contract): the path was percent-decoded before it was
// split, so "/api/v1/jobs/train%2Fledger" answered the ledger of job "train"
// and "/api/v1/jobs/train%2Fcancel" answered 405 to a GET. A job id is one
// segment: these name the jobs "train/ledger" and "train/cancel".
TEST_F(ApiServerTest, AJobIdIsOneSegmentDecodedAfterTheSplit) {
  const std::pair<const char*, const char*> cases[] = {
      {"/api/v1/jobs/train%2Fledger", "train/ledger"},
      {"/api/v1/jobs/train%2Fcancel", "train/cancel"},
      {"/api/v1/jobs/train%2fdecisions/ledger", "train/decisions"},
      {"/jobs/train%2Fx", "train/x"}};
  for (const auto& [path, job] : cases) {
    auto r = client_->Get(path);
    ASSERT_TRUE(r) << path;
    EXPECT_EQ(r->status, 404) << path;
    EXPECT_EQ(Body(r)["error"], std::string("no job ") + job) << path;
  }
  // Other escapes still decode: "%74rain" is "train".
  auto r = client_->Get("/api/v1/jobs/%74rain/ledger");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 200);
  EXPECT_EQ(Body(r)["rows"].size(), 2u);
  r = client_->Post("/api/v1/jobs/train%2Fcancel/cancel", "", "text/plain");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 401);
  EXPECT_TRUE(Cancelled().empty());
}

// Issue 20, found by schemathesis: a decoded newline in the path ("%0A")
// escaped the routes' pattern, so the HTTP layer answered 404 with no body
// and no Content-Type, and a cancel without the token got that 404 rather
// than 401. Every path now reaches the router.
TEST_F(ApiServerTest, PathsWithControlCharactersReachTheRouter) {
  auto r = client_->Get("/api/v1/jobs/%0A%2B%3E%C2%AA%5C%C3%94%40x/dashboard");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 404);
  EXPECT_EQ(Body(r)["error"], "no job \n+>\u00aa\\\u00d4@x");
  r = client_->Get("/api/v1/jobs/a%0Ab%0D%00c");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 404);
  EXPECT_TRUE(Body(r).contains("error"));
  r = Cancel("a%0Ab", "");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 401);
  r = Cancel("a%0Ab", "Bearer " + server_->token());
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 404);
  EXPECT_TRUE(Cancelled().empty());
}

// Issue 20: the errors the HTTP layer answers before any handler runs (a
// malformed request, a body over 64 KiB, a request line over 8 KiB, a method
// it does not route) came with no body and no Content-Type; they are JSON
// errors like every other.
TEST_F(ApiServerTest, TheHttpLayersOwnErrorsAreJson) {
  httplib::Headers no_boundary = {{"Content-Type", "multipart/form-data"}};
  auto r = client_->Post("/api/v1/jobs/train/cancel", no_boundary, "", "multipart/form-data");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 400);
  EXPECT_NE(Body(r)["error"].get<std::string>().find("malformed"), std::string::npos);

  r = client_->Post("/api/v1/jobs/train/cancel", std::string(64 * 1024 + 1, 'x'), "text/plain");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 413);
  EXPECT_EQ(Body(r)["error"], "request body over 65536 bytes");

  r = client_->Get(("/api/v1/jobs/" + std::string(9000, 'j')).c_str());
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 414);
  EXPECT_EQ(Body(r)["error"], "request line too long");
  // Just under the limit, the whole path goes through the router.
  const std::string long_id(8000, 'j');
  r = client_->Get(("/api/v1/jobs/" + long_id).c_str());
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 404);
  EXPECT_EQ(Body(r)["error"], "no job " + long_id);

  httplib::Request trace;
  trace.method = "TRACE";
  trace.path = "/api/v1/healthz";
  r = client_->send(trace);
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 400);
  EXPECT_TRUE(Body(r).contains("error"));
  EXPECT_TRUE(Cancelled().empty());
}

// Issue 20, found by schemathesis (one run in six): an unknown method
// ("QUERY") is refused before its headers are read, and they were then read
// as further requests on the kept-alive connection and answered 400 each;
// the client's next request on it got one of those answers, or the middle of
// one. Such errors now close the connection.
TEST_F(ApiServerTest, ErrorsBeforeTheRequestIsReadCloseTheConnection) {
  httplib::Client kept(server_->url());
  kept.set_keep_alive(true);  // as a browser or Python's requests keep theirs
  kept.set_read_timeout(std::chrono::seconds(5));
  // Errors of the API itself keep the connection.
  auto r = kept.Get("/api/v1/jobs/ghost");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 404);
  EXPECT_NE(r->get_header_value("Connection"), "close");

  httplib::Request query;
  query.method = "QUERY";
  query.path = "/api/v1/healthz";
  query.headers = {{"X-One", "1"}, {"X-Two", "2"}};
  r = kept.send(query);
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 400);
  EXPECT_TRUE(Body(r).contains("error"));
  EXPECT_EQ(r->get_header_value("Connection"), "close");
  // The same client's next request gets its own answer.
  r = kept.Get("/api/v1/healthz");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 200);
  EXPECT_EQ(Body(r), json({{"ok", true}}));

  r = kept.Post("/api/v1/jobs/train/cancel", std::string(64 * 1024 + 1, 'x'), "text/plain");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 413);
  EXPECT_EQ(r->get_header_value("Connection"), "close");
  r = kept.Get("/api/v1/healthz");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 200);
  EXPECT_TRUE(Cancelled().empty());
}

TEST_F(ApiServerTest, RefusesNonLoopbackHosts) {
  for (const char* host : {"0.0.0.0", "192.168.1.10", "10.0.0.1", "::", "example.com", ""}) {
    ApiOptions options;
    options.host = host;
    options.token_path = token_path_;
    auto s = ApiServer::Start(store_, options, nullptr);
    ASSERT_FALSE(s.ok()) << host;
    EXPECT_EQ(s.status().code(), StatusCode::kInvalidArgument) << host;
  }
  ApiOptions options;
  options.host = "127.0.0.2";
  options.token_path = token_path_;
  auto s = ApiServer::Start(store_, options, nullptr);
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  httplib::Client c((*s)->url());
  auto r = c.Get("/api/v1/healthz");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 200);
}

// For instances on another network the API listens on the one address the
// job advertises, never on every address, and a mutation there needs the
// token as on loopback (127.0.0.3 stands for the advertised address).
TEST_F(ApiServerTest, ReachableFromTheNetworkOnOneNamedAddressWithTheToken) {
  for (const char* host : {"0.0.0.0", "::", ""}) {
    ApiOptions options;
    options.host = host;
    options.reachable_from_network = true;
    options.token_path = token_path_;
    auto s = ApiServer::Start(store_, options, nullptr);
    ASSERT_FALSE(s.ok()) << host;
    EXPECT_EQ(s.status().code(), StatusCode::kInvalidArgument) << host;
    EXPECT_NE(s.status().message().find("every address"), std::string::npos) << host;
  }
  ApiOptions options;
  options.host = "127.0.0.3";
  options.reachable_from_network = true;
  options.token_path = token_path_;
  auto s = ApiServer::Start(store_, options, [](const std::string&) { return Status::Ok(); });
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  EXPECT_EQ((*s)->url(), "http://127.0.0.3:" + std::to_string((*s)->port()));
  httplib::Client c((*s)->url());
  auto none = c.Post("/api/v1/jobs/train/cancel", "", "text/plain");
  ASSERT_TRUE(none);
  EXPECT_EQ(none->status, 401);
  auto ok = c.Post("/api/v1/jobs/train/cancel", {{"Authorization", "Bearer " + (*s)->token()}}, "",
                   "text/plain");
  ASSERT_TRUE(ok);
  EXPECT_EQ(ok->status, 202) << ok->body;
}

TEST_F(ApiServerTest, TokenFileIsCreatedPrivateAndReused) {
  struct stat st {};
  ASSERT_EQ(stat(token_path_.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600u);
  std::string token = server_->token();
  ASSERT_EQ(token.size(), 64u);
  EXPECT_EQ(token.find_first_not_of("0123456789abcdef"), std::string::npos);
  for (const auto& entry : std::filesystem::directory_iterator(dir_->path())) {
    EXPECT_NE(entry.path().filename().string().rfind(".tmp.", 0), 0u) << entry.path();
  }

  client_.reset();
  server_.reset();
  StartServer();
  EXPECT_EQ(server_->token(), token);
  auto again = LoadOrCreateToken(token_path_);
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(*again, token);

  std::string other = (dir_->path() / "other.token").string();
  auto fresh = LoadOrCreateToken(other);
  ASSERT_TRUE(fresh.ok());
  EXPECT_NE(*fresh, token);
}

TEST_F(ApiServerTest, TokenFileIsTrimmedAndCheckedForMode) {
  std::string path = (dir_->path() / "hand.token").string();
  std::ofstream(path) << "  s3cret-token \n";
  ASSERT_EQ(chmod(path.c_str(), 0644), 0);
  auto open = LoadOrCreateToken(path);
  ASSERT_FALSE(open.ok());
  EXPECT_EQ(open.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(open.status().message().find(path), std::string::npos);
  ApiOptions options;
  options.token_path = path;
  EXPECT_EQ(ApiServer::Start(store_, options, nullptr).status().code(),
            StatusCode::kInvalidArgument);

  ASSERT_EQ(chmod(path.c_str(), 0600), 0);
  auto token = LoadOrCreateToken(path);
  ASSERT_TRUE(token.ok()) << token.status().ToString();
  EXPECT_EQ(*token, "s3cret-token");

  std::ofstream(path, std::ios::trunc) << " \n\t";
  auto empty = LoadOrCreateToken(path);
  ASSERT_FALSE(empty.ok());
  EXPECT_EQ(empty.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(empty.status().message().find(path), std::string::npos);
}

}  // namespace
}  // namespace spot::control
