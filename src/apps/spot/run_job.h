// The job file of `spot run`, `spot monitor` and `spot report`: the run spec
// and the train section, read and checked together.
#pragma once

#include <yaml-cpp/yaml.h>

#include <string>

#include "control/run_spec.h"
#include "core/status.h"
#include "train/train_spec.h"

namespace spot::cli {

struct LoadedJob {
  control::RunSpec run;
  train::TrainSpec train;
  YAML::Node train_node;  // the train section as written, for the workers' job file
  std::string hash;
  std::string job_dir;
};

// Reads and checks a job file; errors name the file, line and field.
Result<LoadedJob> LoadJob(const std::string& path);

// Where the job's controller keeps its state (controller.state_dir, or
// <job dir>/controller).
std::string JobStateDir(const LoadedJob& j);

}  // namespace spot::cli
