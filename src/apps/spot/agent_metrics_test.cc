#include "apps/spot/agent_metrics.h"

#include <gtest/gtest.h>
#include <httplib.h>

#include <chrono>
#include <map>
#include <optional>
#include <thread>

#include "apps/spot/port_retry.h"
#include "core/net.h"
#include "core/process.h"
#include "monitor/metrics.h"

namespace spot::cli {
namespace {

// A scrape of `port`, parsed; nullopt when it failed.
std::optional<monitor::ParsedMetrics> Scrape(int port) {
  httplib::Client c("127.0.0.1", port);
  c.set_read_timeout(5, 0);
  auto r = c.Get("/metrics");
  if (!r || r->status != 200) return std::nullopt;
  auto parsed = monitor::ParseText(r->body);
  EXPECT_TRUE(parsed.ok()) << parsed.status().ToString() << r->body;
  if (!parsed.ok()) return std::nullopt;
  return std::move(parsed).value();
}

// The agent's /metrics: its ranks and restarts as set, and the CPU time of
// this process's children over its CPUs: a busy child (one CPU) over 4 CPUs
// counts a quarter of its CPU time.
TEST(AgentMetricsTest, ServesTheProgramsCpuTimeRanksAndRestarts) {
  auto port = PickFreePort();
  ASSERT_TRUE(port.ok());
  auto m = AgentMetrics::Start({.job = "j", .instance = "i-1", .port = *port, .cpus = 4});
  ASSERT_TRUE(m.ok()) << m.status().ToString();
  EXPECT_EQ((*m)->port(), *port);
  const std::map<std::string, std::string> labels = {{"job_id", "j"}, {"worker_id", "i-1"}};
  auto first = Scrape(*port);
  ASSERT_TRUE(first);
  EXPECT_EQ(first->types["spot_train_compute_seconds_total"], "counter");
  EXPECT_EQ(first->types["spot_agent_ranks_running"], "gauge");
  EXPECT_EQ(first->types["spot_agent_program_restarts_total"], "counter");
  EXPECT_FALSE(first->help["spot_agent_ranks_running"].empty());
  EXPECT_EQ(first->Value("spot_agent_ranks_running", labels).value_or(-1), 0);
  EXPECT_EQ(first->Value("spot_agent_program_restarts_total", labels).value_or(-1), 0);

  (*m)->SetRanksRunning(2);
  (*m)->CountRestart();
  auto burner = Spawn({.argv = {"/bin/sh", "-c", "while :; do :; done"}});
  ASSERT_TRUE(burner.ok());
  // Until the child has had 0.4 CPU s (0.1 counted over 4 CPUs), with a deadline.
  double compute = 0;
  const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  while (compute < 0.1 && std::chrono::steady_clock::now() < until) {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    auto s = Scrape(*port);
    ASSERT_TRUE(s);
    const double now = s->Value("spot_train_compute_seconds_total", labels).value_or(-1);
    EXPECT_GE(now, compute) << "a counter never goes backward";
    compute = now;
    EXPECT_EQ(s->Value("spot_agent_ranks_running", labels).value_or(-1), 2);
    EXPECT_EQ(s->Value("spot_agent_program_restarts_total", labels).value_or(-1), 1);
  }
  auto ended = StopProcess(*burner, 0);
  ASSERT_TRUE(ended.ok());
  ASSERT_GE(compute, 0.1) << "the busy child was not counted";
  // Reaped, its time stays counted.
  auto last = Scrape(*port);
  ASSERT_TRUE(last);
  EXPECT_GE(last->Value("spot_train_compute_seconds_total", labels).value_or(-1), compute);
}

TEST(AgentMetricsTest, BadOptionsAreRefused) {
  auto port = PickFreePort();
  ASSERT_TRUE(port.ok());
  auto m = AgentMetrics::Start({.job = "j", .instance = "i", .port = *port, .cpus = 0});
  EXPECT_EQ(m.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(m.status().message().find("cpus must be >= 1 (got 0)"), std::string::npos);
  m = AgentMetrics::Start({.job = "j", .instance = "i", .port = 0, .cpus = 1});
  EXPECT_EQ(m.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(m.status().message().find("port must be in [1, 65535] (got 0)"), std::string::npos);
  // A port already taken: Unavailable, naming it.
  auto taken = AgentMetrics::Start({.job = "j", .instance = "i", .port = *port, .cpus = 1});
  ASSERT_TRUE(taken.ok()) << taken.status().ToString();
  m = AgentMetrics::Start({.job = "j", .instance = "i", .port = *port, .cpus = 1});
  EXPECT_EQ(m.status().code(), StatusCode::kUnavailable);
  EXPECT_NE(m.status().message().find(std::to_string(*port)), std::string::npos);
}

// `spot run` picks an instance's metrics port before the instance starts, so
// another process may have bound it by then: the agent (and the worker) then
// listen on another free port, which they publish.
TEST(AgentMetricsTest, ATakenPortIsTradedForAnother) {
  auto port = PickFreePort();
  ASSERT_TRUE(port.ok());
  auto taken = AgentMetrics::Start({.job = "j", .instance = "a", .port = *port, .cpus = 1});
  ASSERT_TRUE(taken.ok()) << taken.status().ToString();
  std::vector<int> tried;
  auto other = StartOnPortOrAnother<std::unique_ptr<AgentMetrics>>(*port, [&](int p) {
    tried.push_back(p);
    return AgentMetrics::Start({.job = "j", .instance = "b", .port = p, .cpus = 1});
  });
  ASSERT_TRUE(other.ok()) << other.status().ToString();
  ASSERT_EQ(tried.size(), 2u);
  EXPECT_EQ(tried[0], *port);
  EXPECT_NE((*other)->port(), *port);
  EXPECT_EQ((*other)->port(), tried[1]);
  EXPECT_TRUE(Scrape((*other)->port()));
  // Other failures are not retried: a bad option stays an error.
  tried.clear();
  auto bad = StartOnPortOrAnother<std::unique_ptr<AgentMetrics>>(*port, [&](int p) {
    tried.push_back(p);
    return AgentMetrics::Start({.job = "j", .instance = "c", .port = p, .cpus = 0});
  });
  EXPECT_EQ(bad.status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(tried.size(), 1u);
}

}  // namespace
}  // namespace spot::cli
