// fleet-up: Uniform Progress (uniform_progress.h) for a fleet of N reference
// nodes over many pools. At each tick, for an elastic job (0 < min_nodes < N):
//   1. safety net: once remaining time < remaining work + 2d, the whole job
//      on N on-demand reference instances until the end (latched, UP's net);
//   2. spot: a target throughput of N reference units, filled from the spot
//      pools that have capacity now (the count of the tick), first by keeping
//      the instances held where their pool still has room (a move costs a
//      changeover), then from the cheapest pools per unit of throughput
//      (lowest zone on ties), at most ceil(N / spread) instances a pool so
//      that one pool's reclaim takes a bounded share of the fleet; a pool
//      whose price per unit is above the on-demand reference's is not used;
//   3. behind (progress < ep(t)), or holding on-demand and progress <
//      ep(t + 2d) (UP's hysteresis, which also keeps the on-demand instances
//      held ahead of new spot): the missing throughput on on-demand
//      reference instances (PoolRef::OnDemand()); ahead, none;
//   4. fewer instances than min_nodes make no progress: such a fleet is
//      dropped (idle) rather than billed.
// Every pool target has min_count 0 (elastic). A gang job (min_nodes 0 or N)
// gets `up`'s decisions, decision for decision. Throughputs are counted as
// adding up (balanced training). Deterministic; Decide allocates only the
// returned vector (scratch space is kept between ticks).
#pragma once

#include <cstdint>
#include <memory>

#include "core/config_fields.h"
#include "policy/policy.h"

namespace spot::policy {

struct FleetUpOptions {
  // The fleet is spread over at least this many spot pools when it can be:
  // at most ceil(N / spread) instances in one pool. >= 1 (1: one pool may
  // hold the whole fleet). Default 4: one reclaim takes at most a quarter.
  int64_t spread = 4;
  // Spot bid as a multiple of the job's on-demand price (max_price =
  // factor x k); pools priced above it are not used. 0 (default): no bid.
  double max_price_factor = 0;
};

// Its parameters (a job's `policy: {name: fleet-up, spread: 8}`), with bounds and help.
void DeclareFields(FleetUpOptions& o, FieldVisitor& v);

std::unique_ptr<Policy> MakeFleetUpPolicy(FleetUpOptions options = {});

}  // namespace spot::policy
