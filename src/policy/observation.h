// What a Policy sees and what it answers. Plain data, no I/O, no LibTorch: the
// simulator (sim/) and the live controller fill the same structs.
//
// Units: hours for time and work, $ per hour for prices. "Tick" is one step of
// the market's grid (gap_seconds of the traces); decisions are taken at the
// start of each tick.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "fleet/fleet.h"
#include "market/trace.h"

namespace spot::policy {

// The job being scheduled.
struct JobSpec {
  double compute_hours = 48;      // C: hours of work on one (gang of) instance(s), > 0
  double deadline_hours = 60;     // D: hours after the job's start, >= C
  double changeover_hours = 0.2;  // d: hours lost (billed, no progress) entering an instance
  int nodes = 1;                  // N: instances run as a gang; spot usable when count >= N
  double ondemand_price = 3.0;    // k: $ per hour per on-demand instance
  // Ready instances below which the job makes no progress; 0: nodes (a gang).
  int min_nodes = 0;
  // Heterogeneous instances' throughputs add up (the elastic trainer's
  // batch balancing); false: every instance runs at the slowest one's pace.
  bool balanced = true;
  // The job's state moved when it changes region (its checkpoint), in GB,
  // billed at `egress`'s $/GB between the regions (fleet/migration.h); 0:
  // moves are free.
  double checkpoint_gb = 0;
  const fleet::EgressPrices* egress = nullptr;  // not owned; outlives the job
};

// The job as the fleet model (fleet/fleet.h) sees it.
fleet::FleetJob ToFleetJob(const JobSpec& job);

enum class InstanceKind : uint8_t { kIdle = 0, kSpot = 1, kOnDemand = 2 };

// Where the job runs: nothing, spot in zone `zone` (an index into the market's
// zones), or on-demand (zone-independent; `zone` is ignored and kept -1).
struct Placement {
  InstanceKind kind = InstanceKind::kIdle;
  int zone = -1;

  bool operator==(const Placement&) const = default;
  static Placement Idle() { return {}; }
  static Placement Spot(int z) { return {InstanceKind::kSpot, z}; }
  static Placement OnDemand() { return {InstanceKind::kOnDemand, -1}; }
};

// The market as known at `now`: availability and price of each zone from the
// trace's first tick up to and including `now`. The future is not reachable
// through this view. Cheap to copy (pointers); the traces must outlive it.
class MarketView {
 public:
  MarketView() = default;
  // REQUIRES: every trace has the same gap and at least now + 1 ticks.
  MarketView(std::span<const market::Trace* const> zones, int64_t now, int nodes)
      : zones_(zones), now_(now), nodes_(nodes) {}

  int num_zones() const { return static_cast<int>(zones_.size()); }
  int64_t now() const { return now_; }  // absolute tick in the traces
  double gap_hours() const { return zones_.empty() ? 0 : zones_[0]->gap_seconds / 3600.0; }
  const market::Pool& pool(int z) const { return zones_[z]->pool; }

  // Spot capacity for the job's gang at tick `now` (count >= nodes).
  bool AvailableNow(int z) const { return zones_[z]->available[now_] >= nodes_; }
  // Spot $ per instance-hour now (1.0 when the trace has no prices).
  double PriceNow(int z) const { return PriceAt(z, now_); }
  // Counts for ticks [0, now] (history including now).
  std::span<const int32_t> AvailabilityHistory(int z) const {
    return {zones_[z]->available.data(), static_cast<size_t>(now_ + 1)};
  }
  // Prices for ticks [0, now]; empty when the trace has no prices.
  std::span<const double> PriceHistory(int z) const {
    if (!zones_[z]->has_prices()) return {};
    return {zones_[z]->price.data(), static_cast<size_t>(now_ + 1)};
  }
  int nodes() const { return nodes_; }

 private:
  double PriceAt(int z, int64_t t) const {
    return zones_[z]->has_prices() ? zones_[z]->price[t] : 1.0;
  }

  std::span<const market::Trace* const> zones_;
  int64_t now_ = 0;
  int nodes_ = 1;
};

// A policy's answer: the fleet to hold during this tick, as a target per
// pool (pools not named hold nothing), and whether to checkpoint now. Asking
// for more spot than a pool has, or for spot above the bid, gets what the
// market gives (fleet/fleet.h); a pool below its `min_count` holds nothing.
struct Decision {
  std::vector<fleet::PoolTarget> fleet;
  bool checkpoint_now = false;
  bool operator==(const Decision&) const = default;
};

// The gang form of a decision: the job's N nodes all in one place (min_count
// N), nothing for Idle. Today's single-placement policies answer this way.
Decision GangDecision(const Placement& p, int nodes);
// The placement a fleet target is, when it is a gang of `nodes` (or empty:
// Idle); nullopt for any other fleet.
std::optional<Placement> AsGang(std::span<const fleet::PoolTarget> fleet, int nodes);
// Where a fleet of instances runs as a gang: spot in zone z or on-demand when
// it is exactly `nodes` live instances in one such pool, else Idle.
Placement GangOf(std::span<const fleet::Instance> instances, int nodes);
// "idle", "spot:Z", "od" for gangs (the decision logs' spelling); otherwise
// the pools joined by '+', e.g. "spot:0=3+od:-1=1" ("@price" for a bid).
std::string PlacementName(const Placement& p);
std::string FleetName(std::span<const fleet::PoolTarget> fleet, int nodes);
// The inverse of FleetName (and PlacementName); InvalidArgument-free: an
// unparseable name is empty (idle). Counts of a gang name are `nodes`.
std::vector<fleet::PoolTarget> ParseFleetName(const std::string& name, int nodes);
// The fleet target that holds what `instances` are now (live ones).
std::vector<fleet::PoolTarget> FleetOf(std::span<const fleet::Instance> instances, int nodes);

// Everything a policy may know at the start of a tick. Its spans (market,
// fleet, types) are valid during the Decide() call only.
struct Observation {
  int64_t tick = 0;       // ticks since the job started
  double time_hours = 0;  // = tick * gap hours
  JobSpec job;
  double progress_hours = 0;         // compute-hours done (kept across preemptions)
  Placement current;                 // the fleet as a gang, after any preemption at this tick
  double changeover_left_hours = 0;  // of the current gang's changeover
  bool preempted_now = false;        // the market took instances back at this tick
  MarketView market;
  // Every instance held now, with its state; those the market took back at
  // this tick are listed as kPreempted. Empty where the driver keeps no fleet.
  std::span<const fleet::Instance> fleet;
  // Catalog facts per zone of `market`, then the job's reference type (the
  // on-demand pool of zone -1). Empty where unknown: then every zone is the
  // reference type at job.ondemand_price.
  std::span<const fleet::TypeFacts> types;

  double remaining_work() const { return job.compute_hours - progress_hours; }
  double remaining_time() const { return job.deadline_hours - time_hours; }
  // The gang decision for this job (see GangDecision).
  Decision Gang(const Placement& p) const { return GangDecision(p, job.nodes); }
};

// What a driver (SpotSim, the controller) shows a policy at tick `tick` of a
// job whose fleet is `instances`: the gang view (current, changeover left)
// derived from them, the rest as given.
Observation ObserveFleet(int64_t tick, const JobSpec& job, double progress_hours, bool preempted,
                         const MarketView& market, std::span<const fleet::Instance> instances,
                         std::span<const fleet::TypeFacts> types);

}  // namespace spot::policy
