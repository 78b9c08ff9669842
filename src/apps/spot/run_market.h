// The market of a `spot run` job: its traces (or the synthetic market when
// they are absent and the job allows it), the candidate zones, the capacity
// scale. Errors name the job file and field (exit 2).
#pragma once

#include <string>
#include <vector>

#include "control/run_spec.h"
#include "core/status.h"
#include "market/trace.h"

namespace spot::cli {

struct RunMarket {
  std::vector<market::Trace> zones;  // the candidate zones, scaled
  std::string description;           // "5 zones of availability/... (195 s ticks)" or synthetic
  int capacity_scale = 1;
  bool synthetic = false;
};

Result<RunMarket> LoadRunMarket(const control::RunSpec& spec);

}  // namespace spot::cli
