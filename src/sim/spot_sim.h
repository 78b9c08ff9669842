// SpotSim: replays a recorded (or synthetic) market and runs one job under a
// Policy, billing every instance-second. The model (docs/spotsim.md):
//   - ticks of the traces' gap g; spot capacity in zone z at tick t when
//     available[t] >= N (the job's nodes, run as a gang);
//   - at the start of each tick: a running spot instance whose zone has no
//     capacity is preempted (-> idle), then the policy decides IDLE, SPOT(z) or
//     OD; asking for spot without capacity is taken as IDLE;
//   - entering SPOT or OD from any other placement (also after a preemption,
//     and moving between zones) costs a changeover of d hours billed at the
//     new instance's price, without progress; then 1 compute-hour per hour;
//     progress is kept across preemptions (checkpointed);
//   - spot is billed at the zone's price series (1.0/h when the trace has
//     none), on-demand at k/h, per instance, per second; the tick in which
//     the job completes is billed pro rata up to completion;
//   - the job runs past its deadline if it must; if the traces end first the
//     rest is finished on on-demand (billed, deadline missed).
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "core/status.h"
#include "market/trace.h"
#include "policy/policy.h"

namespace spot::sim {

using policy::JobSpec;
using policy::Placement;

// One tick of a run, for timelines (recorded only when asked).
struct TickRecord {
  Placement placement;     // where the job ran during the tick
  bool preempted = false;  // its spot instance was lost at the tick's start
  double progress = 0;     // compute-hours done at the tick's end
  double cost = 0;         // $ spent by the tick's end
};

struct RunResult {
  double cost = 0;            // $
  double spot_hours = 0;      // instance-hours on spot (changeovers included), per node
  double od_hours = 0;        // the same on on-demand
  double finish_hours = 0;    // when the job completed, hours after its start
  bool met_deadline = false;
  int changeovers = 0;
  int preemptions = 0;
  std::vector<TickRecord> timeline;  // per tick, when RunOptions::record_timeline
};

struct RunOptions {
  bool record_timeline = false;
};

// InvalidArgument (naming the trace) unless every zone has the same gap > 0
// and the same number of ticks, and the job is well formed (C > 0, D > 0,
// d >= 0, N >= 1, k > 0).
Status ValidateMarket(std::span<const market::Trace* const> zones, const JobSpec& job);

// Runs the job from absolute tick `start_tick` of the traces.
// REQUIRES: ValidateMarket(zones, job).ok(), start_tick < ticks.
RunResult SimulateJob(policy::Policy& policy, std::span<const market::Trace* const> zones,
                      int64_t start_tick, const JobSpec& job, const RunOptions& options = {});

// The start ticks of S samples: s_i = floor(i * (T - ceil(D * 3600 / g)) / S).
// InvalidArgument when the traces are shorter than the deadline or S < 1.
Result<std::vector<int64_t>> SampleStarts(int64_t ticks, double gap_seconds,
                                          double deadline_hours, int samples);

}  // namespace spot::sim
