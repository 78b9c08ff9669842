// Local processes for the local provider: start a detached child with its own
// environment and log file, find out whether it still runs, and recognize it
// again after the parent restarted (pids are reused, so a pid alone is not
// proof). POSIX only.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "core/status.h"

namespace spot::cloud {

struct SpawnOptions {
  std::vector<std::string> argv;  // argv[0] is the executable's path (no PATH search)
  std::vector<std::pair<std::string, std::string>> env;  // added to (or replacing in) ours
  std::string log_path;     // stdout and stderr appended here; "" = /dev/null
  bool new_session = true;  // setsid: the child outlives our process group's signals
};

// Starts the child; Internal naming the executable when fork or exec fails
// (an exec failure is seen as exit code 127 by Check()).
Result<int64_t> Spawn(const SpawnOptions& options);

struct ProcessStatus {
  bool running = false;
  int exit_code = -1;  // when it exited normally; -1 when killed or unknown
  int signal = 0;      // when a signal ended it (known only for our own children)
};

// Reaps our own child when it has ended; for a process we did not start
// (adopted after a restart), only running or not is known.
ProcessStatus CheckProcess(int64_t pid);

// True when `pid` runs and its command line contains `needle` (an instance id).
bool ProcessMatches(int64_t pid, std::string_view needle);

// Sends `sig` (no error when the process is already gone).
void SignalProcess(int64_t pid, int sig);

// A free TCP port on 127.0.0.1 at the time of the call (bound, then released).
Result<int> PickFreePort();

}  // namespace spot::cloud
