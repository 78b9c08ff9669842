// What `spot agent` runs on an instance of a command workload: the job's
// program and how to start it, written by `spot run` into the job's
// directory (agent.json) and read by every instance's agent.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "core/status.h"

namespace spot::cli {

struct AgentSpec {
  std::string job;
  std::string run;      // sh -c
  std::string setup;    // "" = none
  std::string workdir;  // absolute
  std::vector<std::pair<std::string, std::string>> envs;
  std::string checkpoint_dir;  // absolute: SPOT_CHECKPOINT_DIR
  int nproc_per_node = 1;
  std::string notice_signal = "SIGTERM";
  int min_nodes = 1, max_nodes = 1;
  double liveness_ttl_s = 3;
  // How long the program has between the agent's signal (a stop, a gang
  // change) and SIGKILL.
  double stop_grace_s = 10;
  std::string token_file;  // the controller's API token: SPOT_TOKEN_FILE
};

std::string AgentSpecJson(const AgentSpec& s);
// InvalidArgument naming `file` and the field for anything but such JSON.
Result<AgentSpec> ParseAgentSpec(const std::string& text, const std::string& file);

}  // namespace spot::cli
