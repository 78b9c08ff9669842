// The market of a `spot run` job: its traces (the default synthetic market
// when it names none), the candidate zones, the capacity scale. With
// `market.when_missing: synthetic`, synthetic data stands in for each named
// file that is missing, and for that file only: the zones stay those the job
// names (see LoadMarket in sim_market.h). The traces read by
// market.trace_convention. Errors name the job file and field
// (market.traces, market.prices, resources.zones, ...; exit 2).
#pragma once

#include <string>
#include <vector>

#include "control/run_spec.h"
#include "core/status.h"
#include "market/trace.h"

namespace spot::cli {

struct RunMarket {
  std::vector<market::Trace> zones;  // the candidate zones, scaled
  // "2 zones of aws-v100-2023-02 (195 s ticks, with spot prices)", and
  // "; SYNTHETIC data stands in for the missing F, G" when files are missing.
  std::string description;
  // One line per missing file: the file and what stands in for it (for
  // warnings and the run's summary).
  std::vector<std::string> stand_ins;
  int capacity_scale = 1;
  // $ per instance-hour on demand: resources.ondemand_price when the job file
  // gives it, else what the zones' traces record, else the field's default.
  // The caller sets the job's resources.ondemand_price to it.
  double ondemand_price = 0;
  bool synthetic = false;  // the job names no trace: the default synthetic market
};

Result<RunMarket> LoadRunMarket(const control::RunSpec& spec);

}  // namespace spot::cli
