#include "apps/spot/log_merge.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "core/temp_dir.h"

namespace spot::cli {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

// 2026-12-03T07:00:00.000Z.
constexpr int64_t kT0 = 1796281200000;

// A line as a worker writes it.
std::string Line(int64_t ms, const std::string& level, const std::string& message,
                 const std::string& instance = "", int rank = -1, int generation = -1) {
  nlohmann::ordered_json j;
  j["@timestamp"] = FormatLogTimestamp(ms);
  j["log.level"] = level;
  j["message"] = message;
  j["ecs.version"] = "1.6.0";
  if (!instance.empty()) j["spot.instance"] = instance;
  if (rank >= 0) j["spot.rank"] = rank;
  if (generation >= 0) j["spot.generation"] = generation;
  return j.dump();
}

LogLine At(int64_t ms, const std::string& text) {
  return {.unix_ms = ms, .text = text, .record = ParseLogLine(text)};
}

std::vector<std::string> Texts(const std::vector<MergedLine>& lines) {
  std::vector<std::string> out;
  for (const MergedLine& m : lines) out.push_back(m.line.text);
  return out;
}

class LogMergeTest : public ::testing::Test {
 protected:
  void SetUp() override { dir_.emplace(TempDir::Create("log_merge_test").value()); }
  fs::path Path(const std::string& name) { return dir_->path() / name; }
  void Append(const std::string& name, const std::string& text) {
    fs::create_directories(Path(name).parent_path());
    std::ofstream(Path(name), std::ios::app) << text;
  }
  std::optional<TempDir> dir_;
};

TEST_F(LogMergeTest, InterleavedFilesMergeByTime) {
  std::vector<std::vector<LogLine>> files = {
      {At(kT0 + 1, "a1"), At(kT0 + 3, "a3"), At(kT0 + 5, "a5")},
      {At(kT0 + 2, "b2"), At(kT0 + 4, "b4")},
      {},
      {At(kT0 + 0, "c0"), At(kT0 + 6, "c6")}};
  auto merged = MergeByTime(files);
  EXPECT_EQ(Texts(merged), (std::vector<std::string>{"c0", "a1", "b2", "a3", "b4", "a5", "c6"}));
  EXPECT_EQ(merged[0].source, 3u);
  EXPECT_EQ(merged[2].source, 1u);
}

// Equal times keep the order of the files, and within a file the file's order.
TEST_F(LogMergeTest, EqualTimesAreStable) {
  std::vector<std::vector<LogLine>> files = {
      {At(10, "a1"), At(10, "a2")}, {At(10, "b1")}, {At(5, "c1"), At(10, "c2"), At(10, "c3")}};
  EXPECT_EQ(Texts(MergeByTime(files)),
            (std::vector<std::string>{"c1", "a1", "a2", "b1", "c2", "c3"}));
}

// A file whose times go back (threads of one process) keeps its order.
TEST_F(LogMergeTest, EachFileKeepsItsOrder) {
  std::vector<std::vector<LogLine>> files = {{At(5, "a5"), At(3, "a3")}, {At(4, "b4")}};
  EXPECT_EQ(Texts(MergeByTime(files)), (std::vector<std::string>{"b4", "a5", "a3"}));
}

// Files merged a chunk at a time (here 7 bytes: every line spans chunks)
// give what whole files merged in memory give.
TEST_F(LogMergeTest, FilesMergeAChunkAtATime) {
  Append("a.log", Line(kT0 + 1, "info", "a1") + "\n" + "a crash line\n" +
                      Line(kT0 + 4, "info", "a4") + "\n");
  Append("b.log", Line(kT0 + 2, "info", "b2") + "\n" + Line(kT0 + 4, "warn", "b4") + "\n" +
                      Line(kT0 + 9, "info", "b9, no newline"));
  Append("c.log", "");
  std::vector<LogSource> sources;
  std::vector<std::vector<LogLine>> whole;
  for (const char* name : {"a.log", "b.log", "c.log", "absent.log"}) {
    sources.push_back({Path(name).string(), name, "worker"});
    whole.push_back(LogTail(Path(name).string()).Read(true));
  }
  for (uint64_t chunk : {uint64_t{7}, uint64_t{1} << 20}) {
    std::vector<MergedLine> streamed;
    MergeFiles(
        sources, [&](MergedLine m) { streamed.push_back(std::move(m)); }, chunk);
    const auto expected = MergeByTime(whole);
    ASSERT_EQ(Texts(streamed), Texts(expected)) << "chunk " << chunk;
    ASSERT_EQ(streamed.size(), 6u);
    EXPECT_EQ(streamed[1].line.text, "a crash line");
    EXPECT_EQ(streamed[1].line.unix_ms, kT0 + 1);
    EXPECT_EQ(streamed[3].source, 0u) << "a4 and b4: equal times, the first file first";
    EXPECT_EQ(streamed[4].source, 1u);
  }
}

TEST_F(LogMergeTest, LinesThatAreNotJsonTakeThePreviousTime) {
  Append("w.log", "starting up\n" + Line(kT0 + 100, "info", "joined") + "\n" +
                      "step 10/100 (10%) loss 0.5\nterminate called after throwing\n" +
                      Line(kT0 + 200, "warn", "slow") + "\n");
  LogTail tail(Path("w.log").string());
  auto lines = tail.Read(true);
  ASSERT_EQ(lines.size(), 5u);
  EXPECT_EQ(lines[0].unix_ms, kT0 + 100) << "a first line takes the first time read";
  EXPECT_FALSE(lines[0].record.has_value());
  EXPECT_EQ(lines[1].unix_ms, kT0 + 100);
  ASSERT_TRUE(lines[1].record.has_value());
  EXPECT_EQ(lines[1].record->message, "joined");
  EXPECT_EQ(lines[2].unix_ms, kT0 + 100);
  EXPECT_EQ(lines[3].unix_ms, kT0 + 100);
  EXPECT_EQ(lines[3].text, "terminate called after throwing");
  EXPECT_EQ(lines[4].unix_ms, kT0 + 200);
  EXPECT_TRUE(tail.Read(true).empty()) << "nothing new";
}

TEST_F(LogMergeTest, AFileWithoutTimesTakesItsModificationTime) {
  Append("crash.log", "error: no such file\n");
  const auto when = fs::file_time_type::clock::from_sys(
      std::chrono::sys_time<std::chrono::milliseconds>(std::chrono::milliseconds(kT0 + 42)));
  fs::last_write_time(Path("crash.log"), when);
  auto lines = LogTail(Path("crash.log").string()).Read(true);
  ASSERT_EQ(lines.size(), 1u);
  EXPECT_EQ(lines[0].unix_ms, kT0 + 42);
  EXPECT_EQ(LineLevel(lines[0]), "error");
}

TEST_F(LogMergeTest, TailWaitsForTheRestOfALine) {
  const std::string full = Line(kT0, "info", "one");
  Append("w.log", full.substr(0, 20));
  LogTail tail(Path("w.log").string());
  EXPECT_TRUE(tail.Read(false).empty()) << "half a line is not shown while the file grows";
  Append("w.log", full.substr(20) + "\r\n" + Line(kT0 + 1, "info", "two"));
  auto lines = tail.Read(false);
  ASSERT_EQ(lines.size(), 1u);
  ASSERT_TRUE(lines[0].record.has_value()) << lines[0].text;
  EXPECT_EQ(lines[0].record->message, "one");
  lines = tail.Read(true);  // the file is complete: its last line has no newline
  ASSERT_EQ(lines.size(), 1u);
  EXPECT_EQ(lines[0].record->message, "two");
}

TEST_F(LogMergeTest, TailStartsAgainWhenTheFileShrinks) {
  Append("w.log", Line(kT0, "info", "old one") + "\n" + Line(kT0, "info", "old two") + "\n");
  LogTail tail(Path("w.log").string());
  EXPECT_EQ(tail.Read(false).size(), 2u);
  std::ofstream(Path("w.log"), std::ios::trunc) << Line(kT0 + 5, "info", "new") << "\n";
  auto lines = tail.Read(false);
  ASSERT_EQ(lines.size(), 1u);
  EXPECT_EQ(lines[0].record->message, "new");
  EXPECT_TRUE(LogTail(Path("missing.log").string()).Read(true).empty());
}

TEST_F(LogMergeTest, SourcesOfAJobDirectory) {
  Append("instances/i-0b.log", "");
  Append("instances/i-0a.log", "");
  Append("instances/i-0a/checkpoints/x", "not a log");
  Append("instances/notes.txt", "");
  Append("rendezvous.log", "");
  Append("controller.log", "");
  Append("decisions.jsonl", "");
  auto sources = JobLogSources(dir_->path().string());
  ASSERT_EQ(sources.size(), 4u);
  EXPECT_EQ(sources[0].label, "controller");
  EXPECT_EQ(sources[0].role, "controller");
  EXPECT_EQ(sources[1].label, "rendezvous");
  EXPECT_EQ(sources[2].label, "i-0a");
  EXPECT_EQ(sources[2].role, "worker");
  EXPECT_EQ(sources[3].label, "i-0b");
  EXPECT_EQ(sources[3].path, Path("instances/i-0b.log").string());
  EXPECT_TRUE(JobLogSources(Path("nowhere").string()).empty());
}

TEST_F(LogMergeTest, FiltersByLevelInstanceAndTime) {
  const LogSource controller{"c.log", "controller", "controller"};
  const LogSource worker{"w.log", "i-1", "worker"};
  const LogLine info = At(kT0, Line(kT0, "info", "m"));
  const LogLine warn = At(kT0 + 10, Line(kT0 + 10, "warn", "m"));
  const LogLine about = At(kT0, Line(kT0, "error", "m", "i-1"));
  const LogLine crash = At(kT0, "error: out of memory");
  const LogLine progress = At(kT0, "step 3/10");

  LogFilter warn_up{.min_level = LogLevelRank("warn")};
  EXPECT_FALSE(Shown(warn_up, worker, info));
  EXPECT_TRUE(Shown(warn_up, worker, warn));
  EXPECT_TRUE(Shown(warn_up, worker, crash));
  EXPECT_FALSE(Shown(warn_up, worker, progress));

  LogFilter one{.instance = "i-1"};
  EXPECT_TRUE(Shown(one, worker, info));
  EXPECT_FALSE(Shown(one, controller, info));
  EXPECT_TRUE(Shown(one, controller, about)) << "a line naming the instance";

  LogFilter since{.since_ms = kT0 + 5};
  EXPECT_FALSE(Shown(since, worker, info));
  EXPECT_TRUE(Shown(since, worker, warn));
  EXPECT_TRUE(Shown(LogFilter{}, worker, progress));
}

TEST_F(LogMergeTest, HumanLinesNameTheirSource) {
  const LogSource worker{"w.log", "i-1", "worker"};
  const LogSource controller{"c.log", "controller", "controller"};
  EXPECT_EQ(HumanLine(worker, At(kT0 + 7, Line(kT0 + 7, "warn", "slow", "i-1", 1, 3))),
            "2026-12-03 07:00:00.007Z [i-1 rank 1 gen 3] warn  slow");
  EXPECT_EQ(HumanLine(controller, At(kT0, Line(kT0, "info", "launched i-1"))),
            "2026-12-03 07:00:00.000Z [controller] info  launched i-1");
  EXPECT_EQ(HumanLine(worker, At(kT0, "Segmentation fault")),
            "2026-12-03 07:00:00.000Z [i-1] Segmentation fault");
}

TEST_F(LogMergeTest, JsonOutputKeepsOursAndWrapsTheRest) {
  const LogSource worker{"/j/instances/i-1.log", "i-1", "worker"};
  const std::string ours = Line(kT0, "info", "m", "i-1", 0, 1);
  EXPECT_EQ(JsonLine(worker, At(kT0, ours)), ours);
  const std::string raw = "error: bad \"path\" \x80";
  const json j = json::parse(JsonLine(worker, At(kT0 + 1, raw)));
  EXPECT_EQ(j["@timestamp"], "2026-12-03T07:00:00.001Z");
  EXPECT_EQ(j["log.level"], "error");
  EXPECT_EQ(j["message"], "error: bad \"path\" \xEF\xBF\xBD");
  EXPECT_EQ(j["log.file.path"], "/j/instances/i-1.log");
  EXPECT_EQ(j["spot.instance"], "i-1");
  EXPECT_TRUE(ParseLogLine(j.dump()).has_value()) << "a wrapped line reads back as ours";
}

TEST_F(LogMergeTest, JobEndsWithItsRunSummary) {
  const std::string dir = dir_->path().string();
  Append("controller.log", "x\n");
  EXPECT_FALSE(JobEnded(dir));
  Append("run-summary.json", "{}\n");
  const auto log_time = fs::last_write_time(Path("controller.log"));
  fs::last_write_time(Path("run-summary.json"), log_time + std::chrono::seconds(1));
  EXPECT_TRUE(JobEnded(dir));
  // A summary of an earlier run, older than the log being written.
  fs::last_write_time(Path("run-summary.json"), log_time - std::chrono::seconds(1));
  EXPECT_FALSE(JobEnded(dir));
}

TEST_F(LogMergeTest, SinceTakesDurationsAndTimes) {
  const int64_t now = kT0 + 86'400'000;
  EXPECT_EQ(ParseSince("90s", now).value(), now - 90'000);
  EXPECT_EQ(ParseSince("10m", now).value(), now - 600'000);
  EXPECT_EQ(ParseSince("2h", now).value(), now - 7'200'000);
  EXPECT_EQ(ParseSince("1d", now).value(), kT0);
  EXPECT_EQ(ParseSince("2026-12-03T07:00:00Z", now).value(), kT0);
  EXPECT_EQ(ParseSince("2026-12-03T07:00:00.250Z", now).value(), kT0 + 250);
  for (const char* bad :
       {"", "s", "10", "10x", "-5m", "1.5h", "yesterday", "2026-12-03", "99999999999999h"}) {
    Result<int64_t> r = ParseSince(bad, now);
    ASSERT_FALSE(r.ok()) << bad;
    EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
    EXPECT_NE(r.status().message().find(std::string("'") + bad + "'"), std::string::npos)
        << r.status().message();
  }
}

}  // namespace
}  // namespace spot::cli
