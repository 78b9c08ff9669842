#include "apps/spot/test_process.h"

#include <signal.h>

#include <fstream>
#include <sstream>

#include "core/process.h"

namespace spot::testing {
namespace {

std::string Slurp(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

}  // namespace

ChildProcess::ChildProcess(const std::vector<std::string>& argv, const std::string& log_prefix)
    : out_path_(log_prefix + ".out"), err_path_(log_prefix + ".err") {
  // In our process group, so Ctrl-C on the test also stops it.
  Result<int64_t> pid = Spawn({.argv = argv,
                               .truncate = true,
                               .out = Output::File(out_path_),
                               .err = Output::File(err_path_),
                               .group = ProcessGroup::kInherit});
  if (pid.ok()) {
    pid_ = static_cast<pid_t>(*pid);
  } else {
    spawn_error_ = pid.status().ToString();
  }
}

ChildProcess::~ChildProcess() {
  if (pid_ > 0 && !reaped_) (void)StopProcess(pid_, /*grace_s=*/0);
}

bool ChildProcess::Running() {
  if (pid_ <= 0 || reaped_) return false;
  if (ProcessStatus s = CheckProcess(pid_); !s.running) {
    reaped_ = true;
    status_ = s;
  }
  return !reaped_;
}

void ChildProcess::Kill(int signal) {
  if (pid_ > 0 && !reaped_) SignalProcess(pid_, signal);
}

ProcessResult ChildProcess::Wait(double timeout_s) {
  if (pid_ > 0 && !reaped_) {
    Result<ProcessStatus> s = WaitProcess(pid_, timeout_s);
    if (!s.ok()) s = StopProcess(pid_, /*grace_s=*/0);  // past the deadline: SIGKILL
    if (s.ok()) status_ = *s;
    reaped_ = s.ok();
  }
  ProcessResult r;
  r.exit_code = status_.exit_code;
  r.term_signal = status_.signal;
  r.out = Slurp(out_path_);
  r.err = spawn_error_.empty() ? Slurp(err_path_) : spawn_error_;
  return r;
}

ProcessResult RunProcess(const std::vector<std::string>& argv, const std::string& log_prefix,
                         double timeout_s) {
  ChildProcess p(argv, log_prefix);
  return p.Wait(timeout_s);
}

}  // namespace spot::testing
