#include "core/process_cpu.h"

#include <fmt/format.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <optional>
#include <thread>

#include "core/process.h"
#include "core/temp_dir.h"

namespace spot {
namespace {

namespace fs = std::filesystem;

// A stat line with these times in ticks; the rest as Linux writes it.
std::string StatLine(int64_t pid, const std::string& comm, int64_t ppid, int64_t utime,
                     int64_t stime, int64_t cutime, int64_t cstime) {
  return fmt::format(
      "{} ({}) S {} {} {} 0 -1 4194560 120 0 0 0 {} {} {} {} 20 0 1 0 5000 1000000 200 "
      "18446744073709551615 1 1 0 0 0 0 0 0 0 0 0 0 17 1 0 0 0 0 0\n",
      pid, comm, ppid, pid, pid, utime, stime, cutime, cstime);
}

TEST(ParseProcStatTest, ReadsTheFieldsWhateverTheCommandName) {
  auto s = ParseProcStat(StatLine(1234, "a b) (c", 1, 250, 50, 30, 20), 100);
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  EXPECT_EQ(s->pid, 1234);
  EXPECT_EQ(s->ppid, 1);
  EXPECT_EQ(s->pgrp, 1234);
  EXPECT_DOUBLE_EQ(s->cpu_s, 3.0);
  EXPECT_DOUBLE_EQ(s->children_cpu_s, 0.5);
  // Another tick rate.
  s = ParseProcStat(StatLine(7, "sh", 1, 1000, 0, 0, 0), 1000);
  ASSERT_TRUE(s.ok());
  EXPECT_DOUBLE_EQ(s->cpu_s, 1.0);
}

TEST(ParseProcStatTest, BadLinesAreErrorsNamingWhatIsWrong) {
  const struct {
    std::string line, message;
  } bad[] = {
      {"", "no \"pid (comm)\""},
      {"garbage", "no \"pid (comm)\""},
      {"12 (sh S 1 12", "no \"pid (comm)\""},
      {"x12 (sh) S 1 12", "pid 'x12' is not a count"},
      {"12 (sh) S 1 12 12 0", "5 fields after the command name, not 15: no tpgid"},
      {"12 (sh) S 1 12 12 0 -1 0 0 0 0 0 5 6 7", "no cstime"},
      {"12 (sh) S one 12 12 0 -1 0 0 0 0 0 5 6 7 8", "ppid 'one' is not a count"},
      {"12 (sh) S 1 12 12 0 -1 0 0 0 0 0 5x 6 7 8", "utime '5x' is not a count"},
      {"12 (sh) S 1 12 12 0 -1 0 0 0 0 0 5 -6 7 8", "stime '-6' is not a count"},
      {"12 (sh) S 1 12 12 0 -1 0 0 0 0 0 5 6 7 99999999999999999999", "cstime"},
  };
  for (const auto& b : bad) {
    auto s = ParseProcStat(b.line, 100);
    ASSERT_FALSE(s.ok()) << b.line;
    EXPECT_EQ(s.status().code(), StatusCode::kInvalidArgument) << b.line;
    EXPECT_NE(s.status().message().find(b.message), std::string::npos)
        << b.line << ": " << s.status().message();
  }
}

// A /proc of the test's own: what ReadProcStats and ProcessTreeCpu read.
class FakeProcTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto dir = TempDir::Create("spot-process-cpu-test");
    ASSERT_TRUE(dir.ok()) << dir.status().ToString();
    dir_.emplace(std::move(dir).value());
  }
  std::string Proc() const { return dir_->path().string(); }
  // Process `pid` with these times in ticks (100 a second).
  void Put(int64_t pid, int64_t ppid, int64_t utime, int64_t cutime = 0) {
    PutText(pid, StatLine(pid, "p", ppid, utime, 0, cutime, 0));
  }
  void PutText(int64_t pid, const std::string& text) {
    fs::create_directories(dir_->path() / std::to_string(pid));
    std::ofstream(dir_->path() / std::to_string(pid) / "stat") << text;
  }
  void Remove(int64_t pid) { fs::remove_all(dir_->path() / std::to_string(pid)); }

  std::optional<TempDir> dir_;
};

TEST_F(FakeProcTest, ReadsEveryProcessAndSkipsWhatIsNotOneOrHasGone) {
  Put(1, 0, 5);
  Put(20, 1, 100, 40);
  fs::create_directories(dir_->path() / "self");  // not a pid
  fs::create_directories(dir_->path() / "30");    // gone: no stat
  PutText(31, "");                                // gone while read
  auto all = ReadProcStats(Proc(), 100);
  ASSERT_TRUE(all.ok()) << all.status().ToString();
  ASSERT_EQ(all->size(), 2u);
  std::sort(all->begin(), all->end(), [](auto& a, auto& b) { return a.pid < b.pid; });
  EXPECT_EQ((*all)[1].pid, 20);
  EXPECT_EQ((*all)[1].ppid, 1);
  EXPECT_DOUBLE_EQ((*all)[1].cpu_s, 1.0);
  EXPECT_DOUBLE_EQ((*all)[1].children_cpu_s, 0.4);

  PutText(40, "40 (p) S 1 40 40 0 -1 0 0 0 0 0 7 x 0 0\n");
  all = ReadProcStats(Proc(), 100);
  ASSERT_FALSE(all.ok());
  EXPECT_EQ(all.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(all.status().message().find(Proc() + "/40/stat: stime 'x' is not a count"),
            std::string::npos)
      << all.status().message();
  PutText(40, StatLine(41, "p", 1, 0, 0, 0, 0));
  all = ReadProcStats(Proc(), 100);
  ASSERT_FALSE(all.ok());
  EXPECT_NE(all.status().message().find("/40/stat: names pid 41"), std::string::npos)
      << all.status().message();

  all = ReadProcStats(Proc() + "/missing", 100);
  ASSERT_FALSE(all.ok());
  EXPECT_EQ(all.status().code(), StatusCode::kUnavailable);
}

// The tree under root 10: its descendants, at any depth, not others; time
// moves from a reaped process to its parent's children time, so the total
// holds as processes end; a process lost without a counted reaper leaves
// the total where it was, never lower.
TEST_F(FakeProcTest, CountsTheRootsDescendantsAndTheTimeOfThoseThatEnded) {
  Put(1, 0, 900);
  Put(10, 1, 500, 300);  // the root: its own time and what it reaped before are not counted
  auto cpu = ProcessTreeCpu::Open({.root = 10, .proc_dir = Proc(), .ticks_per_s = 100});
  ASSERT_TRUE(cpu.ok()) << cpu.status().ToString();
  Put(11, 10, 100);      // a rank
  Put(12, 11, 200, 50);  // its child, which reaped one of its own
  Put(13, 12, 25);       // a grandchild
  Put(14, 10, 10);       // another rank
  Put(20, 1, 7000);      // not ours
  Put(21, 20, 7000);     // not ours either
  auto s = cpu->Sample();
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  EXPECT_DOUBLE_EQ(*s, 3.85);
  // 13 ends, reaped by 12: its time is in 12's children time now.
  Remove(13);
  Put(12, 11, 210, 75);
  EXPECT_DOUBLE_EQ(*cpu->Sample(), 3.95);
  // 12 ends, reaped by 11; then 11 ends, reaped by the root.
  Remove(12);
  Put(11, 10, 120, 285);
  EXPECT_DOUBLE_EQ(*cpu->Sample(), 4.15);
  Remove(11);
  Put(10, 1, 500, 300 + 405);
  EXPECT_DOUBLE_EQ(*cpu->Sample(), 4.15);
  // 14 vanishes without a counted reaper: the counter stays, then grows again.
  Remove(14);
  EXPECT_DOUBLE_EQ(*cpu->Sample(), 4.15);
  Put(15, 10, 30);
  EXPECT_DOUBLE_EQ(*cpu->Sample(), 4.35);
  // A damaged line is an error, and the counter goes on from where it was.
  PutText(16, "16 (p) S 10 16\n");
  auto bad = cpu->Sample();
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("/16/stat:"), std::string::npos) << bad.status().message();
  Remove(16);
  EXPECT_DOUBLE_EQ(*cpu->Sample(), 4.35);
  // The root gone: NotFound.
  Remove(10);
  EXPECT_EQ(cpu->Sample().status().code(), StatusCode::kNotFound);
  EXPECT_EQ(ProcessTreeCpu::Open({.root = 10, .proc_dir = Proc()}).status().code(),
            StatusCode::kNotFound);
}

// The root's parent its own child: only a damaged /proc says so, and the
// walk still ends, counting each process once.
TEST_F(FakeProcTest, AParentCycleInADamagedProcEnds) {
  Put(10, 12, 0);
  auto cpu = ProcessTreeCpu::Open({.root = 10, .proc_dir = Proc(), .ticks_per_s = 100});
  ASSERT_TRUE(cpu.ok());
  Put(11, 10, 100);
  Put(12, 11, 100);
  EXPECT_DOUBLE_EQ(*cpu->Sample(), 2.0);
}

// Real processes, this test's children: each waits for what it needs (CPU
// time to accumulate, a file), with a deadline, never for a fixed time.
class LiveProcTest : public FakeProcTest {
 protected:
  void TearDown() override {
    for (int64_t pid : pids_) (void)StopProcess(pid, 0, /*whole_group=*/true);
  }
  int64_t Start(const std::string& script) {
    auto pid = Spawn({.argv = {"/bin/sh", "-c", script}, .group = ProcessGroup::kNewGroup});
    EXPECT_TRUE(pid.ok()) << pid.status().ToString();
    if (pid.ok()) pids_.push_back(*pid);
    return pid.ok() ? *pid : 0;
  }
  template <typename F>
  static bool WaitFor(F done) {
    const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(60);
    while (std::chrono::steady_clock::now() < until) {
      if (done()) return true;
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    return false;
  }
  std::vector<int64_t> pids_;
};

TEST_F(LiveProcTest, ABusyChildIsCountedAndStaysCountedOnceReaped) {
  auto cpu = ProcessTreeCpu::Open({});
  ASSERT_TRUE(cpu.ok()) << cpu.status().ToString();
  const int64_t pid = Start("while :; do :; done");
  double busy = 0;
  ASSERT_TRUE(WaitFor([&] {
    auto s = cpu->Sample();
    EXPECT_TRUE(s.ok()) << s.status().ToString();
    busy = s.ok() ? *s : 0;
    return busy >= 0.5;
  })) << "the busy loop was counted "
      << busy << " CPU s";
  auto ended = StopProcess(pid, 0, /*whole_group=*/true);  // reaped: now in our children time
  ASSERT_TRUE(ended.ok());
  auto after = cpu->Sample();
  ASSERT_TRUE(after.ok());
  EXPECT_GE(*after, busy);
}

TEST_F(LiveProcTest, ASleepingChildCostsAlmostNothing) {
  auto cpu = ProcessTreeCpu::Open({});
  ASSERT_TRUE(cpu.ok()) << cpu.status().ToString();
  const int64_t pid = Start("sleep 1");
  auto mid = cpu->Sample();
  ASSERT_TRUE(mid.ok());
  ASSERT_TRUE(WaitProcess(pid, 30).ok());
  auto after = cpu->Sample();
  ASSERT_TRUE(after.ok());
  EXPECT_LT(*after, 0.05) << "a second of sleep";
}

// A shell whose child burns CPU and ends, reaped by the shell: the child's
// time moves into the shell's children time and is still counted.
TEST_F(LiveProcTest, ExitedGrandchildrenAreStillCounted) {
  auto cpu = ProcessTreeCpu::Open({});
  ASSERT_TRUE(cpu.ok()) << cpu.status().ToString();
  const fs::path stop = dir_->path() / "stop", done = dir_->path() / "done";
  const int64_t shell =
      Start(fmt::format("(while [ ! -e {stop} ]; do :; done); touch {done}; exec sleep 60",
                        fmt::arg("stop", stop.string()), fmt::arg("done", done.string())));
  double busy = 0;
  ASSERT_TRUE(WaitFor([&] {
    auto s = cpu->Sample();
    busy = s.ok() ? *s : 0;
    return busy >= 0.3;
  })) << busy;
  std::ofstream(stop) << "";
  ASSERT_TRUE(WaitFor([&] { return fs::exists(done); }));
  auto all = ReadProcStats("/proc", ProcTicksPerSecond());
  ASSERT_TRUE(all.ok()) << all.status().ToString();
  auto it =
      std::find_if(all->begin(), all->end(), [&](const ProcStat& p) { return p.pid == shell; });
  ASSERT_NE(it, all->end());
  EXPECT_GE(it->children_cpu_s, 0.3) << "the burner's time, reaped by the shell";
  auto after = cpu->Sample();
  ASSERT_TRUE(after.ok());
  EXPECT_GE(*after, busy);
}

TEST(AvailableCpusTest, AtLeastOneAndAtMostTheMachinesCount) {
  EXPECT_GE(AvailableCpus(), 1);
  EXPECT_LE(AvailableCpus(), static_cast<int>(std::max(1u, std::thread::hardware_concurrency())));
}

}  // namespace
}  // namespace spot
