// The spot scheduling problem as a Markov decision process over a fitted
// availability chain (availability_chain.h), solved backward once per
// (chain, job) and cached.
//
// State at step i (time i * step): the deficit x = time - progress on a grid
// of step / cells_per_step, what the job holds (idle, spot, on-demand) and
// the chain state (up or down, by run age). Per step the job may:
//   idle       deficit + step, free;
//   on-demand  deficit + d when entering (changeover), k per hour;
//   spot       (up states only) deficit + d when entering, the chain's mean
//              spot price per hour; when the chain goes down during the step
//              the job is taken back halfway (half a step lost, half billed).
// A job whose deficit passes D - C - 2d is on the 2d safety net that every
// UP-family policy latches (zone_choice.h): it finishes on on-demand, paying
// k (remaining work + d, unless already on on-demand); that net, not the
// model, is what keeps deadlines. The solution maps every state to the
// action of least expected cost.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "policy/availability_chain.h"
#include "policy/observation.h"

namespace spot::policy {

enum class MdpAction : uint8_t { kIdle = 0, kSpot = 1, kOnDemand = 2 };

struct MdpGrid {
  double step_hours = 0.2;  // one step of the chain, > 0
  int cells_per_step = 2;   // deficit cells per step, >= 2
};

// Immutable, shareable between jobs and threads.
class MdpSolution {
 public:
  MdpSolution(const AvailabilityChain& chain, const JobSpec& job, const MdpGrid& grid);

  // The least-cost action at `time_hours` after the job's start with
  // `deficit_hours` = time - progress (changeover still to pay included),
  // holding `held`, the market in chain state `state`. On-demand once the
  // deficit is past the safety net; never spot in a down state.
  MdpAction Act(double time_hours, double deficit_hours, InstanceKind held, int state) const;
  // Expected cost ($ per instance) of the job from its start, idle, in chain
  // state `state`, when every decision follows Act().
  double ExpectedCost(int state) const { return start_value_[state]; }

 private:
  size_t Index(int64_t i, int64_t x, int mode, int state) const;

  JobSpec job_;
  MdpGrid grid_;
  int64_t steps_ = 0;     // N = ceil(D / step)
  int64_t net_cell_ = 0;  // largest deficit cell before the safety net; < 0: none
  std::vector<uint8_t> action_;
  std::vector<double> start_value_;
};

// The solution for (chain, job, grid), solved once and kept in a small
// process-wide cache (jobs that start on the same day of a market share
// their chain, hence their solution). Thread-safe.
std::shared_ptr<const MdpSolution> SolveMdp(const AvailabilityChain& chain, const JobSpec& job,
                                            const MdpGrid& grid);

}  // namespace spot::policy
