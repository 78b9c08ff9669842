#include "core/process.h"

#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <charconv>
#include <chrono>
#include <thread>

#include "core/clock.h"
#include "core/file_io.h"
#include "core/temp_dir.h"

namespace spot {
namespace {

constexpr char kSh[] = "/bin/sh";

class ProcessTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto dir = TempDir::Create("spot-process-test");
    ASSERT_TRUE(dir.ok()) << dir.status().ToString();
    dir_ = std::make_unique<TempDir>(std::move(dir).value());
  }
  void TearDown() override {
    // The whole group, for what a shell started; a child spawned into our
    // group is not a group leader, so it alone gets the signal.
    for (int64_t pid : pids_) (void)StopProcess(pid, 0, /*whole_group=*/true);
  }

  std::string Path(const std::string& name) const { return (dir_->path() / name).string(); }

  // Spawns `options`, remembering the pid so that TearDown stops what is left.
  int64_t Start(const SpawnOptions& options) {
    Result<int64_t> pid = Spawn(options);
    EXPECT_TRUE(pid.ok()) << pid.status().ToString();
    if (!pid.ok()) return -1;
    pids_.push_back(*pid);
    return *pid;
  }
  // A shell running `script`, its output in `log`.
  int64_t Shell(const std::string& script, const std::string& log = "") {
    return Start({.argv = {kSh, "-c", script}, .log_path = log});
  }
  // Waits (within the test's own generous limit) and forgets the reaped pid.
  ProcessStatus Ended(int64_t pid) {
    Result<ProcessStatus> s = WaitProcess(pid, 30);
    EXPECT_TRUE(s.ok()) << s.status().ToString();
    std::erase(pids_, pid);
    return s.ok() ? *s : ProcessStatus{.running = true};
  }
  std::string Read(const std::string& name) const {
    Result<std::string> text = ReadFile(Path(name));
    return text.ok() ? *text : "<" + text.status().ToString() + ">";
  }

  std::unique_ptr<TempDir> dir_;
  std::vector<int64_t> pids_;
};

// Our reaped child: waitpid knows nothing of it any more (no zombie left).
bool Reaped(int64_t pid) {
  errno = 0;
  return ::waitpid(static_cast<pid_t>(pid), nullptr, WNOHANG) == -1 && errno == ECHILD;
}

TEST_F(ProcessTest, EnvironmentAndLogFileReachTheChild) {
  ASSERT_TRUE(WriteFileAtomically(Path("log"), "before\n").ok());
  int64_t pid = Start({.argv = {kSh, "-c", "echo \"$SPOT_A $SPOT_B\"; echo oops >&2; exit 3"},
                       .env = {{"SPOT_A", "from-env"}, {"SPOT_B", "second"}},
                       .log_path = Path("log")});
  ProcessStatus s = Ended(pid);
  EXPECT_FALSE(s.running);
  EXPECT_EQ(s.exit_code, 3);
  EXPECT_EQ(s.signal, 0);
  EXPECT_EQ(DescribeExit(s), "exited with code 3");
  EXPECT_EQ(Read("log"), "before\nfrom-env second\noops\n");  // appended, one stream
  EXPECT_TRUE(Reaped(pid));
}

TEST_F(ProcessTest, TruncatedSeparateFilesForStdoutAndStderr) {
  ASSERT_TRUE(WriteFileAtomically(Path("out"), "stale stale stale\n").ok());
  int64_t pid = Start({.argv = {kSh, "-c", "echo to-out; echo to-err >&2"},
                       .truncate = true,
                       .out = Output::File(Path("out")),
                       .err = Output::File(Path("err"))});
  EXPECT_EQ(Ended(pid).exit_code, 0);
  EXPECT_EQ(Read("out"), "to-out\n");
  EXPECT_EQ(Read("err"), "to-err\n");
}

// After IgnoreBrokenPipes a write to a pipe with no reader fails with EPIPE
// (before, SIGPIPE would have ended this test program), and a child gets
// SIGPIPE's default back: one that sends itself SIGPIPE dies of it (a shell
// cannot undo a signal ignored when it started: it would exit 0).
TEST_F(ProcessTest, BrokenPipesAreErrorsHereAndDefaultInChildren) {
  struct sigaction before = {};
  ASSERT_EQ(::sigaction(SIGPIPE, nullptr, &before), 0);
  IgnoreBrokenPipes();
  int fds[2];
  ASSERT_EQ(::pipe(fds), 0);
  ::close(fds[0]);
  errno = 0;
  EXPECT_EQ(::write(fds[1], "x", 1), -1);
  EXPECT_EQ(errno, EPIPE);
  ::close(fds[1]);
  int64_t pid = Start({.argv = {kSh, "-c", "kill -s PIPE $$; exit 0"}});
  ProcessStatus s = Ended(pid);
  ::sigaction(SIGPIPE, &before, nullptr);
  EXPECT_EQ(s.signal, SIGPIPE) << DescribeExit(s);
}

TEST_F(ProcessTest, WithoutInheritEnvTheChildGetsOnlyItsOwn) {
  ASSERT_EQ(::setenv("SPOT_PROCESS_TEST_OURS", "1", 1), 0);
  int64_t pid = Start({.argv = {"/usr/bin/env"},
                       .env = {{"ONLY", "this"}},
                       .log_path = Path("log"),
                       .inherit_env = false});
  EXPECT_EQ(Ended(pid).exit_code, 0);
  EXPECT_EQ(Read("log"), "ONLY=this\n");
  pid = Start({.argv = {"/usr/bin/env"}, .log_path = Path("inherited")});
  EXPECT_EQ(Ended(pid).exit_code, 0);
  EXPECT_NE(Read("inherited").find("SPOT_PROCESS_TEST_OURS=1\n"), std::string::npos);
}

TEST_F(ProcessTest, ProgramCanDifferFromArgvZero) {
  int64_t pid =
      Start({.argv = {"renamed", "-c", "echo $0"}, .log_path = Path("log"), .program = kSh});
  EXPECT_EQ(Ended(pid).exit_code, 0);
  EXPECT_EQ(Read("log"), "renamed\n");
}

TEST_F(ProcessTest, KilledBySignalIsReportedAsTheSignal) {
  int64_t pid = Shell("exec sleep 30");
  SignalProcess(pid, SIGTERM);
  ProcessStatus s = Ended(pid);
  EXPECT_FALSE(s.running);
  EXPECT_EQ(s.signal, SIGTERM);
  EXPECT_EQ(s.exit_code, -1);
  EXPECT_EQ(DescribeExit(s).rfind("killed by signal 15", 0), 0u) << DescribeExit(s);
}

TEST_F(ProcessTest, WaitDeadlineExpiresWithAClearErrorAndLeavesTheChild) {
  int64_t pid = Shell("exec sleep 30");
  double start = RealClock()->MonotonicS();
  Result<ProcessStatus> s = WaitProcess(pid, 0.05);
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.status().code(), StatusCode::kDeadlineExceeded);
  EXPECT_NE(s.status().message().find(std::to_string(pid)), std::string::npos)
      << s.status().message();
  EXPECT_GE(RealClock()->MonotonicS() - start, 0.05);
  EXPECT_TRUE(CheckProcess(pid).running);  // left running, still ours to reap
  Result<ProcessStatus> stopped = StopProcess(pid, 0);
  ASSERT_TRUE(stopped.ok()) << stopped.status().ToString();
  EXPECT_EQ(stopped->signal, SIGKILL);
  std::erase(pids_, pid);
  EXPECT_TRUE(Reaped(pid));
}

TEST_F(ProcessTest, ExecFailureIsExitCode127WithTheReasonOnStderr) {
  int64_t pid = Start({.argv = {"/nonexistent/spot-prog", "x"}, .log_path = Path("log")});
  ProcessStatus s = Ended(pid);
  EXPECT_EQ(s.exit_code, 127);
  EXPECT_EQ(Read("log"),
            "spawn: cannot execute /nonexistent/spot-prog: no such file or directory (errno 2)\n");
  // An output file that cannot be opened: the same.
  pid = Start({.argv = {kSh, "-c", "exit 0"},
               .log_path = Path("no-such-dir/log"),
               .err = Output::File(Path("err"))});
  EXPECT_EQ(Ended(pid).exit_code, 127);
  EXPECT_EQ(Read("err"), "spawn: cannot open " + Path("no-such-dir/log") +
                             ": no such file or directory (errno 2)\n");
}

TEST_F(ProcessTest, EmptyCommandIsInvalid) {
  Result<int64_t> pid = Spawn({});
  ASSERT_FALSE(pid.ok());
  EXPECT_EQ(pid.status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(WaitProcess(0, 1).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(StopProcess(-1, 1).status().code(), StatusCode::kInvalidArgument);
  EXPECT_FALSE(CheckProcess(0).running);
}

TEST_F(ProcessTest, ProcessMatchesOurChildsCommandLine) {
  // Spawn returns after exec, so the command line is the child's at once.
  int64_t a = Start({.argv = {kSh, "-c", "sleep 30", "instance-a"}});
  int64_t b = Start({.argv = {kSh, "-c", "sleep 30", "instance-b"}});
  EXPECT_TRUE(ProcessMatches(a, "instance-a"));
  EXPECT_FALSE(ProcessMatches(a, "instance-b"));
  // A recorded pid now held by another program (a reused pid): no match.
  EXPECT_FALSE(ProcessMatches(b, "instance-a"));
  ASSERT_TRUE(StopProcess(a, 0, /*whole_group=*/true).ok());  // and the shell's sleep
  std::erase(pids_, a);
  EXPECT_FALSE(ProcessMatches(a, "instance-a"));  // gone (or someone else's by now)
  EXPECT_FALSE(ProcessMatches(0, ""));
  // A process that is not our child: ourselves, and init.
  EXPECT_TRUE(CheckProcess(::getpid()).running);
  EXPECT_TRUE(ProcessMatches(::getpid(), "spot_core_test"));
  EXPECT_FALSE(ProcessMatches(1, "instance-a"));
}

TEST_F(ProcessTest, CheckProcessReapsAnEndedChild) {
  int64_t pid = Start({.argv = {"/bin/true"}});
  ProcessStatus s;
  for (int i = 0; i < 30000 && (s = CheckProcess(pid)).running; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  std::erase(pids_, pid);
  EXPECT_FALSE(s.running);
  EXPECT_EQ(s.exit_code, 0);
  EXPECT_TRUE(Reaped(pid));
}

TEST_F(ProcessTest, GroupAndSessionAreAsAsked) {
  int64_t session = Start({.argv = {"/bin/sleep", "30"}, .group = ProcessGroup::kNewSession});
  int64_t group = Start({.argv = {"/bin/sleep", "30"}, .group = ProcessGroup::kNewGroup});
  int64_t ours = Start({.argv = {"/bin/sleep", "30"}, .group = ProcessGroup::kInherit});
  EXPECT_EQ(::getsid(static_cast<pid_t>(session)), session);
  EXPECT_EQ(::getpgid(static_cast<pid_t>(group)), group);
  EXPECT_EQ(::getsid(static_cast<pid_t>(group)), ::getsid(0));
  EXPECT_EQ(::getpgid(static_cast<pid_t>(ours)), ::getpgrp());
}

TEST_F(ProcessTest, StopProcessTermsThenKillsAndCanTakeTheWholeGroup) {
  int64_t polite = Shell("exec sleep 30");
  Result<ProcessStatus> s = StopProcess(polite, 10);
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  EXPECT_EQ(s->signal, SIGTERM);
  std::erase(pids_, polite);

  // Ignores SIGTERM (and so does its own child): SIGKILL after the grace,
  // to the whole group, so the grandchild goes too.
  int64_t stubborn =
      Start({.argv = {kSh, "-c", "trap '' TERM; sleep 30 & echo $! > " + Path("gc") + "; wait"},
             .group = ProcessGroup::kNewGroup});
  int64_t grandchild = 0;
  for (int i = 0; i < 30000 && grandchild == 0; ++i) {
    std::string text = Read("gc");
    if (!text.empty() && text.back() == '\n')
      std::from_chars(text.data(), text.data() + text.size() - 1, grandchild);
    if (grandchild == 0) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  ASSERT_GT(grandchild, 0);
  s = StopProcess(stubborn, 0.1, /*whole_group=*/true);
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  EXPECT_EQ(s->signal, SIGKILL);
  std::erase(pids_, stubborn);
  EXPECT_TRUE(Reaped(stubborn));
  Result<ProcessStatus> orphan = WaitProcess(grandchild, 30);  // init reaps it
  ASSERT_TRUE(orphan.ok()) << orphan.status().ToString();
  EXPECT_FALSE(orphan->running);
}

TEST_F(ProcessTest, ParentDeathSignalFiresWhenTheSpawningThreadEnds) {
  Result<int64_t> pid = InternalError("not started");
  std::thread([&] {
    pid = Spawn({.argv = {"/bin/sleep", "30"},
                 .group = ProcessGroup::kInherit,
                 .parent_death_signal = SIGKILL});
  }).join();
  ASSERT_TRUE(pid.ok()) << pid.status().ToString();
  pids_.push_back(*pid);
  ProcessStatus s = Ended(*pid);
  EXPECT_EQ(s.signal, SIGKILL);
}

}  // namespace
}  // namespace spot
