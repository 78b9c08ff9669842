// The end of `spot run`: what the job did and cost, against on demand and
// against SpotSim's prediction for the same market segment; printed and
// written to <job dir>/run-summary.json. SpotSim predicts with the training
// speed the run measured (and, beside it, with the job file's compute_hours
// estimate), so the prediction is comparable with what the run cost.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "apps/spot/run_market.h"
#include "control/controller.h"
#include "control/job_store.h"
#include "control/run_spec.h"

namespace spot::cli {

// The compute hours of the whole job on one gang at the speed a run measured:
// the hours its fleet held instances (the ticks whose decision holds any),
// less `changeover_hours` per change of fleet (SpotSim adds those back), over
// the fraction of the job done. `finished_hours` >= 0: the job finished that
// many hours after its start; < 0: it did not, and the fraction is the last
// decision's progress. -1 when nothing was measured.
double MeasuredComputeHours(const std::vector<control::DecisionRecord>& decisions, double gap_hours,
                            double compute_hours, double changeover_hours, double finished_hours);

// Returns the command's exit code (0 when the job succeeded).
int PrintRunSummary(control::JobStore& store, const control::RunSpec& spec, const RunMarket& market,
                    const std::string& job_dir, const control::JobOutcome& outcome,
                    int64_t step_log_lines);

}  // namespace spot::cli
