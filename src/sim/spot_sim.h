// SpotSim: replays a recorded (or synthetic) market and runs one job under a
// Policy, billing every instance-second. The model (docs/spotsim.md) is the
// fleet model of fleet/fleet.h, applied at every tick of the traces' gap g:
//   - at the start of each tick the market takes back spot instances (bids
//     below the price, then the newest above the pool's capacity
//     available[t]); then the policy decides the fleet, and the fleet is made
//     to match it (launches up to capacity, a gang all or none);
//   - a launched instance costs a changeover of d hours, billed, without
//     progress; ready instances make progress at their relative throughput
//     (a gang of N reference instances: 1 compute-hour per hour); progress
//     is kept across preemptions (checkpointed);
//   - spot is billed at the zone's price series (1.0/h when the trace has
//     none), on-demand at the type's price (k/h for the reference type), per
//     instance, per second; the tick in which the job completes is billed pro
//     rata up to completion;
//   - a launch in another region than the job's state moves the state there,
//     billed once at job.checkpoint_gb x the egress $/GB between the regions
//     (zones' regions from their names: us-east-1a is in us-east-1);
//   - the job runs past its deadline if it must; if the traces end first the
//     rest is finished on N on-demand reference instances (billed, deadline
//     missed).
// For a gang policy (N instances in one place) this is the single-placement
// model of the first SpotSim, result for result.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "core/status.h"
#include "fleet/fleet.h"
#include "market/trace.h"
#include "policy/policy.h"

namespace spot::sim {

using policy::JobSpec;
using policy::Placement;

// One tick of a run, for timelines (recorded only when asked).
struct TickRecord {
  Placement placement;     // where the job ran during the tick (Idle for a non-gang fleet)
  std::string current;     // the fleet held after the market's reclaims, before the decision
  std::string fleet;       // the fleet held during the tick (policy::FleetName)
  bool preempted = false;  // the market took instances back at the tick's start
  double progress = 0;     // compute-hours done at the tick's end
  double cost = 0;         // $ spent by the tick's end
};

struct RunResult {
  double cost = 0;          // $
  double spot_hours = 0;    // instance-hours on spot (changeovers included), per node
  double od_hours = 0;      // the same on on-demand
  double finish_hours = 0;  // when the job completed, hours after its start
  bool met_deadline = false;
  int changeovers = 0;
  int preemptions = 0;               // ticks at which the market took instances back
  int instances_reclaimed = 0;       // instances it took
  int migrations = 0;                // moves of the job's state across regions
  double migration_cost = 0;         // $ of those moves (in `cost`)
  std::vector<TickRecord> timeline;  // per tick, when RunOptions::record_timeline
};

struct RunOptions {
  bool record_timeline = false;
  // Catalog facts per zone, then the reference type (fleet::FleetModel);
  // empty: every type is the reference one at the job's on-demand price.
  std::vector<fleet::TypeFacts> types;
};

// InvalidArgument (naming the trace) unless every zone has the same gap > 0
// and the same number of ticks, and the job is well formed (C > 0, D > 0,
// d >= 0, N >= 1, k > 0, checkpoint GB >= 0 with an egress price between
// every two regions of the zones when it is > 0).
Status ValidateMarket(std::span<const market::Trace* const> zones, const JobSpec& job);

// The job priced at the on-demand price its zones record
// (market::Trace::ondemand_price, as SkyNomad's traces carry it) when every
// zone records the same one; `job` unchanged otherwise.
JobSpec WithRecordedOnDemandPrice(JobSpec job, std::span<const market::Trace* const> zones);

// Runs the job from absolute tick `start_tick` of the traces.
// REQUIRES: ValidateMarket(zones, job).ok(), start_tick < ticks.
RunResult SimulateJob(policy::Policy& policy, std::span<const market::Trace* const> zones,
                      int64_t start_tick, const JobSpec& job, const RunOptions& options = {});

// The start ticks of S samples: s_i = floor(i * (T - ceil(D * 3600 / g)) / S).
// InvalidArgument when the traces are shorter than the deadline or S < 1.
Result<std::vector<int64_t>> SampleStarts(int64_t ticks, double gap_seconds, double deadline_hours,
                                          int samples);

}  // namespace spot::sim
