// The fleet model: the one set of rules for instances held in pools of a
// market, used by SpotSim (sim/), the controller's model of the job
// (control/) and the virtual-time fake provider (cloud/). Plain data, no I/O.
//
// Rules (docs/spotsim.md, "Fleets"):
//   - a pool is spot capacity of one market zone (its trace), or on-demand of
//     that zone's instance type, or on-demand of the job's reference type;
//   - at the start of every tick the market takes back spot instances: first
//     every instance whose bid (max price) is below the pool's price, then,
//     when the fleet still holds more than the pool's capacity
//     (available[t]), the newest instances above it (a partial reclaim:
//     k of N lost, not all or none);
//   - then the fleet is made to match a target: launches up to the pool's
//     capacity (and only when the price is at most the bid), a pool whose
//     target cannot reach its `min_count` holds nothing (a gang is all or
//     none, as EC2 CreateFleet's MinTargetCapacity), excess instances are
//     terminated newest first; on-demand pools have no capacity limit;
//   - a launched instance is billed from its launch and makes no progress
//     for the job's startup delay (changeover);
//   - the job progresses while at least `min_nodes` instances are ready, at
//     (sum of their relative throughputs) / nodes compute-hours per hour
//     (balanced data parallelism), or (ready count x the slowest one's
//     throughput) / nodes without balancing: a gang of `nodes` reference
//     instances makes 1 compute-hour per hour;
//   - every instance is billed per second at its pool's price in each tick
//     (spot: the trace's price, 1.0 $/h when it has none; on-demand: the
//     type's on-demand price); the tick in which the job completes is billed
//     up to the completion;
//   - the job's state lives in the region of the last zone it launched in
//     (the reference type's on-demand runs wherever it is): a launch in
//     another region moves it, billed once at checkpoint_gb x the egress
//     price between the two regions (fleet/migration.h) in that tick.
#pragma once

#include <compare>
#include <cstdint>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "fleet/migration.h"
#include "market/trace.h"

namespace spot::fleet {

enum class Lifecycle : uint8_t { kSpot = 0, kOnDemand = 1 };

// A pool of one zone of the market: spot capacity of zone `zone`, or
// on-demand of that zone's instance type; zone -1 with on-demand is the job's
// reference instance type, placed wherever the provider likes.
struct PoolRef {
  int zone = -1;
  Lifecycle lifecycle = Lifecycle::kOnDemand;

  auto operator<=>(const PoolRef&) const = default;
  bool spot() const { return lifecycle == Lifecycle::kSpot; }
  static PoolRef Spot(int z) { return {z, Lifecycle::kSpot}; }
  static PoolRef OnDemand(int z = -1) { return {z, Lifecycle::kOnDemand}; }
};

// Catalog facts of one pool's instance type.
struct TypeFacts {
  std::string instance_type;  // "p3.2xlarge"
  int gpus = 0;
  double memory_gb = 0;
  double throughput = 1;      // training speed relative to the job's reference instance, > 0
  double ondemand_price = 3;  // $ per instance-hour
};

// How many instances a decision wants in one pool.
struct PoolTarget {
  PoolRef pool;
  int count = 0;         // instances to hold, >= 0
  int min_count = 0;     // hold none unless at least this many can be held (a gang)
  double max_price = 0;  // spot bid in $/h; 0: none (the on-demand price caps it in practice)
  bool operator==(const PoolTarget&) const = default;
};

enum class InstanceState : uint8_t {
  kStarting = 0,   // launched, inside its startup delay
  kRunning = 1,    // ready
  kNoticed = 2,    // running with an interruption notice (live providers)
  kPreempted = 3,  // taken back by the market at this tick
};
const char* InstanceStateName(InstanceState s);

struct Instance {
  int64_t id = 0;  // launch order, from 1
  PoolRef pool;
  InstanceState state = InstanceState::kStarting;
  int64_t launched_tick = 0;  // absolute tick of the launch
  double startup_left_hours = 0;
  double max_price = 0;  // the bid it was launched with (0: none)
};

// The job as the fleet model sees it.
struct FleetJob {
  int nodes = 1;               // N: reference instances that make one compute-hour per hour, >= 1
  int min_nodes = 1;           // fewer ready instances make no progress (a gang: N), in [1, N]
  double startup_hours = 0.2;  // d, >= 0
  bool balanced = true;        // heterogeneous throughputs add up (the elastic trainer's balancing)
  double compute_hours = 48;   // C, > 0
  // The job's state moved when it changes region, in GB (>= 0; 0: moves are
  // free), billed at `egress`'s price between the regions.
  double checkpoint_gb = 0;
  const EgressPrices* egress = nullptr;  // not owned, outlives the model; null: no prices
};

// What one tick of running cost and achieved.
struct TickOutcome {
  double progress = 0;  // compute-hours done at the tick's end (or at completion)
  bool done = false;
  double used_hours = 0;      // of the tick, up to completion when done
  double cost = 0;            // $ billed for the tick
  double spot_hours = 0;      // instance-hours on spot / N
  double od_hours = 0;        // instance-hours on on-demand / N
  double migration_cost = 0;  // $ of moving the job's state across regions (in `cost`)
};

// The instances of one job in a market, advanced tick by tick:
//   Reclaim(t), then Apply(targets, t), then RunTick(t, progress).
// Not thread-safe. The traces must outlive it and share one tick grid.
class FleetModel {
 public:
  // `types` holds one entry per zone and a last one for the reference type
  // (PoolRef::OnDemand(-1)). REQUIRES: types.size() == zones.size() + 1.
  FleetModel(std::span<const market::Trace* const> zones, std::vector<TypeFacts> types,
             FleetJob job);

  // The market takes back spot instances at absolute tick `abs` (bids, then
  // capacity). Returns how many it took; they stay listed as kPreempted
  // until the next Reclaim.
  int Reclaim(int64_t abs);
  // Makes the fleet match `targets` (pools not named: none). Returns the
  // number of instances launched.
  int Apply(std::span<const PoolTarget> targets, int64_t abs);
  // Runs tick `abs` from `progress` compute-hours: startup delays, progress
  // and billing. A job already at compute_hours does nothing.
  TickOutcome RunTick(int64_t abs, double progress);
  // Gives back every instance (the traces ended).
  void Clear();
  // One instance at a time, for a world that launches and terminates them
  // one by one (a fake provider): Add launches one at `abs` and returns its
  // id; Remove gives one back (false: no live instance has that id).
  int64_t Add(const PoolRef& pool, double max_price, int64_t abs);
  bool Remove(int64_t id);

  std::span<const Instance> instances() const { return instances_; }
  std::span<const TypeFacts> types() const { return types_; }
  const FleetJob& job() const { return job_; }
  // Live instances (not preempted) in `pool`.
  int Held(const PoolRef& pool) const;
  // Spot capacity of zone z at `abs` (0 past the traces).
  int Capacity(int z, int64_t abs) const;
  // $ per instance-hour of `pool` at `abs`.
  double Price(const PoolRef& pool, int64_t abs) const;
  const TypeFacts& Type(const PoolRef& pool) const;
  // Progress per hour of a set of ready instances (see the rules above).
  double Rate(std::span<const Instance* const> ready) const;
  // Moves of the job's state across regions so far, and the zone it is in
  // (-1: nowhere yet).
  int migrations() const { return migrations_; }
  int state_zone() const { return state_zone_; }

 private:
  void Launch(const PoolTarget& t, int n, int64_t abs);
  void Terminate(const PoolRef& pool, int n);
  bool AnyAboveCapacity(int64_t abs) const;  // after held_per_zone_ is counted

  std::span<const market::Trace* const> zones_;
  std::vector<TypeFacts> types_;
  FleetJob job_;
  double h_ = 0;  // tick length in hours
  int64_t next_id_ = 1;
  int preempted_ = 0;                // instances listed as kPreempted
  std::vector<Instance> instances_;  // in launch order
  // Scratch space of RunTick and Reclaim, kept to spare an allocation a tick.
  std::vector<std::pair<double, const Instance*>> ready_at_;
  std::vector<const Instance*> ready_;
  std::vector<std::pair<PoolRef, int>> pools_;
  std::vector<int> held_per_zone_;
  // Migration: $ per move between zones (row: from; empty: free), the zone
  // holding the job's state, $ charged at the next RunTick.
  std::vector<double> move_usd_;
  int state_zone_ = -1;
  int migrations_ = 0;
  double pending_migration_ = 0;
};

// A spot pool's capacity at absolute tick `abs` (0 outside the trace) and its
// price ($ per instance-hour: 1.0 when the trace has none; the nearest tick's
// outside it). Everything that reads a zone's market at a tick reads it here.
int SpotCapacity(const market::Trace& zone, int64_t abs);
double SpotPrice(const market::Trace& zone, int64_t abs);

// The market's rule for one spot pool at one tick: of the instances held in
// it (their bids, in launch order), which it takes back (indices, ascending):
// every one whose bid is below `price`, then the newest above `capacity`.
// FleetModel::Reclaim applies it to every pool; providers that hold real
// instances (the local one) apply it to theirs.
std::vector<size_t> ReclaimedInPool(std::span<const double> bids_in_launch_order, int capacity,
                                    double price);

// Default catalog facts: every zone and the reference type run at
// throughput 1 and cost `ondemand_price` on demand.
std::vector<TypeFacts> UniformTypes(std::span<const market::Trace* const> zones,
                                    double ondemand_price);

}  // namespace spot::fleet
