// What a Policy sees and what it answers. Plain data, no I/O, no LibTorch: the
// simulator (sim/) and the live controller fill the same structs.
//
// Units: hours for time and work, $ per hour for prices. "Tick" is one step of
// the market's grid (gap_seconds of the traces); decisions are taken at the
// start of each tick.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "market/trace.h"

namespace spot::policy {

// The job being scheduled.
struct JobSpec {
  double compute_hours = 48;     // C: hours of work on one (gang of) instance(s), > 0
  double deadline_hours = 60;    // D: hours after the job's start, >= C
  double changeover_hours = 0.2; // d: hours lost (billed, no progress) entering an instance
  int nodes = 1;                 // N: instances run as a gang; spot usable when count >= N
  double ondemand_price = 3.0;   // k: $ per hour per on-demand instance
};

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

// Everything a policy may know at the start of a tick.
struct Observation {
  int64_t tick = 0;            // ticks since the job started
  double time_hours = 0;       // = tick * gap hours
  JobSpec job;
  double progress_hours = 0;   // compute-hours done (kept across preemptions)
  Placement current;           // after any preemption at this tick
  double changeover_left_hours = 0;  // of the current instance's changeover
  bool preempted_now = false;  // the spot instance was lost at this tick
  MarketView market;

  double remaining_work() const { return job.compute_hours - progress_hours; }
  double remaining_time() const { return job.deadline_hours - time_hours; }
};

// A policy's answer: where the job should run during this tick. Asking for
// spot in a zone without capacity is treated as idle by the simulator.
struct Decision {
  Placement target;
  bool operator==(const Decision&) const = default;
};

// The decision as a fleet, the form the live controller reconciles against:
// how many spot and on-demand instances to hold in each pool.
struct PoolTarget {
  int zone = -1;  // -1: on-demand, placed by the provider
  int spot = 0;
  int on_demand = 0;
};
std::vector<PoolTarget> ToFleet(const Decision& d, const JobSpec& job);

}  // namespace spot::policy
