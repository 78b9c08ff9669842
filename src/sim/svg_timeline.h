// A timeline picture of one simulated run (SVG, self-contained): spot
// availability of each zone, where the job ran, its progress against the
// uniform-progress line and the deadline, and the cumulative cost.
#pragma once

#include <cstdint>
#include <span>
#include <string>

#include "market/trace.h"
#include "sim/spot_sim.h"

namespace spot::sim {

// REQUIRES: run.timeline was recorded for a run from `start_tick` of `zones`.
std::string RenderTimelineSvg(const RunResult& run, std::span<const market::Trace* const> zones,
                              int64_t start_tick, const JobSpec& job, const std::string& title);

}  // namespace spot::sim
