#include "core/logging.h"

#include <gtest/gtest.h>
#include <spdlog/formatter.h>
#include <spdlog/spdlog.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <thread>

#include "core/temp_dir.h"

namespace spot {
namespace {

using nlohmann::json;

// 2026-12-03T07:00:00.123Z, worked out by hand: 20,790 days after 1970-01-01.
constexpr int64_t kDec3 = 1796281200123;

// One line as the JSON formatter writes it.
std::string Format(const std::string& message,
                   spdlog::level::level_enum level = spdlog::level::info, int64_t unix_ms = kDec3) {
  auto formatter = NewJsonLogFormatter();
  spdlog::details::log_msg msg(spdlog::log_clock::time_point(std::chrono::milliseconds(unix_ms)),
                               spdlog::source_loc{}, "spot", level, message);
  spdlog::memory_buf_t buf;
  formatter->format(msg, buf);
  return std::string(buf.data(), buf.size());
}

std::vector<std::string> Lines(const std::string& path) {
  std::vector<std::string> out;
  std::ifstream in(path);
  for (std::string line; std::getline(in, line);) out.push_back(line);
  return out;
}

class LoggingTest : public ::testing::Test {
 protected:
  void SetUp() override { ClearLogContext(); }
  void TearDown() override {
    ClearLogContext();
    for (const char* v :
         {"SPOT_LOG_FORMAT", "SPOT_LOG_JOB", "SPOT_LOG_ROLE", "SPOT_LOG_INSTANCE"}) {
      ::unsetenv(v);
    }
  }
};

TEST_F(LoggingTest, LineHasTheEcsFieldsFirstAndTheContext) {
  SetLogContext({{"job", std::string("mnist")}, {"role", std::string("worker")}});
  SetLogContext("instance", std::string("i-0002"));
  SetLogContext({{"rank", 1}, {"generation", 3}});
  const std::string line = Format("generation 3: rank 1 of 2", spdlog::level::warn);
  ASSERT_EQ(line.back(), '\n');
  EXPECT_EQ(line.find('\n'), line.size() - 1) << "one line per record";
  // ecs-logging: @timestamp, log.level and message come first, in this order.
  EXPECT_EQ(line.rfind(R"({"@timestamp":"2026-12-03T07:00:00.123Z","log.level":"warn",)"
                       R"("message":"generation 3: rank 1 of 2",)",
                       0),
            0u)
      << line;
  const json j = json::parse(line);
  EXPECT_EQ(j["ecs.version"], "1.6.0");
  EXPECT_EQ(j["log.logger"], "spot");
  EXPECT_EQ(j["process.pid"], ::getpid());
  EXPECT_TRUE(j["process.thread.id"].is_number_integer());
  EXPECT_EQ(j["service.name"], "spot");
  EXPECT_EQ(j["spot.job"], "mnist");
  EXPECT_EQ(j["spot.role"], "worker");
  EXPECT_EQ(j["spot.instance"], "i-0002");
  EXPECT_EQ(j["spot.rank"], 1);
  EXPECT_EQ(j["spot.generation"], 3);
}

TEST_F(LoggingTest, ContextFieldsKeepTheirOrder) {
  SetLogContext("extra", std::string("e"));
  SetLogContext("rank", 0);
  SetLogContext("instance", std::string("i-1"));
  SetLogContext("job", std::string("a"));
  SetLogContext("job", std::string("b"));
  SetLogContext("rank", 5);
  const std::string line = Format("x");
  EXPECT_NE(line.find(R"("spot.job":"b","spot.instance":"i-1","spot.rank":5,"spot.extra":"e"})"),
            std::string::npos)
      << line;
  ClearLogContext();
  EXPECT_EQ(json::parse(Format("x")).count("spot.job"), 0u);
}

TEST_F(LoggingTest, MessagesAreEscaped) {
  const std::string nasty = "say \"hi\"\nback\\slash\ttab \x01 end";
  const std::string line = Format(nasty);
  EXPECT_EQ(line.find('\n'), line.size() - 1) << "the newline in the message was written raw";
  EXPECT_EQ(json::parse(line)["message"], nasty);
  // Invalid UTF-8 (a lone continuation byte, a truncated sequence) becomes U+FFFD.
  const std::string bad = std::string("path \x80 and \xE2\x82");
  const json j = json::parse(Format(bad));
  EXPECT_EQ(j["message"], "path \xEF\xBF\xBD and \xEF\xBF\xBD");
  EXPECT_EQ(json::parse(Format("caf\xC3\xA9"))["message"], "caf\xC3\xA9") << "valid UTF-8 kept";
}

TEST_F(LoggingTest, LevelsAreNamed) {
  EXPECT_EQ(json::parse(Format("m", spdlog::level::debug))["log.level"], "debug");
  EXPECT_EQ(json::parse(Format("m", spdlog::level::err))["log.level"], "error");
  EXPECT_EQ(json::parse(Format("m", spdlog::level::critical))["log.level"], "critical");
  EXPECT_EQ(LogLevelRank("debug"), 0);
  EXPECT_EQ(LogLevelRank("info"), 1);
  EXPECT_EQ(LogLevelRank("warn"), 2);
  EXPECT_EQ(LogLevelRank("warning"), 2);
  EXPECT_EQ(LogLevelRank("error"), 3);
  EXPECT_EQ(LogLevelRank("critical"), 4);
  EXPECT_EQ(LogLevelRank("WARN"), -1);
  EXPECT_EQ(LogLevelRank(""), -1);
}

// Rank and generation set together: no line has one new and one old, whatever
// the interleaving.
TEST_F(LoggingTest, FieldsSetTogetherAppearTogether) {
  std::atomic<bool> stop{false};
  std::thread setter([&] {
    for (int64_t i = 0; !stop.load(); ++i) SetLogContext({{"rank", i}, {"generation", i}});
  });
  for (int n = 0; n < 2000; ++n) {
    const json j = json::parse(Format("m"));
    if (!j.contains("spot.rank")) continue;
    ASSERT_EQ(j["spot.rank"], j["spot.generation"]) << j.dump();
  }
  stop.store(true);
  setter.join();
}

TEST_F(LoggingTest, TimestampsFormatAndParse) {
  EXPECT_EQ(FormatLogTimestamp(0), "1970-01-01T00:00:00.000Z");
  EXPECT_EQ(FormatLogTimestamp(kDec3), "2026-12-03T07:00:00.123Z");
  EXPECT_EQ(FormatLogTimestamp(-1), "1969-12-31T23:59:59.999Z");
  EXPECT_EQ(FormatLogTimestamp(1709251199999), "2024-02-29T23:59:59.999Z");
  EXPECT_EQ(ParseLogTimestamp("2026-12-03T07:00:00.123Z"), kDec3);
  EXPECT_EQ(ParseLogTimestamp("2024-02-29T23:59:59.999Z"), 1709251199999);
  for (const char* bad :
       {"", "2026-12-03 07:00:00.123Z", "2026-12-03T07:00:00.123", "2026-12-03T07:00:00Z",
        "2026-02-30T07:00:00.123Z", "2026-13-03T07:00:00.123Z", "2026-12-03T24:00:00.123Z",
        "2026-12-03T07:00:00.1a3Z", "20261203T070000.123Z+0"}) {
    EXPECT_FALSE(ParseLogTimestamp(bad).has_value()) << bad;
  }
}

TEST_F(LoggingTest, ParseReadsBackWhatIsWritten) {
  SetLogContext({{"job", std::string("j")},
                 {"role", std::string("worker")},
                 {"instance", std::string("i-0001")},
                 {"rank", 2},
                 {"generation", 7}});
  auto r = ParseLogLine(Format("a \"quoted\"\nmessage", spdlog::level::err));
  ASSERT_TRUE(r.has_value());
  EXPECT_EQ(r->unix_ms, kDec3);
  EXPECT_EQ(r->level, "error");
  EXPECT_EQ(r->message, "a \"quoted\"\nmessage");
  EXPECT_EQ(r->job, "j");
  EXPECT_EQ(r->role, "worker");
  EXPECT_EQ(r->instance, "i-0001");
  EXPECT_EQ(r->rank, 2);
  EXPECT_EQ(r->generation, 7);

  ClearLogContext();
  auto bare = ParseLogLine(Format("m"));
  ASSERT_TRUE(bare.has_value());
  EXPECT_EQ(bare->instance, "");
  EXPECT_EQ(bare->rank, -1);
  EXPECT_EQ(bare->generation, -1);
}

TEST_F(LoggingTest, ParseRefusesWhatIsNotOurs) {
  for (const char* line :
       {"", "2026-12-03 07:00:00.123 info text format", "error: no such file", "{", "[1,2]",
        R"({"message":"no time","log.level":"info"})",
        R"({"@timestamp":"2026-12-03T07:00:00.123Z","message":"no level"})",
        R"({"@timestamp":"yesterday","log.level":"info","message":"m"})",
        R"({"@timestamp":5,"log.level":"info","message":"m"})",
        R"({"@timestamp":"2026-12-03T07:00:00.123Z","log.level":"loud","message":"m"})"}) {
    EXPECT_FALSE(ParseLogLine(line).has_value()) << line;
  }
  // Fields of a wrong type are absent, not an error.
  auto r =
      ParseLogLine(R"({"@timestamp":"2026-12-03T07:00:00.123Z","log.level":"info","message":3,)"
                   R"("spot.rank":"one","spot.instance":7})");
  ASSERT_TRUE(r.has_value());
  EXPECT_EQ(r->message, "");
  EXPECT_EQ(r->rank, -1);
  EXPECT_EQ(r->instance, "");
}

// The controller's "last error" of a failed worker, from either kind of line.
TEST_F(LoggingTest, ErrorMessagesOfBothKindsOfLine) {
  EXPECT_EQ(ErrorMessageOf(Format("disk full", spdlog::level::err)), "disk full");
  EXPECT_EQ(ErrorMessageOf(Format("gave up", spdlog::level::critical)), "gave up");
  EXPECT_EQ(ErrorMessageOf(Format("collective error; re-forming", spdlog::level::warn)),
            "collective error; re-forming");
  EXPECT_EQ(ErrorMessageOf(Format("step 10", spdlog::level::info)), "");
  EXPECT_EQ(ErrorMessageOf("error: train.yaml:3: unknown field"),
            "error: train.yaml:3: unknown field");
  EXPECT_EQ(ErrorMessageOf("step 10/100 (10%)"), "");
  // The level's name is not a mention: only the message counts.
  SetLogContext("role", std::string("error-prone"));
  EXPECT_EQ(ErrorMessageOf(Format("fine")), "");
}

// A torn or damaged line is a line that is not ours, never an exception.
TEST_F(LoggingTest, ParseSurvivesEveryTruncationAndFlippedByte) {
  SetLogContext({{"instance", std::string("i-1")}, {"rank", 0}});
  std::string line = Format("message");
  line.pop_back();
  for (size_t n = 0; n < line.size(); ++n) {
    EXPECT_FALSE(ParseLogLine(line.substr(0, n)).has_value()) << n;
  }
  for (size_t i = 0; i < line.size(); ++i) {
    std::string damaged = line;
    damaged[i] = static_cast<char>(damaged[i] ^ 0x5a);
    EXPECT_NO_THROW((void)ParseLogLine(damaged)) << i;
  }
}

TEST_F(LoggingTest, DefaultLoggerWritesJsonFilesBesideText) {
  auto dir = TempDir::Create("logging_test").value();
  const std::string path = (dir.path() / "controller.log").string();
  ::setenv("SPOT_LOG_JOB", "envjob", 1);
  ::setenv("SPOT_LOG_ROLE", "controller", 1);
  ASSERT_TRUE(InitLogging(LogLevel::kInfo).ok());
  EXPECT_EQ(StderrLogFormat(), LogFormat::kText);
  ASSERT_TRUE(AddJsonLogFile(path).ok());
  SetTextLogPattern("[%l] %v");  // the terminal's; the file stays JSON
  spdlog::info("hello {}", 1);
  spdlog::debug("below the level");
  spdlog::warn("careful");
  const auto lines = Lines(path);
  ASSERT_EQ(lines.size(), 2u);
  auto first = ParseLogLine(lines[0]);
  auto second = ParseLogLine(lines[1]);
  ASSERT_TRUE(first && second) << lines[0] << "\n" << lines[1];
  EXPECT_EQ(first->message, "hello 1");
  EXPECT_EQ(first->job, "envjob");
  EXPECT_EQ(first->role, "controller");
  EXPECT_EQ(second->level, "warn");
  EXPECT_LE(first->unix_ms, second->unix_ms);

  std::ofstream(dir.path() / "plain-file") << "x";
  Status st = AddJsonLogFile((dir.path() / "plain-file" / "x.log").string());
  EXPECT_FALSE(st.ok());
  EXPECT_NE(st.message().find("x.log"), std::string::npos) << st.ToString();
}

TEST_F(LoggingTest, EnvironmentChoosesTheFormat) {
  ::setenv("SPOT_LOG_FORMAT", "json", 1);
  ASSERT_TRUE(InitLogging(LogLevel::kInfo).ok());
  EXPECT_EQ(StderrLogFormat(), LogFormat::kJson);
  ::setenv("SPOT_LOG_FORMAT", "xml", 1);
  Status refused = InitLogging(LogLevel::kInfo);
  EXPECT_EQ(refused.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(refused.message().find("SPOT_LOG_FORMAT: log format 'xml'"), std::string::npos)
      << refused.message();
  EXPECT_EQ(StderrLogFormat(), LogFormat::kText) << "text, so the refusal can be reported";
  EXPECT_TRUE(ParseLogFormat("text").ok());
  Result<LogFormat> bad = ParseLogFormat("xml");
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(bad.status().message().find("'xml'"), std::string::npos);
  ::unsetenv("SPOT_LOG_FORMAT");
  ASSERT_TRUE(InitLogging(LogLevel::kInfo).ok());
}

TEST_F(LoggingTest, ChildrenGetJsonAndTheJob) {
  SetLogContext({{"job", std::string("mnist")}, {"role", std::string("controller")}});
  auto env = ChildLogEnvironment({{"instance", "i-0003"}});
  std::map<std::string, std::string> m(env.begin(), env.end());
  EXPECT_EQ(m["SPOT_LOG_FORMAT"], "json");
  EXPECT_EQ(m["SPOT_LOG_JOB"], "mnist");
  EXPECT_EQ(m["SPOT_LOG_INSTANCE"], "i-0003");
  EXPECT_EQ(m.count("SPOT_LOG_ROLE"), 0u) << "a child names its own role";
  EXPECT_EQ(env.size(), 3u);
  auto overridden = ChildLogEnvironment({{"job", "other"}});
  std::map<std::string, std::string> o(overridden.begin(), overridden.end());
  EXPECT_EQ(o["SPOT_LOG_JOB"], "other");
}

}  // namespace
}  // namespace spot
