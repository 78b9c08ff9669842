// Test helper: runs a program as a child process (through core/process.h)
// with stdout and stderr sent to files, so end-to-end tests can watch it,
// SIGKILL it and read what it said. Not thread-safe: use a ChildProcess from
// one thread.
#pragma once

#include <sys/types.h>

#include <string>
#include <vector>

#include "core/process.h"

namespace spot::testing {

struct ProcessResult {
  int exit_code = -1;   // -1 when killed by a signal
  int term_signal = 0;  // the signal that ended it, 0 if it exited
  std::string out;      // everything it wrote to stdout
  std::string err;      // and to stderr
};

class ChildProcess {
 public:
  // Starts argv[0] with argv (no shell), in our process group, stdin from
  // /dev/null. Output goes to `<log_prefix>.out/.err` (emptied first).
  ChildProcess(const std::vector<std::string>& argv, const std::string& log_prefix);
  ~ChildProcess();  // kills the child if still running
  ChildProcess(const ChildProcess&) = delete;
  ChildProcess& operator=(const ChildProcess&) = delete;

  bool Running();
  void Kill(int signal);
  // Waits for the child to end (at most timeout_s, then SIGKILL) and collects
  // output. When the child could not be started, `err` says why.
  ProcessResult Wait(double timeout_s = 600);

 private:
  pid_t pid_ = -1;
  ProcessStatus status_;
  bool reaped_ = false;
  std::string out_path_, err_path_;
  std::string spawn_error_;
};

// Runs to completion.
ProcessResult RunProcess(const std::vector<std::string>& argv, const std::string& log_prefix,
                         double timeout_s = 600);

}  // namespace spot::testing
