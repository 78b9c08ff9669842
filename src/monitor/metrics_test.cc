#include "monitor/metrics.h"

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <httplib.h>
#include <netinet/in.h>
#include <prometheus/summary.h>
#include <prometheus/text_serializer.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <limits>
#include <memory>
#include <string>
#include <thread>
#include <tuple>
#include <utility>

#include "core/temp_dir.h"
#include "monitor/bad_clients_testing.h"
#include "monitor/metrics_server.h"
#include "monitor/test_shell.h"

namespace spot::monitor {
namespace {

namespace pm = prometheus;

constexpr double kInf = std::numeric_limits<double>::infinity();
constexpr char kPromtool[] = "/usr/bin/promtool";

// Runs `command` with /bin/sh; returns its exit code (-1 when it did not exit)
// and what it wrote to stdout and stderr.
using testing::RunShell;

// `promtool check metrics` on `text`: its exit code and output.
std::pair<int, std::string> Promtool(const std::string& text) {
  TempDir dir = TempDir::Create("spot_metrics_test").value();
  std::string path = (dir.path() / "metrics.txt").string();
  std::ofstream(path, std::ios::binary) << text;
  return RunShell(std::string(kPromtool) + " check metrics < '" + path + "'");
}

// A registry with each kind of metric, values that need escaping and
// non-finite gauge values.
std::shared_ptr<pm::Registry> SmallRegistry() {
  auto r = std::make_shared<pm::Registry>();
  auto& requests =
      AddCounter(*r, "spot_test_requests_total", "Requests with a back\\slash\nand a newline");
  requests.Add({{"path", "a\\b\"c\nd"}}).Increment(3);
  requests.Add({{"path", "plain"}}).Increment(0.5);
  auto& depth = AddGauge(*r, "spot_test_queue_depth", "Jobs waiting");
  depth.Add({{"kind", "nan"}}).Set(std::numeric_limits<double>::quiet_NaN());
  depth.Add({{"kind", "inf"}}).Set(kInf);
  depth.Add({{"kind", "neg"}}).Set(-kInf);
  depth.Add({{"kind", "plain"}}).Set(0.25);
  auto& step = AddHistogram(*r, "spot_test_step_seconds", "Step time");
  pm::Histogram& h = step.Add({}, pm::Histogram::BucketBoundaries{0.1, 1, 10});
  for (double v : {0.25, 0.5, 0.5, 20.0}) h.Observe(v);
  return r;
}

constexpr char kSmallGolden[] =
    R"(# HELP spot_test_requests_total Requests with a back\\slash\nand a newline
# TYPE spot_test_requests_total counter
spot_test_requests_total{path="a\\b\"c\nd"} 3
spot_test_requests_total{path="plain"} 0.5
# HELP spot_test_queue_depth Jobs waiting
# TYPE spot_test_queue_depth gauge
spot_test_queue_depth{kind="inf"} +Inf
spot_test_queue_depth{kind="nan"} NaN
spot_test_queue_depth{kind="neg"} -Inf
spot_test_queue_depth{kind="plain"} 0.25
# HELP spot_test_step_seconds Step time
# TYPE spot_test_step_seconds histogram
spot_test_step_seconds_bucket{le="0.1"} 0
spot_test_step_seconds_bucket{le="1"} 3
spot_test_step_seconds_bucket{le="10"} 3
spot_test_step_seconds_bucket{le="+Inf"} 4
spot_test_step_seconds_sum 21.25
spot_test_step_seconds_count 4
)";

TEST(MetricsExposeTest, GoldenText) { EXPECT_EQ(ExposeText(*SmallRegistry()), kSmallGolden); }

// Families as other collectables may build them: one without series, a
// histogram without the +Inf bucket, an untyped one with a timestamp.
std::vector<pm::MetricFamily> HandBuiltFamilies() {
  pm::MetricFamily empty{"spot_empty", "No series yet", pm::MetricType::Gauge, {}};
  pm::MetricFamily hist{"spot_hist_seconds", "h", pm::MetricType::Histogram, {}};
  pm::ClientMetric m;
  m.label = {{"job_id", "j"}};
  m.histogram.sample_count = 5;
  m.histogram.sample_sum = 0.1 + 0.2;         // needs 17 digits to round-trip
  m.histogram.bucket = {{2, 0.5}, {4, 1e6}};  // no +Inf bucket: the serializer adds one
  hist.metric.push_back(m);
  pm::MetricFamily untyped{"spot_u", "u", pm::MetricType::Untyped, {}};
  pm::ClientMetric u;
  u.untyped.value = -1.5e-7;
  u.timestamp_ms = 1700000000123;
  untyped.metric.push_back(u);
  return {empty, hist, untyped};
}

TEST(MetricsExposeTest, HandBuiltFamilies) {
  EXPECT_EQ(ExposeText(HandBuiltFamilies()),
            "# HELP spot_empty No series yet\n"
            "# TYPE spot_empty gauge\n"
            "# HELP spot_hist_seconds h\n"
            "# TYPE spot_hist_seconds histogram\n"
            "spot_hist_seconds_bucket{job_id=\"j\",le=\"0.5\"} 2\n"
            "spot_hist_seconds_bucket{job_id=\"j\",le=\"1000000\"} 4\n"
            "spot_hist_seconds_bucket{job_id=\"j\",le=\"+Inf\"} 5\n"
            "spot_hist_seconds_sum{job_id=\"j\"} 0.30000000000000004\n"
            "spot_hist_seconds_count{job_id=\"j\"} 5\n"
            "# HELP spot_u u\n"
            "# TYPE spot_u untyped\n"
            "spot_u -1.5e-07 1700000000123\n");
}

TEST(MetricsExposeTest, ExponentialBuckets) {
  EXPECT_EQ(ExponentialBuckets(0.005, 2, 4), (std::vector<double>{0.005, 0.01, 0.02, 0.04}));
  EXPECT_EQ(ExponentialBuckets(1, 10, 1), std::vector<double>{1});
}

TEST(MetricsPromtoolTest, AcceptsOurExposition) {
  auto r = SmallRegistry();
  auto& labeled = AddGauge(*r, "spot_test_constant_labeled_bytes", "Bytes \\ with \"quotes\"",
                           {{"job_id", "job \"1\"\n"}});
  labeled.Add({{"worker_id", "w\\0"}}).Set(1e300);
  AddCounter(*r, "spot_test_unused_total", "A family with no series");
  pm::BuildSummary()
      .Name("spot_test_latency_seconds")
      .Help("A summary")
      .Register(*r)
      .Add({}, pm::Summary::Quantiles{{0.5, 0.05}, {0.99, 0.001}})
      .Observe(0.3);
  std::string text = ExposeText(*r);
  ASSERT_NE(text.find("summary"), std::string::npos) << text;
  auto [code, output] = Promtool(text);
  EXPECT_EQ(code, 0) << output << "\n--- input:\n" << text;
  EXPECT_EQ(output, "") << text;

  text = ExposeText(HandBuiltFamilies());
  std::tie(code, output) = Promtool(text);
  EXPECT_EQ(code, 0) << output << "\n--- input:\n" << text;
  EXPECT_EQ(output, "") << text;
}

// Why ExposeText exists: prometheus-cpp 1.0.1's serializer leaves a backslash
// in HELP unescaped, and Prometheus rejects the result.
TEST(MetricsPromtoolTest, RejectsPrometheusCppSerializerOnBackslashHelp) {
  pm::Registry r;
  AddCounter(r, "spot_test_paths_total", "Paths like C:\\dir").Add({}).Increment();
  std::string theirs = pm::TextSerializer().Serialize(r.Collect());
  auto [code, output] = Promtool(theirs);
  EXPECT_NE(code, 0) << theirs;
  EXPECT_NE(output.find("escape"), std::string::npos) << output;
  auto [our_code, our_output] = Promtool(ExposeText(r));
  EXPECT_EQ(our_code, 0) << our_output;
}

TEST(MetricsParseTest, RoundTripsExposition) {
  auto parsed = ParseText(ExposeText(*SmallRegistry()));
  ASSERT_TRUE(parsed.ok()) << parsed.status().ToString();
  EXPECT_EQ(parsed->types.at("spot_test_requests_total"), "counter");
  EXPECT_EQ(parsed->types.at("spot_test_queue_depth"), "gauge");
  EXPECT_EQ(parsed->types.at("spot_test_step_seconds"), "histogram");
  EXPECT_EQ(parsed->help.at("spot_test_requests_total"),
            "Requests with a back\\slash\nand a newline");
  EXPECT_EQ(parsed->Value("spot_test_requests_total", {{"path", "a\\b\"c\nd"}}), 3);
  EXPECT_EQ(parsed->Value("spot_test_requests_total", {{"path", "plain"}}), 0.5);
  EXPECT_EQ(parsed->Sum("spot_test_requests_total"), 3.5);
  EXPECT_TRUE(std::isnan(*parsed->Value("spot_test_queue_depth", {{"kind", "nan"}})));
  EXPECT_EQ(parsed->Value("spot_test_queue_depth", {{"kind", "inf"}}), kInf);
  EXPECT_EQ(parsed->Value("spot_test_queue_depth", {{"kind", "neg"}}), -kInf);
  EXPECT_EQ(parsed->Value("spot_test_step_seconds_bucket", {{"le", "1"}}), 3);
  EXPECT_EQ(parsed->Value("spot_test_step_seconds_bucket", {{"le", "+Inf"}}),
            parsed->Value("spot_test_step_seconds_count"));
  EXPECT_EQ(parsed->Value("spot_test_step_seconds_sum"), 21.25);
  EXPECT_EQ(parsed->Value("spot_test_queue_depth", {{"kind", "absent"}}), std::nullopt);
  EXPECT_EQ(parsed->Sum("spot_nothing"), 0);
  EXPECT_EQ(parsed->samples.size(), 12u);
}

TEST(MetricsParseTest, ReadsOtherClientsText) {
  auto parsed = ParseText(
      "# A free comment\n"
      "# Not a HELP line\n"
      "\n"
      "# TYPE go_gc untyped\n"
      "go_gc{ a = \"1\" , b=\"x y\", } +Inf 1700000000000\r\n"
      "  go_gc{a=\"2\"} -1.5E3\n"
      "go_gc{} Nan -5\n"
      "process_cpu 7\n");
  ASSERT_TRUE(parsed.ok()) << parsed.status().ToString();
  ASSERT_EQ(parsed->samples.size(), 4u);
  const MetricSample& first = parsed->samples[0];
  EXPECT_EQ(first.labels, (std::map<std::string, std::string>{{"a", "1"}, {"b", "x y"}}));
  EXPECT_EQ(first.value, kInf);
  EXPECT_EQ(first.timestamp_ms, 1700000000000);
  EXPECT_EQ(parsed->Value("go_gc", {{"a", "2"}}), -1500);
  EXPECT_TRUE(std::isnan(parsed->samples[2].value));
  EXPECT_EQ(parsed->samples[2].timestamp_ms, -5);
  EXPECT_EQ(parsed->samples[3].timestamp_ms, std::nullopt);
  EXPECT_EQ(parsed->types.at("go_gc"), "untyped");
}

TEST(MetricsParseTest, ErrorsNameTheLine) {
  struct Case {
    std::string text, want;
  };
  const Case cases[] = {
      {"spot_x{a=\"b\" 1\n", "line 1: expected ',' or '}'"},
      {"spot_x 1\n\nspot_y{a=\"\\q\"} 1\n", "line 3: invalid escape sequence"},
      {"# TYPE spot_x meter\n", "line 1: unknown metric type"},
      {"spot_x 1\nspot_x abc\n", "line 2: bad value \"abc\""},
      {"spot_x 1 12.5\n", "line 1: bad timestamp"},
      {"spot_x\n", "line 1: spot_x has no value"},
      {"spot_x{a=\"1\",a=\"2\"} 1\n", "line 1: label \"a\" appears twice"},
      {"spot_x{a=\"1} 1\n", "line 1: label value has no closing quote"},
      {"{a=\"1\"} 1\n", "line 1: expected a metric name"},
      {"# TYPE spot_x gauge\n# TYPE spot_x counter\n", "line 2: second TYPE line"},
      {"spot_x 1 2 3\n", "line 1: unexpected text"},
  };
  for (const Case& c : cases) {
    auto parsed = ParseText(c.text);
    ASSERT_FALSE(parsed.ok()) << c.text;
    EXPECT_EQ(parsed.status().code(), StatusCode::kInvalidArgument);
    EXPECT_NE(parsed.status().message().find(c.want), std::string::npos)
        << parsed.status().message() << " (want " << c.want << ")";
  }
}

TEST(MetricsDeathTest, NamingRulesAbort) {
  pm::Registry r;
  EXPECT_DEATH(AddCounter(r, "spot_requests", "h"), "counter's name must end in \"_total\"");
  EXPECT_DEATH(AddGauge(r, "spot_requests_total", "h"), "only a counter's name may end in");
  EXPECT_DEATH(AddHistogram(r, "spot_wait_total", "h"), "only a counter's name may end in");
  EXPECT_DEATH(AddGauge(r, "requests", "h"), "must start with \"spot_\"");
  EXPECT_DEATH(AddGauge(r, "spot_bad-name", "h"), "must match");
  EXPECT_DEATH(AddHistogram(r, "spot_wait_count", "h"), "must not end in _bucket, _sum");
  EXPECT_DEATH(AddGauge(r, "spot_g", "h", {{"le", "1"}}), "\"le\" is reserved");
  EXPECT_DEATH(AddGauge(r, "spot_g", "h", {{"__x", "1"}}), "reserved \"__\"");
  EXPECT_DEATH(AddGauge(r, "spot_g", "h", {{"1x", "1"}}), "label name \"1x\" must match");
  EXPECT_DEATH(ExponentialBuckets(0, 2, 3), "need start > 0");
  AddGauge(r, "spot_g_total_free", "a gauge");
  EXPECT_DEATH(AddHistogram(r, "spot_g_total_free", "h"), "prometheus-cpp refused it");
}

TEST(MetricsExposeTest, SameNameReturnsTheSameFamily) {
  pm::Registry r;
  auto& a = AddCounter(r, "spot_x_total", "x");
  auto& b = AddCounter(r, "spot_x_total", "x");
  EXPECT_EQ(&a, &b);
}

// ---- MetricsServer, over real HTTP on loopback ----

TEST(MetricsServerTest, ServesMetrics) {
  auto registry = SmallRegistry();
  pm::Gauge& scrapes = AddGauge(*registry, "spot_test_scrapes", "Scrapes so far").Add({});
  std::atomic<int> calls{0};
  MetricsServerOptions options;
  options.before_collect = [&] { scrapes.Set(++calls); };
  auto server = MetricsServer::Start(registry, options);
  ASSERT_TRUE(server.ok()) << server.status().ToString();
  EXPECT_GT((*server)->port(), 0);
  EXPECT_EQ((*server)->url(), "http://127.0.0.1:" + std::to_string((*server)->port()));

  httplib::Client client((*server)->url());
  client.set_connection_timeout(5);
  client.set_read_timeout(5);
  for (int i = 1; i <= 2; ++i) {
    auto res = client.Get("/metrics");
    ASSERT_TRUE(res) << httplib::to_string(res.error());
    EXPECT_EQ(res->status, 200);
    EXPECT_EQ(res->get_header_value("Content-Type"), kTextContentType);
    EXPECT_EQ(calls.load(), i);
    EXPECT_EQ(res->body, ExposeText(*registry));
    EXPECT_NE(res->body.find("spot_test_scrapes " + std::to_string(i) + "\n"), std::string::npos);
  }
  auto head = client.Head("/metrics");
  ASSERT_TRUE(head);
  EXPECT_EQ(head->status, 200);
  EXPECT_EQ(head->get_header_value("Content-Type"), kTextContentType);
  EXPECT_EQ(head->body, "");

  auto root = client.Get("/");
  ASSERT_TRUE(root);
  EXPECT_EQ(root->status, 200);
  EXPECT_NE(root->body.find("/metrics"), std::string::npos);

  auto missing = client.Get("/metrics/extra");
  ASSERT_TRUE(missing);
  EXPECT_EQ(missing->status, 404);

  auto post = client.Post("/metrics", "x", "text/plain");
  ASSERT_TRUE(post);
  EXPECT_EQ(post->status, 405);
  EXPECT_EQ(post->get_header_value("Allow"), "GET, HEAD");
  auto del = client.Delete("/metrics");
  ASSERT_TRUE(del);
  EXPECT_EQ(del->status, 405);
  EXPECT_EQ(calls.load(), 3);  // the two GETs and the HEAD; nothing else collects
}

// Issue 20: a worker's /metrics had 3 threads; three slow-loris clients (a
// header byte a second, never done) took them all and scrapes timed out.
TEST(MetricsServerTest, ScrapesAnswerWhileSlowAndIdleClientsHoldConnections) {
  auto server = MetricsServer::Start(SmallRegistry(), {});
  ASSERT_TRUE(server.ok()) << server.status().ToString();
  auto scrape = [&](const char* when) {
    for (int i = 0; i < 3; ++i) {
      httplib::Client client((*server)->url());
      client.set_connection_timeout(5);
      client.set_read_timeout(5);
      auto res = client.Get("/metrics");
      ASSERT_TRUE(res) << when << ", scrape " << i << ": " << httplib::to_string(res.error());
      EXPECT_EQ(res->status, 200);
    }
  };
  spot::testing::BadClients bad((*server)->port());
  ASSERT_TRUE(bad.OpenSlow(10));
  const auto fed = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (bad.slow_bytes_sent() < 20 && std::chrono::steady_clock::now() < fed) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  scrape("with 10 slow clients");
  ASSERT_TRUE(bad.OpenIdle(50));
  scrape("with 10 slow and 50 idle clients");
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  while (bad.slow_closed() < 10 && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  EXPECT_EQ(bad.slow_closed(), 10) << "slow clients still open after 30 s";
}

TEST(MetricsServerTest, RefusesNonLoopbackHostsAndBadArguments) {
  auto registry = std::make_shared<pm::Registry>();
  for (const char* host : {"0.0.0.0", "10.1.2.3", "example.com", "::"}) {
    MetricsServerOptions options;
    options.host = host;
    auto server = MetricsServer::Start(registry, options);
    ASSERT_FALSE(server.ok()) << host;
    EXPECT_EQ(server.status().code(), StatusCode::kInvalidArgument);
    EXPECT_NE(server.status().message().find("loopback"), std::string::npos);
  }
  MetricsServerOptions bad_port;
  bad_port.port = 70000;
  EXPECT_EQ(MetricsServer::Start(registry, bad_port).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(MetricsServer::Start(nullptr, {}).status().code(), StatusCode::kInvalidArgument);
  MetricsServerOptions other_loopback;
  other_loopback.host = "127.0.0.2";
  auto ok = MetricsServer::Start(registry, other_loopback);
  ASSERT_TRUE(ok.ok()) << ok.status().ToString();
  EXPECT_EQ((*ok)->url(), "http://127.0.0.2:" + std::to_string((*ok)->port()));
}

// A worker scraped from another machine listens on its one address toward
// the controller, never on all of them.
TEST(MetricsServerTest, ReachableFromTheNetworkOnOneNamedAddressOnly) {
  auto registry = std::make_shared<pm::Registry>();
  for (const char* host : {"0.0.0.0", "::", ""}) {
    MetricsServerOptions options{.host = host, .reachable_from_network = true};
    auto server = MetricsServer::Start(registry, options);
    ASSERT_FALSE(server.ok()) << host;
    EXPECT_EQ(server.status().code(), StatusCode::kInvalidArgument);
    EXPECT_NE(server.status().message().find("every address"), std::string::npos);
  }
  // A named address is taken (127.0.0.3 stands for the machine's address).
  auto ok = MetricsServer::Start(registry, {.host = "127.0.0.3", .reachable_from_network = true});
  ASSERT_TRUE(ok.ok()) << ok.status().ToString();
  EXPECT_EQ((*ok)->url(), "http://127.0.0.3:" + std::to_string((*ok)->port()));
}

TEST(MetricsServerTest, TakenPortIsAnError) {
  auto registry = std::make_shared<pm::Registry>();
  auto first = MetricsServer::Start(registry, {});
  ASSERT_TRUE(first.ok()) << first.status().ToString();
  const int port = (*first)->port();
  // Another metrics server (httplib's default SO_REUSEPORT would let it share the port).
  MetricsServerOptions same;
  same.port = port;
  auto second = MetricsServer::Start(registry, same);
  ASSERT_FALSE(second.ok());
  EXPECT_EQ(second.status().code(), StatusCode::kUnavailable);
  EXPECT_NE(second.status().message().find("127.0.0.1:" + std::to_string(port)), std::string::npos)
      << second.status().message();
  // A port some other program listens on.
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  ASSERT_GE(fd, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof(addr);
  ASSERT_EQ(::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0);
  ASSERT_EQ(::listen(fd, 1), 0);
  ASSERT_EQ(::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len), 0);
  MetricsServerOptions theirs;
  theirs.port = ntohs(addr.sin_port);
  auto third = MetricsServer::Start(registry, theirs);
  ::close(fd);
  ASSERT_FALSE(third.ok());
  EXPECT_NE(third.status().message().find(std::to_string(theirs.port)), std::string::npos);
}

}  // namespace
}  // namespace spot::monitor
