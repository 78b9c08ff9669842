// End-to-end tests of the logs of `spot run` and of `spot logs`: a short
// real job (controller, rendezvous and worker processes) writes JSON lines
// with its job, instance, rank and generation, and `spot logs` merges them in
// time order; `--follow` tails files as they grow and appear.
#include <gtest/gtest.h>
#include <signal.h>
#include <unistd.h>

#include <fstream>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>

#include "apps/spot/e2e_support.h"
#include "core/clock.h"
#include "core/logging.h"

namespace spot::testing {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

std::string ReadText(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

std::vector<std::string> SplitLines(const std::string& text) {
  std::vector<std::string> out;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) out.push_back(line);
  return out;
}

// A worker's line as the JSON format writes it.
std::string WorkerLine(int64_t ms, const std::string& message, const std::string& instance,
                       int rank) {
  return json({{"@timestamp", FormatLogTimestamp(ms)},
               {"log.level", "info"},
               {"message", message},
               {"spot.instance", instance},
               {"spot.rank", rank},
               {"spot.generation", 1}})
      .dump();
}

class LogsTest : public E2eTest {
 protected:
  // The shortest `spot run` job of run_e2e_test.cc: two workers on one zone
  // that never loses capacity, 200 steps.
  fs::path ShortRunJob(const std::string& name) {
    json trace = {{"metadata", {{"gap_seconds", 60}}}, {"data", std::vector<int>(400, 1)}};
    std::ofstream(dir_ / "zone-a_gpu_1.json") << trace.dump();
    return WriteJob(
        name,
        fmt::format(
            "name: {name}\npolicy: greedy\ncompute_hours: 0.3\ndeadline_hours: 3\n"
            "resources:\n  nodes: 2\n  min_nodes: 1\n  ondemand_price: 3.0\n"
            "  changeover_hours: 0.02\n"
            "market:\n  traces:\n    - {trace}\n  time_compression: 60\n  notice_seconds: 120\n"
            "  when_missing: error\n"
            "controller:\n  reconcile_interval_s: 0.02\n  terminate_grace_s: 1\n"
            "train:\n  model: mlp\n  dataset:\n    path: {data}\n    train_limit: 12000\n"
            "  batch_size: 32\n  steps: 200\n  seed: 7\n  threads: 1\n"
            "  optimizer:\n    type: adam\n    lr: 0.002\n"
            "  checkpoint:\n    interval: steps\n    interval_steps: 50\n"
            "  distributed:\n    collective_timeout_s: 3\n  output_dir: {out}\n",
            fmt::arg("name", name), fmt::arg("trace", (dir_ / "zone-a_gpu_1.json").string()),
            fmt::arg("data", kDataset), fmt::arg("out", (dir_ / name).string())));
  }

  // Waits (up to a minute: a deadline, not a speed goal) until `path`
  // contains `text`, or `p` has ended.
  static bool WaitFor(ChildProcess& p, const fs::path& path, const std::string& text) {
    Clock* clock = RealClock();
    const double deadline = clock->NowUnixS() + 60;
    while (clock->NowUnixS() < deadline && p.Running()) {
      if (ReadText(path).find(text) != std::string::npos) return true;
      clock->SleepFor(0.02);
    }
    return ReadText(path).find(text) != std::string::npos;
  }
};

// A real job: the controller's and the workers' files are JSON lines with the
// job, role, instance, rank and generation; `spot logs` shows them merged
// in time order, for people and as JSON; the terminal got text.
TEST_F(LogsTest, RunWritesJsonLogsThatMergeInTimeOrder) {
  auto job = ShortRunJob("logged");
  ProcessResult run = Spot({"run", job.string()}, "run");
  ASSERT_EQ(run.exit_code, 0) << run.out << run.err;
  EXPECT_EQ(run.err.find("{\"@timestamp\""), std::string::npos) << "the terminal gets text:\n"
                                                                << run.err;
  EXPECT_NE(run.err.find(" info "), std::string::npos) << run.err;

  const fs::path job_dir = dir_ / "logged";
  const auto controller = SplitLines(ReadText(job_dir / "controller.log"));
  ASSERT_FALSE(controller.empty());
  for (const std::string& line : controller) {
    auto r = ParseLogLine(line);
    ASSERT_TRUE(r.has_value()) << "controller.log: not a JSON log line: " << line;
    EXPECT_EQ(r->job, "logged");
    EXPECT_EQ(r->role, "controller");
  }

  ProcessResult logs = Spot({"logs", job_dir.string(), "--json"}, "logs-json");
  ASSERT_EQ(logs.exit_code, 0) << logs.err;
  std::set<std::string> roles, instances;
  int64_t last_ms = 0, worker_lines_with_rank = 0;
  std::string last_source;
  for (const std::string& line : SplitLines(logs.out)) {
    json j = json::parse(line, nullptr, false);
    ASSERT_FALSE(j.is_discarded()) << "--json printed a line that is not JSON: " << line;
    auto r = ParseLogLine(line);
    ASSERT_TRUE(r.has_value()) << line;
    // Where the merge switches files, time never goes back (within one file
    // it is the file's order: threads of a process may write a millisecond
    // out of order).
    const std::string source = r->role + "/" + r->instance;
    if (source != last_source) {
      EXPECT_GE(r->unix_ms, last_ms) << "out of time order: " << line;
    }
    last_ms = r->unix_ms;
    last_source = source;
    roles.insert(r->role);
    if (r->role != "worker" || !j.contains("ecs.version") || !j.contains("process.pid")) continue;
    EXPECT_EQ(r->job, "logged") << line;
    EXPECT_FALSE(r->instance.empty()) << line;
    instances.insert(r->instance);
    if (r->rank >= 0 && r->generation >= 1) ++worker_lines_with_rank;
  }
  EXPECT_TRUE(roles.count("controller") && roles.count("worker") && roles.count("rendezvous"))
      << logs.out;
  EXPECT_GE(instances.size(), 1u);
  EXPECT_GT(worker_lines_with_rank, 0) << "no worker line carries its rank and generation";

  // For people: one line per record, times in order, workers with rank and
  // generation.
  ProcessResult human = Spot({"logs", job.string()}, "logs-text");  // by its job file
  ASSERT_EQ(human.exit_code, 0) << human.err;
  std::string last_time, last_who;
  bool controller_seen = false, worker_seen = false;
  for (const std::string& line : SplitLines(human.out)) {
    if (line.size() < 27 || !ParseLogTimestamp(line.substr(0, 10) + "T" + line.substr(11, 13))) {
      continue;  // the rest of a message that has a newline
    }
    const std::string t = line.substr(0, 24);
    const std::string who = line.substr(26, line.find_first_of(" ]", 26) - 26);
    if (who != last_who) {
      EXPECT_GE(t, last_time) << "out of time order: " << line;
    }
    last_time = t;
    last_who = who;
    controller_seen |= line.find(" [controller] ") != std::string::npos;
    worker_seen |=
        line.find(" rank ") != std::string::npos && line.find(" gen ") != std::string::npos;
  }
  EXPECT_TRUE(controller_seen && worker_seen) << human.out;

  // One instance, and warnings and worse only.
  const std::string one = *instances.begin();
  ProcessResult mine = Spot({"logs", job_dir.string(), "--instance", one, "--json"}, "logs-one");
  ASSERT_EQ(mine.exit_code, 0) << mine.err;
  ASSERT_FALSE(mine.out.empty());
  for (const std::string& line : SplitLines(mine.out)) {
    EXPECT_EQ(json::parse(line).value("spot.instance", ""), one) << line;
  }
  ProcessResult warn = Spot({"logs", job_dir.string(), "--level", "warn", "--json"}, "logs-warn");
  ASSERT_EQ(warn.exit_code, 0) << warn.err;
  for (const std::string& line : SplitLines(warn.out)) {
    EXPECT_GE(LogLevelRank(json::parse(line).value("log.level", "")), 2) << line;
  }
}

TEST_F(LogsTest, BadJobsAreRefused) {
  ProcessResult missing = Spot({"logs", (dir_ / "nosuchjob").string()}, "missing");
  EXPECT_EQ(missing.exit_code, 2);
  EXPECT_NE(missing.err.find("nosuchjob"), std::string::npos) << missing.err;

  fs::create_directories(dir_ / "empty");
  ProcessResult empty = Spot({"logs", (dir_ / "empty").string()}, "empty");
  EXPECT_EQ(empty.exit_code, 2);
  EXPECT_NE(empty.err.find("not a job directory"), std::string::npos) << empty.err;

  fs::create_directories(dir_ / "job");
  std::ofstream(dir_ / "job" / "controller.log") << "{\"torn\": \n";
  ProcessResult since = Spot({"logs", (dir_ / "job").string(), "--since", "soon"}, "since");
  EXPECT_EQ(since.exit_code, 2);
  EXPECT_NE(since.err.find("--since 'soon'"), std::string::npos) << since.err;

  // A corrupt line is shown as it is.
  ProcessResult corrupt = Spot({"logs", (dir_ / "job").string()}, "corrupt");
  EXPECT_EQ(corrupt.exit_code, 0) << corrupt.err;
  EXPECT_NE(corrupt.out.find("[controller] {\"torn\": "), std::string::npos) << corrupt.out;
}

// --follow shows lines as files grow and as instance files appear, and ends
// at SIGTERM with everything shown; it also ends by itself with the job.
TEST_F(LogsTest, FollowTailsGrowingFilesUntilStopped) {
  const fs::path job_dir = dir_ / "job";
  fs::create_directories(job_dir / "instances");
  const int64_t t0 = static_cast<int64_t>(RealClock()->NowUnixS()) * 1000;
  std::ofstream(job_dir / "controller.log") << WorkerLine(t0, "first", "", 0) << "\n";

  ChildProcess follow({SPOT_BIN, "logs", job_dir.string(), "--follow"}, (dir_ / "follow").string());
  const fs::path out = dir_ / "follow.out";
  ASSERT_TRUE(WaitFor(follow, out, "first")) << ReadText(out) << ReadText(dir_ / "follow.err");

  std::ofstream(job_dir / "controller.log", std::ios::app)
      << WorkerLine(t0 + 10, "second", "", 0) << "\n";
  ASSERT_TRUE(WaitFor(follow, out, "second")) << ReadText(out);

  // A new instance, and a line of it without its newline yet.
  {
    std::ofstream w(job_dir / "instances" / "i-7.log");
    w << WorkerLine(t0 + 20, "joined", "i-7", 1) << "\n"
      << "half a li";
  }
  ASSERT_TRUE(WaitFor(follow, out, "joined")) << ReadText(out);
  EXPECT_NE(ReadText(out).find("[i-7 rank 1 gen 1] info  joined"), std::string::npos)
      << ReadText(out);
  EXPECT_EQ(ReadText(out).find("half a li"), std::string::npos)
      << "a line being written was shown before its end";

  follow.Kill(SIGTERM);
  ProcessResult r = follow.Wait(60);
  EXPECT_EQ(r.exit_code, 0) << r.err;
  const auto lines = SplitLines(r.out);
  ASSERT_EQ(lines.size(), 4u) << r.out;
  EXPECT_NE(lines[0].find("first"), std::string::npos);
  EXPECT_NE(lines[1].find("second"), std::string::npos);
  EXPECT_NE(lines[2].find("joined"), std::string::npos);
  EXPECT_NE(lines[3].find("[i-7] half a li"), std::string::npos) << "the rest, at the end";

  // The job ends: following stops by itself.
  ChildProcess until_end({SPOT_BIN, "logs", job_dir.string(), "--follow", "--json"},
                         (dir_ / "until-end").string());
  ASSERT_TRUE(WaitFor(until_end, dir_ / "until-end.out", "joined"));
  std::ofstream(job_dir / "run-summary.json") << "{}\n";
  ProcessResult ended = until_end.Wait(60);
  EXPECT_EQ(ended.exit_code, 0) << "still following after the job ended: " << ended.err;
  EXPECT_EQ(SplitLines(ended.out).size(), 4u) << ended.out;
}

}  // namespace
}  // namespace spot::testing
