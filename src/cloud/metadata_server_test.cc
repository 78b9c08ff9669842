#include "cloud/metadata_server.h"

#include <gtest/gtest.h>
#include <httplib.h>
#include <stdlib.h>

#include <chrono>
#include <functional>
#include <mutex>
#include <nlohmann/json.hpp>
#include <optional>
#include <regex>
#include <string>
#include <thread>
#include <vector>

#include "cloud/termination_watcher.h"
#include "monitor/bad_clients_testing.h"

namespace spot::cloud {
namespace {

using json = nlohmann::json;
using std::chrono::milliseconds;
using std::chrono::steady_clock;

constexpr double kNoticeTime = 1796032800;  // 2026-11-30T10:00:00Z, a Monday
constexpr double kInterval = 0.05;
constexpr char kAzurePath[] = "/metadata/scheduledevents?api-version=2020-07-01";

InstanceIdentity TestIdentity(bool spot = true) {
  return {.instance_id = "i-0123456789abcdef0",
          .instance_type = "p3.2xlarge",
          .region = "us-east-1",
          .zone = "us-east-1a",
          .spot = spot};
}

std::unique_ptr<MetadataServer> StartServer(bool spot = true) {
  auto server = MetadataServer::Start(TestIdentity(spot));
  EXPECT_TRUE(server.ok()) << server.status().ToString();
  return std::move(server).value();
}

std::unique_ptr<httplib::Client> ClientFor(const MetadataServer& server) {
  auto c = std::make_unique<httplib::Client>("127.0.0.1", server.port());
  c->set_connection_timeout(std::chrono::seconds(2));
  c->set_read_timeout(std::chrono::seconds(2));
  return c;
}

std::string AwsToken(httplib::Client& c) {
  auto res = c.Put("/latest/api/token", {{"X-aws-ec2-metadata-token-ttl-seconds", "60"}}, "",
                   "text/plain");
  EXPECT_TRUE(res);
  if (!res) return "";
  EXPECT_EQ(res->status, 200);
  return res->body;
}

// Status and body of an IMDSv2 GET with `token` ("" sends no token header).
std::pair<int, std::string> AwsGet(httplib::Client& c, const std::string& path,
                                   const std::string& token) {
  httplib::Headers headers;
  if (!token.empty()) headers.emplace("X-aws-ec2-metadata-token", token);
  auto res = c.Get(path, headers);
  if (!res) return {-1, httplib::to_string(res.error())};
  return {res->status, res->body};
}

// Polls `pred` every millisecond until it holds or `timeout` passes.
template <typename Pred>
bool WaitFor(Pred pred, milliseconds timeout = milliseconds(2000)) {
  auto deadline = steady_clock::now() + timeout;
  while (!pred()) {
    if (steady_clock::now() > deadline) return false;
    std::this_thread::sleep_for(milliseconds(1));
  }
  return true;
}

// Collects what a watcher reports, for the test thread to read.
class NoticeLog {
 public:
  std::function<void(const Notice&)> Callback() {
    return [this](const Notice& n) {
      std::lock_guard<std::mutex> lock(mu_);
      notices_.push_back(n);
    };
  }
  std::vector<Notice> notices() {
    std::lock_guard<std::mutex> lock(mu_);
    return notices_;
  }
  size_t size() { return notices().size(); }

 private:
  std::mutex mu_;
  std::vector<Notice> notices_;
};

// A port nothing listens on: a server's, after it stopped.
int ClosedPort() {
  auto server = StartServer();
  return server->port();
}

// ---- time formats ----

TEST(MetadataTimeTest, FormatsUtc) {
  EXPECT_EQ(Iso8601Utc(kNoticeTime), "2026-11-30T10:00:00Z");
  EXPECT_EQ(Iso8601Utc(kNoticeTime + 0.9), "2026-11-30T10:00:00Z");
  EXPECT_EQ(Rfc1123Utc(kNoticeTime), "Mon, 30 Nov 2026 10:00:00 GMT");
  EXPECT_EQ(Rfc1123Utc(0), "Thu, 01 Jan 1970 00:00:00 GMT");
}

// ---- AWS IMDSv2 ----

TEST(MetadataServerTest, StartsOnLoopbackAndCountsRequests) {
  auto server = StartServer();
  EXPECT_GT(server->port(), 0);
  EXPECT_EQ(server->endpoint(), "http://127.0.0.1:" + std::to_string(server->port()));
  EXPECT_EQ(server->requests(), 0);
  auto c = ClientFor(*server);
  AwsGet(*c, "/latest/meta-data/instance-id", "");
  AwsGet(*c, "/no/such/path", "");
  EXPECT_EQ(server->requests(), 2);
}

TEST(MetadataServerTest, StartFailsOnBusyPort) {
  auto first = StartServer();
  auto second = MetadataServer::Start(TestIdentity(), "127.0.0.1", first->port());
  ASSERT_FALSE(second.ok());
  EXPECT_EQ(second.status().code(), StatusCode::kUnavailable);
  EXPECT_NE(second.status().message().find(std::to_string(first->port())), std::string::npos);
}

TEST(MetadataServerTest, AwsRequiresToken) {
  auto server = StartServer();
  auto c = ClientFor(*server);
  EXPECT_EQ(AwsGet(*c, "/latest/meta-data/instance-id", "").first, 401);
  EXPECT_EQ(AwsGet(*c, "/latest/meta-data/instance-id", "not-a-token").first, 401);
  EXPECT_EQ(AwsGet(*c, "/latest/meta-data/spot/instance-action", "").first, 401);
  std::string token = AwsToken(*c);
  EXPECT_GE(token.size(), 32u);
  EXPECT_EQ(AwsGet(*c, "/latest/meta-data/instance-id", token).first, 200);
  EXPECT_NE(AwsToken(*c), token);  // each PUT gives a fresh token
}

TEST(MetadataServerTest, AwsTokenTtlValidated) {
  auto server = StartServer();
  auto c = ClientFor(*server);
  auto put = [&](const httplib::Headers& h) {
    auto res = c->Put("/latest/api/token", h, "", "text/plain");
    return res ? res->status : -1;
  };
  const char* ttl = "X-aws-ec2-metadata-token-ttl-seconds";
  EXPECT_EQ(put({}), 400);
  EXPECT_EQ(put({{ttl, "0"}}), 400);
  EXPECT_EQ(put({{ttl, "21601"}}), 400);
  EXPECT_EQ(put({{ttl, "-5"}}), 400);
  EXPECT_EQ(put({{ttl, "60s"}}), 400);
  EXPECT_EQ(put({{ttl, "1"}}), 200);
  EXPECT_EQ(put({{ttl, "21600"}, {"X-Forwarded-For", "10.0.0.1"}}), 403);

  auto res = c->Put("/latest/api/token", {{ttl, "21600"}}, "", "text/plain");
  ASSERT_TRUE(res);
  EXPECT_EQ(res->status, 200);
  EXPECT_EQ(res->get_header_value(ttl), "21600");
}

TEST(MetadataServerTest, AwsTokenExpires) {
  auto server = StartServer();
  auto c = ClientFor(*server);
  auto res = c->Put("/latest/api/token", {{"X-aws-ec2-metadata-token-ttl-seconds", "1"}}, "",
                    "text/plain");
  ASSERT_TRUE(res);
  std::string token = res->body;
  EXPECT_EQ(AwsGet(*c, "/latest/meta-data/instance-id", token).first, 200);
  EXPECT_TRUE(
      WaitFor([&] { return AwsGet(*c, "/latest/meta-data/instance-id", token).first == 401; },
              milliseconds(2500)));
}

TEST(MetadataServerTest, AwsInstanceActionFollowsNotice) {
  auto server = StartServer();
  auto c = ClientFor(*server);
  std::string token = AwsToken(*c);
  const std::string action = "/latest/meta-data/spot/instance-action";
  const std::string rebalance = "/latest/meta-data/events/recommendations/rebalance";
  EXPECT_EQ(AwsGet(*c, action, token).first, 404);
  EXPECT_EQ(AwsGet(*c, rebalance, token).first, 404);

  server->SetNotice({.action = "terminate", .time_unix_s = kNoticeTime});
  auto [status, body] = AwsGet(*c, action, token);
  ASSERT_EQ(status, 200);
  json doc = json::parse(body);
  EXPECT_EQ(doc["action"], "terminate");
  const std::regex iso(R"(^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ$)");
  EXPECT_TRUE(std::regex_match(doc["time"].get<std::string>(), iso)) << body;
  EXPECT_EQ(doc["time"], "2026-11-30T10:00:00Z");

  auto [rb_status, rb_body] = AwsGet(*c, rebalance, token);
  ASSERT_EQ(rb_status, 200);
  EXPECT_TRUE(std::regex_match(json::parse(rb_body)["noticeTime"].get<std::string>(), iso));

  server->SetNotice({.action = "stop", .time_unix_s = kNoticeTime});
  EXPECT_EQ(json::parse(AwsGet(*c, action, token).second)["action"], "stop");

  server->ClearNotice();
  EXPECT_EQ(AwsGet(*c, action, token).first, 404);
  EXPECT_EQ(AwsGet(*c, rebalance, token).first, 404);
}

// Issue 20: the metadata server ran on 4 fixed threads; four slow-loris
// connections (a header byte a second, never done) on the instance took them
// all and the worker's notice poll timed out: the notice was never seen.
TEST(MetadataServerTest, NoticeIsSeenWhileSlowAndIdleClientsHoldConnections) {
  auto server = StartServer();
  spot::testing::BadClients bad(server->port());
  ASSERT_TRUE(bad.OpenSlow(10));
  const auto fed = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (bad.slow_bytes_sent() < 20 && std::chrono::steady_clock::now() < fed) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  ASSERT_TRUE(bad.OpenIdle(40));
  server->SetNotice({.action = "terminate", .time_unix_s = kNoticeTime});
  for (int i = 0; i < 3; ++i) {
    auto c = ClientFor(*server);
    c->set_connection_timeout(5);
    c->set_read_timeout(5);
    const std::string token = AwsToken(*c);
    auto [status, body] = AwsGet(*c, "/latest/meta-data/spot/instance-action", token);
    ASSERT_EQ(status, 200) << "poll " << i << " with 10 slow and 40 idle clients";
    EXPECT_EQ(json::parse(body)["action"], "terminate");
  }
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  while (bad.slow_closed() < 10 && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  EXPECT_EQ(bad.slow_closed(), 10) << "slow clients still open after 30 s";
}

TEST(MetadataServerTest, AwsIdentity) {
  auto server = StartServer();
  auto c = ClientFor(*server);
  std::string token = AwsToken(*c);
  auto get = [&](const std::string& p) { return AwsGet(*c, "/latest/meta-data/" + p, token); };
  EXPECT_EQ(get("instance-id"), std::make_pair(200, std::string("i-0123456789abcdef0")));
  EXPECT_EQ(get("instance-type"), std::make_pair(200, std::string("p3.2xlarge")));
  EXPECT_EQ(get("instance-life-cycle"), std::make_pair(200, std::string("spot")));
  EXPECT_EQ(get("placement/availability-zone"), std::make_pair(200, std::string("us-east-1a")));
  EXPECT_EQ(get("placement/region"), std::make_pair(200, std::string("us-east-1")));
  EXPECT_EQ(get("no-such-key").first, 404);

  auto on_demand = StartServer(/*spot=*/false);
  auto c2 = ClientFor(*on_demand);
  EXPECT_EQ(AwsGet(*c2, "/latest/meta-data/instance-life-cycle", AwsToken(*c2)).second,
            "on-demand");
}

// ---- GCP ----

TEST(MetadataServerTest, GcpPreempted) {
  auto server = StartServer();
  auto c = ClientFor(*server);
  const std::string path = "/computeMetadata/v1/instance/preempted";
  auto res = c->Get(path);
  ASSERT_TRUE(res);
  EXPECT_EQ(res->status, 403);
  res = c->Get(path, {{"Metadata-Flavor", "Google"}, {"X-Forwarded-For", "10.0.0.1"}});
  ASSERT_TRUE(res);
  EXPECT_EQ(res->status, 403);

  res = c->Get(path, {{"Metadata-Flavor", "Google"}});
  ASSERT_TRUE(res);
  EXPECT_EQ(res->status, 200);
  EXPECT_EQ(res->body, "FALSE");
  EXPECT_EQ(res->get_header_value("Metadata-Flavor"), "Google");

  server->SetNotice({.time_unix_s = kNoticeTime});
  res = c->Get(path, {{"Metadata-Flavor", "Google"}});
  ASSERT_TRUE(res);
  EXPECT_EQ(res->body, "TRUE");

  server->ClearNotice();
  res = c->Get(path, {{"Metadata-Flavor", "Google"}});
  ASSERT_TRUE(res);
  EXPECT_EQ(res->body, "FALSE");
}

// ---- Azure ----

json AzureDoc(httplib::Client& c) {
  auto res = c.Get(kAzurePath, {{"Metadata", "true"}});
  EXPECT_TRUE(res);
  if (!res) return json();
  EXPECT_EQ(res->status, 200);
  return json::parse(res->body);
}

TEST(MetadataServerTest, AzureScheduledEvents) {
  auto server = StartServer();
  auto c = ClientFor(*server);
  auto res = c->Get(kAzurePath);
  ASSERT_TRUE(res);
  EXPECT_EQ(res->status, 400);

  json doc = AzureDoc(*c);
  EXPECT_TRUE(doc["Events"].is_array());
  EXPECT_TRUE(doc["Events"].empty());
  int64_t incarnation = doc["DocumentIncarnation"];
  EXPECT_EQ(AzureDoc(*c)["DocumentIncarnation"], incarnation);  // unchanged without news

  server->SetNotice({.time_unix_s = kNoticeTime});
  doc = AzureDoc(*c);
  EXPECT_GT(doc["DocumentIncarnation"].get<int64_t>(), incarnation);
  incarnation = doc["DocumentIncarnation"];
  ASSERT_EQ(doc["Events"].size(), 1u);
  const json& e = doc["Events"][0];
  EXPECT_EQ(e["EventType"], "Preempt");
  EXPECT_EQ(e["ResourceType"], "VirtualMachine");
  EXPECT_EQ(e["Resources"], json::array({"i-0123456789abcdef0"}));
  EXPECT_EQ(e["EventStatus"], "Scheduled");
  EXPECT_EQ(e["NotBefore"], "Mon, 30 Nov 2026 10:00:00 GMT");
  EXPECT_EQ(e["EventSource"], "Platform");
  EXPECT_EQ(e["DurationInSeconds"], -1);
  const std::string id = e["EventId"];
  EXPECT_TRUE(std::regex_match(id, std::regex("^[0-9A-F]{8}(-[0-9A-F]{4}){3}-[0-9A-F]{12}$")))
      << id;

  EXPECT_EQ(server->acknowledgements(), 0);
  json ack = {{"StartRequests", json::array({{{"EventId", id}}})}};
  res = c->Post(kAzurePath, ack.dump(), "application/json");
  ASSERT_TRUE(res);
  EXPECT_EQ(res->status, 400);  // no Metadata header
  res = c->Post(kAzurePath, {{"Metadata", "true"}}, "not json", "application/json");
  ASSERT_TRUE(res);
  EXPECT_EQ(res->status, 400);
  json other = {{"StartRequests", json::array({{{"EventId", "00000000-0000"}}})}};
  res = c->Post(kAzurePath, {{"Metadata", "true"}}, other.dump(), "application/json");
  ASSERT_TRUE(res);
  EXPECT_EQ(res->status, 200);
  EXPECT_EQ(server->acknowledgements(), 0);  // not a pending event
  res = c->Post(kAzurePath, {{"Metadata", "true"}}, ack.dump(), "application/json");
  ASSERT_TRUE(res);
  EXPECT_EQ(res->status, 200);
  EXPECT_EQ(server->acknowledgements(), 1);

  server->ClearNotice();
  doc = AzureDoc(*c);
  EXPECT_TRUE(doc["Events"].empty());
  EXPECT_GT(doc["DocumentIncarnation"].get<int64_t>(), incarnation);
}

// ---- notice sources and the watcher ----

TEST(NoticeSourceTest, FlavorNames) {
  EXPECT_EQ(FlavorName(MetadataFlavor::kAws), "aws");
  EXPECT_EQ(FlavorName(MetadataFlavor::kGcp), "gcp");
  EXPECT_EQ(FlavorName(MetadataFlavor::kAzure), "azure");
}

TEST(NoticeSourceTest, PollsEachFlavor) {
  auto server = StartServer();
  std::string host_port = "127.0.0.1:" + std::to_string(server->port());
  auto aws = MakeAwsNoticeSource(server->endpoint());
  auto gcp = MakeGcpNoticeSource(host_port);
  auto azure = MakeAzureNoticeSource(server->endpoint() + "/");
  EXPECT_EQ(gcp->endpoint(), server->endpoint());
  EXPECT_EQ(azure->endpoint(), server->endpoint());
  for (NoticeSource* s : {aws.get(), gcp.get(), azure.get()}) {
    auto r = s->Poll();
    ASSERT_TRUE(r.ok()) << FlavorName(s->flavor()) << ": " << r.status().ToString();
    EXPECT_FALSE(r->has_value()) << FlavorName(s->flavor());
  }
  server->SetNotice({.action = "hibernate", .time_unix_s = kNoticeTime});
  auto a = aws->Poll();
  ASSERT_TRUE(a.ok() && a->has_value());
  EXPECT_EQ((*a)->action, "hibernate");
  EXPECT_EQ((*a)->time_unix_s, kNoticeTime);
}

TEST(NoticeSourceTest, AwsSourceGetsNewTokenAfterServerRestart) {
  auto server = StartServer();
  int port = server->port();
  auto aws = MakeAwsNoticeSource(server->endpoint());
  ASSERT_TRUE(aws->Poll().ok());
  server.reset();  // forgets the source's token
  auto restarted = MetadataServer::Start(TestIdentity(), "127.0.0.1", port);
  ASSERT_TRUE(restarted.ok()) << restarted.status().ToString();
  (*restarted)->SetNotice({.time_unix_s = kNoticeTime});
  auto r = aws->Poll();
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  ASSERT_TRUE(r->has_value());
  EXPECT_EQ((*r)->action, "terminate");
}

TEST(NoticeSourceTest, UnreachableIsUnavailableNamingUrl) {
  std::string endpoint = "http://127.0.0.1:" + std::to_string(ClosedPort());
  for (auto& s : {MakeAwsNoticeSource(endpoint), MakeGcpNoticeSource(endpoint),
                  MakeAzureNoticeSource(endpoint)}) {
    auto r = s->Poll();
    ASSERT_FALSE(r.ok());
    EXPECT_EQ(r.status().code(), StatusCode::kUnavailable);
    EXPECT_NE(r.status().message().find(endpoint + "/"), std::string::npos) << r.status().message();
  }
}

// Runs a watcher on `source`; checks it stays quiet until the server's notice,
// then reports it exactly once. Returns the notice.
Notice WatchUntilNotice(MetadataServer& server, std::unique_ptr<NoticeSource> source) {
  NoticeLog log;
  TerminationWatcher watcher(std::move(source), kInterval, log.Callback());
  EXPECT_TRUE(WaitFor([&] { return watcher.polls() >= 2; }));
  EXPECT_FALSE(watcher.notified());
  EXPECT_EQ(log.size(), 0u);

  server.SetNotice({.action = "terminate", .time_unix_s = kNoticeTime});
  auto set_at = steady_clock::now();
  EXPECT_TRUE(WaitFor([&] { return log.size() > 0; }, milliseconds(1000)));
  EXPECT_LT(steady_clock::now() - set_at, milliseconds(1000));
  EXPECT_TRUE(watcher.notified());
  std::this_thread::sleep_for(milliseconds(static_cast<int>(4 * kInterval * 1000)));
  EXPECT_EQ(log.size(), 1u);
  return log.size() > 0 ? log.notices()[0] : Notice{};
}

TEST(TerminationWatcherTest, AwsNotice) {
  auto server = StartServer();
  Notice n = WatchUntilNotice(*server, MakeAwsNoticeSource(server->endpoint()));
  EXPECT_EQ(n.flavor, MetadataFlavor::kAws);
  EXPECT_EQ(n.action, "terminate");
  EXPECT_EQ(n.time_unix_s, kNoticeTime);
  EXPECT_TRUE(n.event_id.empty());
}

TEST(TerminationWatcherTest, GcpNotice) {
  auto server = StartServer();
  Notice n = WatchUntilNotice(*server, MakeGcpNoticeSource(server->endpoint()));
  EXPECT_EQ(n.flavor, MetadataFlavor::kGcp);
  EXPECT_EQ(n.action, "preempted");
  EXPECT_EQ(n.time_unix_s, 0);
}

TEST(TerminationWatcherTest, AzureNoticeIsAcknowledged) {
  auto server = StartServer();
  Notice n = WatchUntilNotice(*server, MakeAzureNoticeSource(server->endpoint()));
  EXPECT_EQ(n.flavor, MetadataFlavor::kAzure);
  EXPECT_EQ(n.action, "Preempt");
  EXPECT_EQ(n.time_unix_s, kNoticeTime);
  auto c = ClientFor(*server);
  EXPECT_EQ(n.event_id, AzureDoc(*c)["Events"][0]["EventId"]);
  EXPECT_EQ(server->acknowledgements(), 1);
}

TEST(TerminationWatcherTest, KeepsPollingWhileServerUnreachable) {
  NoticeLog log;
  auto start = steady_clock::now();
  {
    std::string endpoint = "http://127.0.0.1:" + std::to_string(ClosedPort());
    TerminationWatcher watcher(MakeAwsNoticeSource(endpoint), kInterval, log.Callback());
    EXPECT_TRUE(WaitFor([&] { return watcher.polls() >= 4; }));
    EXPECT_FALSE(watcher.notified());
  }
  EXPECT_EQ(log.size(), 0u);
  EXPECT_LT(steady_clock::now() - start, milliseconds(1500));
}

TEST(TerminationWatcherTest, DestructorWakesSleepingThread) {
  auto server = StartServer();
  NoticeLog log;
  auto watcher = std::make_unique<TerminationWatcher>(MakeGcpNoticeSource(server->endpoint()),
                                                      /*interval_s=*/60, log.Callback());
  ASSERT_TRUE(WaitFor([&] { return watcher->polls() == 1; }));
  auto start = steady_clock::now();
  watcher.reset();
  EXPECT_LT(steady_clock::now() - start, milliseconds(200));
  EXPECT_EQ(log.size(), 0u);
}

// ---- NoticeSourceFromEnv ----

class NoticeSourceFromEnvTest : public ::testing::Test {
 protected:
  static constexpr const char* kVars[] = {"AWS_EC2_METADATA_SERVICE_ENDPOINT", "GCE_METADATA_HOST",
                                          "SPOT_AZURE_METADATA_ENDPOINT"};
  void SetUp() override {
    for (const char* v : kVars) {
      const char* value = getenv(v);
      saved_.emplace_back(v, value ? std::optional<std::string>(value) : std::nullopt);
      unsetenv(v);
    }
  }
  void TearDown() override {
    for (const auto& [name, value] : saved_) {
      if (value) {
        setenv(name, value->c_str(), 1);
      } else {
        unsetenv(name);
      }
    }
  }

 private:
  std::vector<std::pair<const char*, std::optional<std::string>>> saved_;
};

TEST_F(NoticeSourceFromEnvTest, AutoNeedsAVariable) {
  auto r = NoticeSourceFromEnv("auto");
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kNotFound);
}

TEST_F(NoticeSourceFromEnvTest, InvalidFlavor) {
  for (const char* f : {"", "none", "AWS", "ibm"}) {
    auto r = NoticeSourceFromEnv(f);
    ASSERT_FALSE(r.ok()) << f;
    EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument) << f;
  }
}

TEST_F(NoticeSourceFromEnvTest, DefaultsPerFlavor) {
  auto aws = NoticeSourceFromEnv("aws");
  ASSERT_TRUE(aws.ok());
  EXPECT_EQ((*aws)->flavor(), MetadataFlavor::kAws);
  EXPECT_EQ((*aws)->endpoint(), "http://169.254.169.254");
  auto gcp = NoticeSourceFromEnv("gcp");
  ASSERT_TRUE(gcp.ok());
  EXPECT_EQ((*gcp)->flavor(), MetadataFlavor::kGcp);
  EXPECT_EQ((*gcp)->endpoint(), "http://metadata.google.internal");
  auto azure = NoticeSourceFromEnv("azure");
  ASSERT_TRUE(azure.ok());
  EXPECT_EQ((*azure)->flavor(), MetadataFlavor::kAzure);
  EXPECT_EQ((*azure)->endpoint(), "http://169.254.169.254");
}

TEST_F(NoticeSourceFromEnvTest, AutoPicksFirstSetVariable) {
  setenv("SPOT_AZURE_METADATA_ENDPOINT", "http://127.0.0.1:3", 1);
  auto r = NoticeSourceFromEnv("auto");
  ASSERT_TRUE(r.ok());
  EXPECT_EQ((*r)->flavor(), MetadataFlavor::kAzure);
  EXPECT_EQ((*r)->endpoint(), "http://127.0.0.1:3");

  setenv("GCE_METADATA_HOST", "127.0.0.1:2", 1);
  r = NoticeSourceFromEnv("auto");
  ASSERT_TRUE(r.ok());
  EXPECT_EQ((*r)->flavor(), MetadataFlavor::kGcp);
  EXPECT_EQ((*r)->endpoint(), "http://127.0.0.1:2");

  setenv("AWS_EC2_METADATA_SERVICE_ENDPOINT", "http://127.0.0.1:1", 1);
  r = NoticeSourceFromEnv("auto");
  ASSERT_TRUE(r.ok());
  EXPECT_EQ((*r)->flavor(), MetadataFlavor::kAws);
  EXPECT_EQ((*r)->endpoint(), "http://127.0.0.1:1");

  r = NoticeSourceFromEnv("gcp");  // a named flavor reads its own variable
  ASSERT_TRUE(r.ok());
  EXPECT_EQ((*r)->endpoint(), "http://127.0.0.1:2");
}

TEST_F(NoticeSourceFromEnvTest, WatchesServerNamedByEnvironment) {
  auto server = StartServer();
  setenv("AWS_EC2_METADATA_SERVICE_ENDPOINT", server->endpoint().c_str(), 1);
  auto source = NoticeSourceFromEnv("auto");
  ASSERT_TRUE(source.ok());
  Notice n = WatchUntilNotice(*server, std::move(source).value());
  EXPECT_EQ(n.flavor, MetadataFlavor::kAws);
}

}  // namespace
}  // namespace spot::cloud
