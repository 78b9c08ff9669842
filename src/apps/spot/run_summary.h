// The end of `spot run`: what the job did and cost, against on demand and
// against SpotSim's prediction for the same market segment; printed and
// written to <job dir>/run-summary.json.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "control/controller.h"
#include "control/job_store.h"
#include "control/run_spec.h"
#include "market/trace.h"

namespace spot::cli {

// Returns the command's exit code (0 when the job succeeded).
int PrintRunSummary(control::JobStore& store, const control::RunSpec& spec,
                    const std::vector<market::Trace>& zones, const std::string& job_dir,
                    const control::JobOutcome& outcome, int64_t step_log_lines);

}  // namespace spot::cli
