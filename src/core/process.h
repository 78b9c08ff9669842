// The one way the code base starts and watches other programs: the local
// provider's instances, the detached rendezvous, `spot train --nproc` workers,
// etcd and chromedriver in tests, the `spot` binary in end-to-end tests and
// benchmarks. POSIX (Linux) only.
//
//   SPOT_ASSIGN_OR_RETURN(int64_t pid, Spawn({.argv = {"/usr/bin/etcd", "--name=a"},
//                                             .log_path = "/tmp/etcd.log"}));
//   ...
//   Result<ProcessStatus> ended = StopProcess(pid, /*grace_s=*/3);
//
// Spawn() forks and execs with no shell and no PATH search. Everything the
// child needs (argv, environment, file names) is prepared before fork(): the
// child calls only async-signal-safe functions, so Spawn() is safe in a
// multi-threaded process. The child starts with no signals blocked, SIGPIPE
// at its default (see IgnoreBrokenPipes), and inherits our open file
// descriptors that are not close-on-exec.
//
// A pid names our child until it is reaped; CheckProcess(), WaitProcess() and
// StopProcess() reap it once it has ended, after which the pid may belong to
// someone else: callers must not use it again (ProcessMatches() is how to
// recognize a process again after our own restart).
//
// Thread safety: all functions may be called from any thread. Reap a given
// child from one thread only (two waiters race for its exit status), and do
// not change our environment (setenv) while another thread spawns.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "core/status.h"

namespace spot {

// Where the child's stdout or stderr goes.
struct Output {
  enum class Kind {
    kLog,      // SpawnOptions::log_path; /dev/null when that is ""
    kNull,     // /dev/null
    kInherit,  // the same open file as ours (our terminal, our pipe)
    kFile,     // `path`
  };
  Kind kind = Kind::kLog;
  std::string path;  // kFile only

  static Output Null() { return {Kind::kNull, ""}; }
  static Output Inherit() { return {Kind::kInherit, ""}; }
  static Output File(std::string path) { return {Kind::kFile, std::move(path)}; }
};

// The process group and session the child runs in.
enum class ProcessGroup {
  kNewSession,  // setsid(): its own session and group, no controlling terminal;
                // signals to our group (Ctrl-C) do not reach it, so it can outlive us
  kNewGroup,    // setpgid(): its own group in our session, so that
                // StopProcess(whole_group) also ends what it starts
  kInherit,     // our group: Ctrl-C on our terminal reaches it too
};

struct SpawnOptions {
  // The command line; argv[0] is also the executable's path unless `program`
  // is set. Must not be empty.
  std::vector<std::string> argv;
  // Added to (or replacing in) our environment; with inherit_env false, the
  // child's whole environment.
  std::vector<std::pair<std::string, std::string>> env;
  // Where stdout and stderr go while `out` / `err` are Output::kLog (the
  // default): this file, created (0644) when missing; "" = /dev/null.
  std::string log_path;
  // Empty log_path and Output::File files first instead of appending to them.
  bool truncate = false;
  Output out;  // stdout
  Output err;  // stderr; may name the same file as `out`
  // stdin: ours when true; /dev/null (the default) when false.
  bool inherit_stdin = false;
  // The executable when it differs from argv[0] (e.g. "/proc/self/exe", which
  // in the child names our own binary); "" = argv[0].
  std::string program;
  // False: the child gets only `env`.
  bool inherit_env = true;
  ProcessGroup group = ProcessGroup::kNewSession;
  // Linux PR_SET_PDEATHSIG: this signal reaches the child when the *thread*
  // that called Spawn() exits or our process dies (spawn from a thread that
  // outlives the child, e.g. main). 0 = none (the child may outlive us).
  int parent_death_signal = 0;
  // The child's working directory ("" = ours); one it cannot enter is told
  // on its stderr and ends it with code 127, as an unexecutable program does.
  std::string cwd;
};

// Starts the child and returns its pid once it has exec'd the program (its
// process group and /proc/PID/cmdline are then in place) or given up.
// InvalidArgument for an empty argv; Internal when fork() fails or the child
// has not exec'd within 10 s (e.g. blocked opening a FIFO; it is then killed).
// A program that cannot be executed (missing, not executable) or a file that
// cannot be opened is not an error here: the child writes why to its stderr
// (to our stderr when its own cannot be opened) and exits with code 127.
Result<int64_t> Spawn(const SpawnOptions& options);

struct ProcessStatus {
  bool running = false;
  int exit_code = -1;  // when it exited normally; -1 when killed or unknown
  int signal = 0;      // when a signal ended it (known only for our own children)
};

// Whether `pid` still runs; reaps our own child when it has ended (its exit
// code or signal is then known). For a process we did not start (adopted
// after a restart), only running or not is known; a zombie counts as ended.
// Never blocks.
ProcessStatus CheckProcess(int64_t pid);

// Waits up to `timeout_s` (>= 0) for `pid` to end and reaps it (see
// CheckProcess). DeadlineExceeded when it still runs then: it is left running
// and unreaped. InvalidArgument for pid <= 0.
Result<ProcessStatus> WaitProcess(int64_t pid, double timeout_s);

// Ends our child and reaps it: SIGTERM, up to `grace_s` for it to exit, then
// SIGKILL (grace_s <= 0: SIGKILL at once), then up to 10 s for the kernel to
// end it. With `whole_group` the signals go to its process group (REQUIRES:
// spawned with kNewGroup or kNewSession) and the SIGKILL is sent even when the
// child exited in the grace period, for anything it left behind.
// DeadlineExceeded when it survives the SIGKILL that long (stuck in the kernel).
Result<ProcessStatus> StopProcess(int64_t pid, double grace_s, bool whole_group = false);

// True when `pid` runs and its command line contains `needle` (an instance
// id): how a process is recognized again, since pids are reused.
bool ProcessMatches(int64_t pid, std::string_view needle);

// From now on a write to a pipe or socket whose reader is gone fails with
// EPIPE instead of killing this process with SIGPIPE (the default). For a
// process whose libraries write to sockets without MSG_NOSIGNAL: Gloo's
// writev, which then reports a peer that died, where SIGPIPE would have
// ended a survivor silently. Children started by Spawn() get SIGPIPE's
// default back.
void IgnoreBrokenPipes();

// Sends `sig` to `pid` (no error when the process is already gone; pid <= 0
// is ignored, never a process group).
void SignalProcess(int64_t pid, int sig);

// Sends `sig` to every process of session `sid` (a child spawned with
// kNewSession is its session's id), whatever process groups they made: what
// a machine going away does to what runs on it. Returns how many it reached.
int SignalSession(int64_t sid, int sig);

// "running", "exited with code 3", "killed by signal 9 (Killed)".
std::string DescribeExit(const ProcessStatus& status);

}  // namespace spot
