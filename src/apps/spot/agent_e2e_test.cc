// End-to-end tests of `spot agent` alone (the program runner of command
// workloads, which `spot run` starts on each instance): a real agent process,
// a real `spot rendezvous` and a metadata server giving the notice, for what
// happens while no program runs yet (the setup, the wait for the gang, the
// wait for node rank 0's address). The agent under `spot run` is tested in
// command_e2e_test.cc.
#include <gtest/gtest.h>
#include <stdlib.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>

#include "apps/spot/e2e_support.h"
#include "apps/spot/elastic_e2e_support.h"
#include "apps/spot/test_process.h"
#include "cloud/metadata_server.h"
#include "core/clock.h"
#include "core/file_io.h"
#include "dist/etcd_kv_store.h"
#include "dist/etcd_test_server.h"
#include "dist/rendezvous.h"

namespace spot::testing {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

class AgentTest : public E2eTest {
 protected:
  void SetUp() override {
    E2eTest::SetUp();
    store_ = std::make_unique<ChildProcess>(
        std::vector<std::string>{SPOT_BIN, "rendezvous", "--port", "0"}, (dir_ / "store").string());
    url_ = StartRendezvous(*store_, dir_ / "store.out");
    ASSERT_FALSE(url_.empty()) << "spot rendezvous did not start";
    auto md = cloud::MetadataServer::Start({.instance_id = "i-0agent"});
    ASSERT_TRUE(md.ok()) << md.status().ToString();
    md_ = std::move(md).value();
  }

  // `spot agent` of job `job` (a gang of min_nodes to 2 nodes) as instance
  // i-0agent, watching md_, at the rendezvous `url` ("": the fixture's); its
  // program would take a minute.
  std::unique_ptr<ChildProcess> StartAgent(const std::string& job, const std::string& setup,
                                           int min_nodes, const std::string& url = "") {
    const fs::path spec = dir_ / (job + ".agent.json");
    std::ofstream(spec) << json{
        {"job", job},
        {"run", "touch program-ran; sleep 60"},
        {"setup", setup},
        {"workdir", dir_.string()},
        {"checkpoint_dir", (dir_ / "ckpt").string()},
        {"min_nodes", min_nodes},
        {"max_nodes", 2}}.dump();
    ::setenv("AWS_EC2_METADATA_SERVICE_ENDPOINT", md_->endpoint().c_str(), 1);
    auto agent = std::make_unique<ChildProcess>(
        std::vector<std::string>{SPOT_BIN, "agent", spec.string(), "--rendezvous",
                                 url.empty() ? url_ : url, "--id", "i-0agent", "--local-dir",
                                 (dir_ / "local").string(), "--watch", "aws", "--notice-poll",
                                 "0.1"},
        (dir_ / "agent").string());
    ::unsetenv("AWS_EC2_METADATA_SERVICE_ENDPOINT");
    return agent;
  }
  // Waits (at most 20 s) until the agent watches its notices, and `file`
  // (in dir_) exists where one is named.
  void WaitUntilWatching(ChildProcess& agent, const std::string& file = "") {
    for (int i = 0; i < 2000 && agent.Running(); ++i) {
      if (md_->requests() >= 3 && (file.empty() || fs::exists(dir_ / file))) return;
      ::usleep(10000);
    }
  }
  // What the agent logged so far.
  std::string AgentLog() const {
    auto log = ReadFile((dir_ / "agent.err").string());
    return log.ok() ? *log : "";
  }
  // Whether the agent's log says `text` within `seconds`.
  bool LogSays(ChildProcess& agent, const std::string& text, double seconds) {
    for (int i = 0; i < seconds * 100 && agent.Running(); ++i) {
      if (AgentLog().find(text) != std::string::npos) return true;
      ::usleep(10000);
    }
    return false;
  }
  void Notice() {
    md_->SetNotice({.action = "terminate", .time_unix_s = RealClock()->NowUnixS() + 5});
  }

  std::unique_ptr<ChildProcess> store_;
  std::string url_;
  std::unique_ptr<cloud::MetadataServer> md_;
};

// A notice that comes while no program runs ends the agent at once: there is
// nothing to save, and an agent still waiting for its gang when the machine
// is reclaimed was counted as a program killed there. Here the agent waits in
// the rendezvous for a second node that never comes.
TEST_F(AgentTest, ANoticeWhileWaitingForTheGangEndsTheAgent) {
  auto agent = StartAgent("waits", "", 2);
  WaitUntilWatching(*agent);
  Notice();
  ProcessResult r = agent->Wait(30);
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.err.find("while waiting for the gang"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("leaving (no program is running)"), std::string::npos) << r.err;
  EXPECT_FALSE(fs::exists(dir_ / "program-ran"));
}

// The same during a setup that would take a minute: the setup is killed.
TEST_F(AgentTest, ANoticeDuringTheSetupEndsItAndTheAgent) {
  auto agent = StartAgent("sets-up", "touch setup-began; sleep 60", 1);
  WaitUntilWatching(*agent, "setup-began");
  Notice();
  ProcessResult r = agent->Wait(30);
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.err.find("during setup"), std::string::npos) << r.err;
  EXPECT_TRUE(fs::exists(dir_ / "setup-began"));
  EXPECT_FALSE(fs::exists(dir_ / "program-ran"));
}

// Node rank 0 of a generation leaves before it publishes its address (as an
// agent noticed right after the rendezvous does): the other node goes back to
// the rendezvous at once instead of waiting a minute for the address. Rank 0
// is this test, joining the agents' rendezvous (on etcd, whose store the test
// reaches without LibTorch) itself.
TEST_F(AgentTest, ARankZeroThatLeavesBeforeStartingSendsTheOthersBackToTheRendezvous) {
  auto etcd = dist::EtcdTestServer::Start();
  if (!etcd.ok()) GTEST_SKIP() << "SKIPPED: no etcd: " << etcd.status().message();
  dist::EtcdOptions eo;
  eo.endpoint = (*etcd)->endpoint();
  eo.key_prefix = "/spot/gang/";  // the agent's: its job's
  auto kv = dist::NewEtcdKvStore(eo);
  ASSERT_TRUE(kv.ok()) << kv.status().ToString();
  dist::Rendezvous first(kv->get(), {.job = "gang/agent", .min_workers = 2, .max_workers = 2},
                         "i-0000first");
  Result<dist::Generation> g = InternalError("not joined");
  std::thread joining([&] { g = first.Join({.id = "i-0000first"}); });
  // Its id sorts before the agent's (i-0agent), so rank 0 (newcomers in the
  // order of their ids).
  for (int i = 0; i < 500; ++i) {
    auto state = (*kv)->Get("gang/agent/rdzv/state");
    if (state.ok() && state->has_value() && (*state)->find("i-0000first") != std::string::npos)
      break;
    ::usleep(10000);
  }
  auto agent =
      StartAgent("gang", "", 2, "etcd://" + eo.endpoint.substr(std::string("http://").size()));
  joining.join();
  ASSERT_TRUE(g.ok()) << g.status().ToString();
  ASSERT_EQ(g->rank, 0);
  ASSERT_TRUE(first.Leave().ok());
  EXPECT_TRUE(LogSays(*agent, "before node rank 0 published its address; joining again", 20))
      << AgentLog();
  Notice();
  ProcessResult r = agent->Wait(30);
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_FALSE(fs::exists(dir_ / "program-ran"));
}

}  // namespace
}  // namespace spot::testing
