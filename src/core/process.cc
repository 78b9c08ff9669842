#include "core/process.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <memory>
#include <sstream>

#include "core/clock.h"

extern char** environ;

namespace spot {
namespace {

constexpr int kCannotStart = 127;    // the shell's code for "command not run"
constexpr int kExecWaitMs = 10'000;  // fork to exec: a few system calls
constexpr double kKillWaitS = 10;    // SIGKILL to gone
constexpr double kMaxPollS = 0.01;   // WaitProcess's longest pause between checks

// Everything the child touches, built before fork(): after it, a
// multi-threaded parent's child may only make async-signal-safe calls.
struct ChildPlan {
  std::vector<std::string> env_strings, args;
  std::vector<char*> envp, argv;
  std::string program;
  // stdin, stdout, stderr: the file to open, "" = keep ours.
  std::array<std::string, 3> paths;
  std::array<std::string, 3> open_failed;  // "spawn: cannot open PATH: "
  std::string exec_failed;                 // "spawn: cannot execute PROGRAM: "
  int out_flags = O_WRONLY | O_CREAT | O_APPEND;
  ProcessGroup group = ProcessGroup::kNewSession;
  int death_signal = 0;
  pid_t parent = 0;
  std::string cwd;         // "" = ours
  std::string cwd_failed;  // "spawn: cannot enter DIR: "
};

std::vector<std::string> ChildEnv(const SpawnOptions& o) {
  std::map<std::string, std::string> env;
  for (char** e = environ; o.inherit_env && *e != nullptr; ++e) {
    std::string_view kv(*e);
    size_t eq = kv.find('=');
    if (eq != std::string_view::npos) env[std::string(kv.substr(0, eq))] = kv.substr(eq + 1);
  }
  for (const auto& [k, v] : o.env) env[k] = v;
  std::vector<std::string> out;
  for (const auto& [k, v] : env) out.push_back(k + "=" + v);
  return out;
}

std::string OutputPath(const Output& o, const std::string& log_path) {
  switch (o.kind) {
    case Output::Kind::kLog:
      return log_path.empty() ? "/dev/null" : log_path;
    case Output::Kind::kNull:
      return "/dev/null";
    case Output::Kind::kInherit:
      return "";
    case Output::Kind::kFile:
      return o.path;
  }
  return "/dev/null";
}

std::unique_ptr<ChildPlan> Plan(const SpawnOptions& o) {
  auto p = std::make_unique<ChildPlan>();
  p->env_strings = ChildEnv(o);
  p->args = o.argv;
  for (std::string& s : p->env_strings) p->envp.push_back(s.data());
  p->envp.push_back(nullptr);
  for (std::string& s : p->args) p->argv.push_back(s.data());
  p->argv.push_back(nullptr);
  p->program = o.program.empty() ? o.argv[0] : o.program;
  p->paths = {o.inherit_stdin ? "" : "/dev/null", OutputPath(o.out, o.log_path),
              OutputPath(o.err, o.log_path)};
  for (int i = 0; i < 3; ++i) p->open_failed[i] = "spawn: cannot open " + p->paths[i] + ": ";
  p->exec_failed = "spawn: cannot execute " + p->program + ": ";
  if (o.truncate) p->out_flags |= O_TRUNC;
  p->group = o.group;
  p->death_signal = o.parent_death_signal;
  p->parent = ::getpid();
  p->cwd = o.cwd;
  p->cwd_failed = "spawn: cannot enter " + o.cwd + ": ";
  return p;
}

// Async-signal-safe from here to RunChild's end: write(), no allocation.
void WriteAll(const char* s) { (void)!::write(2, s, std::strlen(s)); }

const char* ErrnoName(int err) {
  switch (err) {
    case ENOENT:
      return "no such file or directory";
    case EACCES:
      return "permission denied";
    case ENOEXEC:
      return "exec format error";
    case ENOTDIR:
      return "not a directory";
    default:
      return "error";
  }
}

// Writes "PREFIX: <what> (errno N)" to stderr and exits 127.
[[noreturn]] void Fail(const std::string& prefix, int err) {
  char digits[12] = {};
  int n = sizeof(digits) - 1;
  unsigned v = static_cast<unsigned>(err);
  do {
    digits[--n] = static_cast<char>('0' + v % 10);
    v /= 10;
  } while (v != 0 && n > 0);
  WriteAll(prefix.c_str());
  WriteAll(ErrnoName(err));
  WriteAll(" (errno ");
  WriteAll(digits + n);
  WriteAll(")\n");
  ::_exit(kCannotStart);
}

[[noreturn]] void RunChild(const ChildPlan& p) {
  sigset_t none;
  sigemptyset(&none);
  sigprocmask(SIG_SETMASK, &none, nullptr);
  struct sigaction dfl = {};
  dfl.sa_handler = SIG_DFL;
  sigemptyset(&dfl.sa_mask);
  ::sigaction(SIGPIPE, &dfl, nullptr);  // an ignored one would be inherited across exec
  if (p.death_signal != 0) {
    ::prctl(PR_SET_PDEATHSIG, p.death_signal);
    if (::getppid() != p.parent) ::_exit(kCannotStart);  // the parent died before prctl
  }
  if (p.group == ProcessGroup::kNewSession) ::setsid();
  if (p.group == ProcessGroup::kNewGroup) ::setpgid(0, 0);
  // stderr first, so that a file which cannot be opened is told there.
  for (int i : {2, 0, 1}) {
    if (p.paths[i].empty()) continue;
    const bool shared = i == 1 && p.paths[1] == p.paths[2];  // one file position for both
    int fd = shared ? 2 : ::open(p.paths[i].c_str(), i == 0 ? O_RDONLY : p.out_flags, 0644);
    if (fd < 0) Fail(p.open_failed[i], errno);
    if (fd == i) continue;
    ::dup2(fd, i);
    if (fd > 2) ::close(fd);
  }
  if (!p.cwd.empty() && ::chdir(p.cwd.c_str()) != 0) Fail(p.cwd_failed, errno);
  ::execve(p.program.c_str(), p.argv.data(), p.envp.data());
  Fail(p.exec_failed, errno);
}

// The pipe's write end is close-on-exec: EOF means the child exec'd or exited.
Status AwaitExec(int fd, const std::string& program) {
  pollfd pfd{fd, POLLIN, 0};
  for (;;) {
    int r = ::poll(&pfd, 1, kExecWaitMs);
    if (r < 0 && errno == EINTR) continue;
    if (r == 0) return InternalError("spawn " + program + ": the child did not start in 10 s");
    char c;
    ssize_t n = ::read(fd, &c, 1);
    if (n < 0 && errno == EINTR) continue;
    return Status::Ok();
  }
}

void Signal(int64_t pid, int sig, bool whole_group) {
  if (whole_group && ::kill(-static_cast<pid_t>(pid), sig) == 0) return;
  SignalProcess(pid, sig);  // not a group leader yet, or not asked to
}

}  // namespace

Result<int64_t> Spawn(const SpawnOptions& options) {
  if (options.argv.empty()) return InvalidArgumentError("spawn: empty command");
  std::unique_ptr<ChildPlan> plan = Plan(options);
  int sync[2];
  if (::pipe2(sync, O_CLOEXEC) != 0) {
    return InternalError(fmt::format("spawn {}: pipe: {}", plan->program, std::strerror(errno)));
  }
  pid_t pid = ::fork();
  if (pid == 0) {
    ::close(sync[0]);
    RunChild(*plan);
  }
  int fork_errno = errno;
  ::close(sync[1]);
  if (pid < 0) {
    ::close(sync[0]);
    return InternalError(
        fmt::format("spawn {}: fork: {}", plan->program, std::strerror(fork_errno)));
  }
  // Also here, so the group exists whichever of us runs first.
  if (options.group == ProcessGroup::kNewGroup) ::setpgid(pid, pid);
  Status started = AwaitExec(sync[0], plan->program);
  ::close(sync[0]);
  if (!started.ok()) {
    ::kill(pid, SIGKILL);
    ::waitpid(pid, nullptr, 0);
    return started;
  }
  return static_cast<int64_t>(pid);
}

ProcessStatus CheckProcess(int64_t pid) {
  ProcessStatus s;
  if (pid <= 0) return s;  // waitpid would take any child, kill a whole group
  int status = 0;
  pid_t r = ::waitpid(static_cast<pid_t>(pid), &status, WNOHANG);
  if (r == static_cast<pid_t>(pid)) {
    if (WIFEXITED(status)) s.exit_code = WEXITSTATUS(status);
    if (WIFSIGNALED(status)) s.signal = WTERMSIG(status);
    return s;
  }
  if (r == 0) {
    s.running = true;
    return s;
  }
  // Not our child (ECHILD): ask the kernel whether it runs and is not a zombie.
  if (::kill(static_cast<pid_t>(pid), 0) != 0 && errno == ESRCH) return s;
  std::ifstream stat("/proc/" + std::to_string(pid) + "/stat");
  std::string text((std::istreambuf_iterator<char>(stat)), std::istreambuf_iterator<char>());
  size_t close = text.rfind(')');
  s.running = close != std::string::npos && close + 2 < text.size() && text[close + 2] != 'Z';
  return s;
}

Result<ProcessStatus> WaitProcess(int64_t pid, double timeout_s) {
  if (pid <= 0) return InvalidArgumentError(fmt::format("wait: no process {}", pid));
  Clock* clock = RealClock();
  const double deadline = clock->MonotonicS() + std::max(0.0, timeout_s);
  for (double pause = 0.0005;; pause = std::min(2 * pause, kMaxPollS)) {
    ProcessStatus s = CheckProcess(pid);
    if (!s.running) return s;
    double left = deadline - clock->MonotonicS();
    if (left <= 0) {
      return DeadlineExceededError(
          fmt::format("process {} still running after {} s", pid, timeout_s));
    }
    clock->SleepFor(std::min(pause, left));
  }
}

Result<ProcessStatus> StopProcess(int64_t pid, double grace_s, bool whole_group) {
  if (pid <= 0) return InvalidArgumentError(fmt::format("stop: no process {}", pid));
  if (grace_s > 0) {
    Signal(pid, SIGTERM, whole_group);
    Result<ProcessStatus> ended = WaitProcess(pid, grace_s);
    if (ended.ok()) {
      if (whole_group) ::kill(-static_cast<pid_t>(pid), SIGKILL);  // what it left behind
      return ended;
    }
  }
  Signal(pid, SIGKILL, whole_group);
  Result<ProcessStatus> killed = WaitProcess(pid, kKillWaitS);
  if (!killed.ok()) return killed.status().WithContext("after SIGKILL");
  return killed;
}

bool ProcessMatches(int64_t pid, std::string_view needle) {
  if (pid <= 0 || !CheckProcess(pid).running) return false;
  std::ifstream in("/proc/" + std::to_string(pid) + "/cmdline", std::ios::binary);
  std::string cmdline((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  return cmdline.find(needle) != std::string::npos;
}

void IgnoreBrokenPipes() {
  struct sigaction ign = {};
  ign.sa_handler = SIG_IGN;
  sigemptyset(&ign.sa_mask);
  ::sigaction(SIGPIPE, &ign, nullptr);
}

void SignalProcess(int64_t pid, int sig) {
  if (pid > 0) ::kill(static_cast<pid_t>(pid), sig);
}

int SignalSession(int64_t sid, int sig) {
  if (sid <= 0) return 0;
  int signalled = 0;
  std::error_code ec;
  for (const auto& entry : std::filesystem::directory_iterator("/proc", ec)) {
    const std::string name = entry.path().filename().string();
    if (name.empty() || name.find_first_not_of("0123456789") != std::string::npos) continue;
    std::ifstream stat(entry.path() / "stat");
    std::string text((std::istreambuf_iterator<char>(stat)), std::istreambuf_iterator<char>());
    // "pid (comm) state ppid pgrp session ...": comm may hold spaces and ')'.
    size_t close = text.rfind(')');
    if (close == std::string::npos) continue;
    std::istringstream rest(text.substr(close + 1));
    std::string state;
    int64_t ppid = 0, pgrp = 0, session = 0;
    if (!(rest >> state >> ppid >> pgrp >> session) || session != sid) continue;
    int64_t pid = 0;
    for (char c : name) pid = pid * 10 + (c - '0');
    if (::kill(static_cast<pid_t>(pid), sig) == 0) ++signalled;
  }
  return signalled;
}

std::string DescribeExit(const ProcessStatus& status) {
  if (status.running) return "running";
  if (status.signal != 0) {
    return fmt::format("killed by signal {} ({})", status.signal, ::strsignal(status.signal));
  }
  if (status.exit_code >= 0) return fmt::format("exited with code {}", status.exit_code);
  return "ended (status unknown)";
}

}  // namespace spot
