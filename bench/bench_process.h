// A child process for the workloads that run the real `spot` binary (or
// torchrun), through core/process.h: in its own process group, so the whole
// tree it starts can be killed, with its output in a log file (emptied
// first) and our stdin. Not thread-safe: use a Proc from one thread.
#pragma once

#include <signal.h>

#include <cstdint>
#include <string>
#include <vector>

#include "core/process.h"

namespace spot::bench {

class Proc {
 public:
  Proc(const std::vector<std::string>& argv, const std::string& log) {
    Result<int64_t> pid = Spawn({.argv = argv,
                                 .log_path = log,
                                 .truncate = true,
                                 .inherit_stdin = true,
                                 .group = ProcessGroup::kNewGroup});
    if (pid.ok()) pid_ = *pid;
  }
  ~Proc() { KillAll(); }
  Proc(const Proc&) = delete;
  Proc& operator=(const Proc&) = delete;

  bool started() const { return pid_ > 0; }
  // SIGKILL to the whole process group.
  void KillAll() {
    if (pid_ <= 0) return;
    (void)StopProcess(pid_, /*grace_s=*/0, /*whole_group=*/true);
    pid_ = -1;
  }
  // SIGTERM to the process only (`spot run` then cancels its job and
  // terminates its fleet), then up to `grace_s` for it to end.
  void Terminate(double grace_s) {
    if (pid_ <= 0) return;
    SignalProcess(pid_, SIGTERM);
    Wait(grace_s);
  }
  // Exit code, or -signal; -1000 on timeout.
  int Wait(double timeout_s) {
    if (pid_ <= 0) return -1000;
    Result<ProcessStatus> s = WaitProcess(pid_, timeout_s);
    if (!s.ok()) return -1000;
    pid_ = -1;
    return s->signal != 0 ? -s->signal : s->exit_code;
  }

 private:
  int64_t pid_ = -1;
};

}  // namespace spot::bench
