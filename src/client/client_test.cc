// The C++ client (include/spottrain/client.h) against a real HTTP server on
// loopback, a raised notice signal and real files.
#include "spottrain/client.h"

#include <gtest/gtest.h>
#include <httplib.h>
#include <signal.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <mutex>
#include <nlohmann/json.hpp>
#include <thread>
#include <vector>

namespace spottrain {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

class TempDir {
 public:
  TempDir() {
    std::string pattern = (fs::temp_directory_path() / "spot_client_test.XXXXXX").string();
    path_ = ::mkdtemp(pattern.data());
  }
  ~TempDir() { fs::remove_all(path_); }
  std::string operator/(const std::string& name) const { return (path_ / name).string(); }
  const fs::path& path() const { return path_; }

 private:
  fs::path path_;
};

void WriteText(const std::string& path, const std::string& text) {
  std::ofstream(path, std::ios::binary) << text;
}

std::string ReadText(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

std::optional<Env> EnvFrom(const std::map<std::string, std::string>& vars, std::string* error) {
  return ReadEnv(error, [&](const char* name) -> const char* {
    auto it = vars.find(name);
    return it == vars.end() ? nullptr : it->second.c_str();
  });
}

TEST(ReadEnvTest, ByHandIsRankZeroOfOneWithoutController) {
  std::string error;
  auto env = EnvFrom({}, &error);
  ASSERT_TRUE(env) << error;
  EXPECT_EQ(env->rank, 0);
  EXPECT_EQ(env->world_size, 1);
  EXPECT_EQ(env->notice_signal, "SIGTERM");
  EXPECT_TRUE(env->controller_url.empty());
  Session session(*env, {.checkpoint_dir = "", .install_handler = false});
  EXPECT_EQ(session.CheckpointDir(), "checkpoints");
  EXPECT_EQ(session.Report({.step = 1}), ReportOutcome::kSkipped);
}

TEST(ReadEnvTest, ReadsTheVariables) {
  std::string error;
  auto env = EnvFrom({{"RANK", "3"},
                      {"WORLD_SIZE", "4"},
                      {"LOCAL_RANK", "1"},
                      {"LOCAL_WORLD_SIZE", "2"},
                      {"NODE_RANK", "1"},
                      {"MASTER_ADDR", "10.0.0.1"},
                      {"MASTER_PORT", "29500"},
                      {"SPOT_JOB", "j"},
                      {"SPOT_INSTANCE", "i-1"},
                      {"SPOT_CHECKPOINT_DIR", "/d"},
                      {"SPOT_NOTICE_FILE", "/n"},
                      {"SPOT_CONTROLLER_URL", "http://127.0.0.1:1"},
                      {"SPOT_TOKEN_FILE", "/t"},
                      {"SPOT_NOTICE_SIGNAL", "SIGUSR2"}},
                     &error);
  ASSERT_TRUE(env) << error;
  EXPECT_EQ(env->rank, 3);
  EXPECT_EQ(env->world_size, 4);
  EXPECT_EQ(env->local_rank, 1);
  EXPECT_EQ(env->local_world_size, 2);
  EXPECT_EQ(env->node_rank, 1);
  EXPECT_EQ(env->master_addr, "10.0.0.1");
  EXPECT_EQ(env->master_port, 29500);
  EXPECT_EQ(env->job, "j");
  EXPECT_EQ(env->instance, "i-1");
  EXPECT_EQ(env->checkpoint_dir, "/d");
  EXPECT_EQ(env->notice_file, "/n");
  EXPECT_EQ(env->controller_url, "http://127.0.0.1:1");
  EXPECT_EQ(env->token_file, "/t");
  EXPECT_EQ(env->notice_signal, "SIGUSR2");
  Session session(*env, {.checkpoint_dir = "mine", .install_handler = false});
  EXPECT_EQ(session.CheckpointDir(), "/d");  // the job's durable directory wins
}

TEST(ReadEnvTest, BadValuesNameTheVariable) {
  const std::vector<std::pair<std::map<std::string, std::string>, std::string>> cases = {
      {{{"RANK", "x"}}, "RANK: expected an integer >= 0, got 'x'"},
      {{{"WORLD_SIZE", "0"}}, "WORLD_SIZE: expected an integer >= 1"},
      {{{"RANK", "2"}, {"WORLD_SIZE", "2"}}, "RANK: 2 is not below WORLD_SIZE 2"},
      {{{"SPOT_NOTICE_SIGNAL", "SIGKILL"}}, "SPOT_NOTICE_SIGNAL: must be one of"},
      {{{"SPOT_CONTROLLER_URL", "127.0.0.1:8"}, {"SPOT_JOB", "j"}}, "SPOT_CONTROLLER_URL"},
      {{{"SPOT_CONTROLLER_URL", "http://127.0.0.1:8"}}, "SPOT_JOB: must be set"},
  };
  for (const auto& [vars, words] : cases) {
    std::string error;
    EXPECT_FALSE(EnvFrom(vars, &error));
    EXPECT_NE(error.find(words), std::string::npos) << error;
  }
}

TEST(NoticeTest, RaisedSignalSetsShouldStopAndTheOldHandlerComesBack) {
  struct sigaction before {};
  sigaction(SIGUSR1, nullptr, &before);
  Env env;
  env.notice_signal = "SIGUSR1";
  {
    Session session(env);
    EXPECT_FALSE(session.ShouldStop());
    ASSERT_EQ(::raise(SIGUSR1), 0);  // handled synchronously in this thread
    EXPECT_TRUE(session.ShouldStop());
    EXPECT_FALSE(session.Notice());  // a signal without a file
    EXPECT_FALSE(session.DeadlineS());
  }
  struct sigaction after {};
  sigaction(SIGUSR1, nullptr, &after);
  EXPECT_EQ(after.sa_handler, before.sa_handler);
}

TEST(NoticeTest, RaisedSigtermSetsShouldStop) {
  Session session(Env{});
  EXPECT_FALSE(session.ShouldStop());
  ASSERT_EQ(::raise(SIGTERM), 0);
  EXPECT_TRUE(session.ShouldStop());
}

TEST(NoticeTest, NoticeFileSetsShouldStopWithNoticeAndDeadline) {
  TempDir dir;
  Env env;
  env.notice_file = dir / "notice.json";
  Session session(env, {.install_handler = false});
  EXPECT_FALSE(session.ShouldStop());
  EXPECT_FALSE(session.Notice());
  const double now =
      std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
  WriteText(env.notice_file, json{{"notice_unix_s", now},
                                  {"deadline_unix_s", now + 120},
                                  {"action", "terminate"},
                                  {"source", "aws"}}
                                 .dump());
  EXPECT_TRUE(session.ShouldStop());
  std::string error;
  auto notice = session.Notice(&error);
  ASSERT_TRUE(notice) << error;
  EXPECT_EQ(*notice->notice_unix_s, now);
  EXPECT_EQ(*notice->deadline_unix_s, now + 120);
  EXPECT_EQ(notice->action, "terminate");
  EXPECT_EQ(notice->source, "aws");
  auto left = session.DeadlineS();
  ASSERT_TRUE(left);
  EXPECT_GT(*left, 0);
  EXPECT_LE(*left, 120);
}

TEST(NoticeTest, MalformedNoticeFileStopsAndSaysWhy) {
  TempDir dir;
  Env env;
  env.notice_file = dir / "notice.json";
  Session session(env, {.install_handler = false});
  WriteText(env.notice_file, "[1, 2");
  EXPECT_TRUE(session.ShouldStop());
  std::string error;
  EXPECT_FALSE(session.Notice(&error));
  EXPECT_EQ(error, "notice file " + env.notice_file + ": not JSON");
  WriteText(env.notice_file, R"({"deadline_unix_s": "soon"})");
  EXPECT_FALSE(session.Notice(&error));
  EXPECT_EQ(error, "notice file " + env.notice_file + ": field deadline_unix_s: expected a number");
}

// A stand-in for the controller's report endpoint on 127.0.0.1:0.
class FakeController {
 public:
  explicit FakeController(int status = 200, std::string reply = R"({"ok":true})") {
    server_.Post(".*",  // any path: the test checks the raw target
                 [this, status, reply](const httplib::Request& req, httplib::Response& res) {
                   std::lock_guard<std::mutex> lock(mu_);
                   requests_.push_back(req);
                   res.status = status;
                   res.set_content(reply, "application/json");
                 });
    port_ = server_.bind_to_any_port("127.0.0.1");
    thread_ = std::thread([this] { server_.listen_after_bind(); });
    // stop() before the loop runs would be lost: wait for it.
    while (!server_.is_running()) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  ~FakeController() {
    server_.stop();
    thread_.join();
  }
  std::string url() const { return "http://127.0.0.1:" + std::to_string(port_); }
  std::vector<httplib::Request> requests() {
    std::lock_guard<std::mutex> lock(mu_);
    return requests_;
  }

 private:
  httplib::Server server_;
  int port_ = 0;
  std::thread thread_;
  std::mutex mu_;
  std::vector<httplib::Request> requests_;
};

class ReportTest : public ::testing::Test {
 protected:
  Env EnvFor(const std::string& url, int rank = 0) {
    WriteText(dir_ / "token", "s3cret-token\n");
    Env env;
    env.rank = rank;
    env.world_size = 2;
    env.job = "exp/1";
    env.instance = "i-7";
    env.controller_url = url;
    env.token_file = dir_ / "token";
    return env;
  }
  TempDir dir_;
};

TEST_F(ReportTest, PostsTheBodyWithTheToken) {
  FakeController controller;
  Session session(EnvFor(controller.url()), {.install_handler = false});
  std::string error;
  EXPECT_EQ(session.Report({.step = 12,
                            .loss = 0.5,
                            .samples = 64,
                            .epoch = 1,
                            .total_steps = 100,
                            .metrics = {{"lr", 0.001}, {"bad", std::nan("")}},
                            .done = true},
                           &error),
            ReportOutcome::kAccepted)
      << error;
  auto requests = controller.requests();
  ASSERT_EQ(requests.size(), 1u);
  EXPECT_EQ(requests[0].target, "/api/v1/jobs/exp%2F1/report");  // the job, one segment
  EXPECT_EQ(requests[0].get_header_value("Authorization"), "Bearer s3cret-token");
  EXPECT_EQ(requests[0].get_header_value("Content-Type"), "application/json");
  EXPECT_EQ(json::parse(requests[0].body), (json{{"instance", "i-7"},
                                                 {"rank", 0},
                                                 {"step", 12},
                                                 {"total_steps", 100},
                                                 {"epoch", 1},
                                                 {"loss", 0.5},
                                                 {"samples", 64},
                                                 {"metrics", {{"lr", 0.001}}},
                                                 {"done", true}}));
}

TEST_F(ReportTest, OnlyRankZeroReportsUnlessAllRanksDo) {
  FakeController controller;
  Session rank1(EnvFor(controller.url(), 1), {.install_handler = false});
  EXPECT_EQ(rank1.Report({.step = 1}), ReportOutcome::kSkipped);
  EXPECT_TRUE(controller.requests().empty());
  Session everyone(EnvFor(controller.url(), 1),
                   {.install_handler = false, .report_all_ranks = true});
  EXPECT_EQ(everyone.Report({.step = 1}), ReportOutcome::kAccepted);
  ASSERT_EQ(controller.requests().size(), 1u);
  EXPECT_EQ(json::parse(controller.requests()[0].body)["rank"], 1);
}

TEST_F(ReportTest, RefusalCarriesTheControllersError) {
  FakeController controller(400, R"({"error":"step: must be an integer >= 0"})");
  Session session(EnvFor(controller.url()), {.install_handler = false});
  std::string error;
  EXPECT_EQ(session.Report({.step = 1}, &error), ReportOutcome::kFailed);
  EXPECT_NE(error.find("HTTP 400: step: must be an integer >= 0"), std::string::npos) << error;
}

TEST_F(ReportTest, UnreachableControllerFailsWithoutThrowing) {
  int port = 0;
  {
    httplib::Server closed;  // bound, then closed: nobody listens there
    port = closed.bind_to_any_port("127.0.0.1");
  }
  Session session(EnvFor("http://127.0.0.1:" + std::to_string(port)),
                  {.install_handler = false, .report_timeout_s = 0.5});
  std::string error;
  EXPECT_EQ(session.Report({.step = 1}, &error), ReportOutcome::kFailed);
  EXPECT_NE(error.find("report to http://127.0.0.1:"), std::string::npos) << error;
}

TEST_F(ReportTest, MissingTokenFileIsNamed) {
  FakeController controller;
  Env env = EnvFor(controller.url());
  env.token_file = dir_ / "no-token";
  Session session(env, {.install_handler = false});
  std::string error;
  EXPECT_EQ(session.Report({.step = 1}, &error), ReportOutcome::kFailed);
  EXPECT_NE(error.find("token file " + env.token_file), std::string::npos) << error;
  EXPECT_TRUE(controller.requests().empty());
}

TEST(AtomicWriteFileTest, WritesAndReplacesLeavingNoTemporaries) {
  TempDir dir;
  const std::string path = dir / "state.bin";
  std::string error;
  ASSERT_TRUE(AtomicWriteFile(path, std::string("first\0bytes", 11), &error)) << error;
  EXPECT_EQ(ReadText(path), std::string("first\0bytes", 11));
  ASSERT_TRUE(AtomicWriteFile(path, "second", &error)) << error;
  EXPECT_EQ(ReadText(path), "second");
  std::vector<std::string> names;
  for (const auto& e : fs::directory_iterator(dir.path())) names.push_back(e.path().filename());
  EXPECT_EQ(names, std::vector<std::string>{"state.bin"});
}

TEST(AtomicWriteFileTest, MissingDirectoryIsNamed) {
  TempDir dir;
  const std::string path = dir / "absent/state.bin";
  std::string error;
  EXPECT_FALSE(AtomicWriteFile(path, "x", &error));
  EXPECT_NE(error.find(path + ".tmp-"), std::string::npos) << error;
  EXPECT_NE(error.find("No such file or directory"), std::string::npos) << error;
}

}  // namespace
}  // namespace spottrain
