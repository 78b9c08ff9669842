// Subcommands of the `spot` CLI. Each adds itself to the app and runs from a
// plain struct of parsed arguments, returning the process exit code.
#pragma once

#include <string>

namespace CLI {
class App;
}

namespace spot::cli {

inline constexpr int kExitOk = 0;
inline constexpr int kExitFailure = 1;
inline constexpr int kExitBadInput = 2;

struct TrainArgs {
  std::string job_path;
  std::string step_log;
  bool plain_progress = false;
  double log_interval_s = 10;
};

CLI::App* AddTrainCommand(CLI::App& app, TrainArgs* args);
int RunTrain(const TrainArgs& args);

}  // namespace spot::cli
