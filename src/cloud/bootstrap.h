// What an instance of a provider whose machines are elsewhere (EC2 user
// data, a Slurm batch script) runs first: a POSIX shell script that exports
// the instance's SpotTrain variables, makes and enters its local directory
// and execs the worker (so the signals the machine or the scheduler sends the
// script reach the worker).
#pragma once

#include <string>
#include <vector>

#include "core/status.h"

namespace spot::cloud {

struct BootstrapSpec {
  std::string job;                  // SPOT_JOB
  std::string instance_id;          // SPOT_INSTANCE_ID: our id of the instance
  std::vector<std::string> argv;    // the worker's command line (required)
  std::string local_dir;            // SPOT_LOCAL_DIR, made and entered (required)
  std::string rendezvous_url;       // SPOT_RENDEZVOUS ("" = not exported)
  std::string checkpoint_location;  // SPOT_CHECKPOINT: the durable tier ("" = not exported)
  std::string comment;              // a line saying where the script runs ("" = none)
};

// #!/bin/sh, `set -eu`, the exports, `mkdir -p DIR`, `cd DIR`, then `exec`
// of argv, every value shell-quoted. InvalidArgument for an empty argv or
// local_dir, or a NUL byte anywhere (a shell cannot carry one).
Result<std::string> RenderBootstrap(const BootstrapSpec& spec);

// A word quoted for a POSIX shell ('...' with ' written '\'').
std::string ShellQuote(const std::string& word);

}  // namespace spot::cloud
