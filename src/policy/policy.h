// The Policy interface: the one object that decides where a job runs, driven
// by the simulator (sim/) over recorded markets and by the live controller
// over a real one. A policy does not know which of the two drives it.
//
// Lifecycle: Start() once per job, then Decide() at the start of every tick
// until the job completes. Not thread-safe; one instance per running job
// (the registry makes fresh ones).
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string_view>

#include "market/trace.h"
#include "policy/observation.h"

namespace spot::policy {

// What is known when a job starts. `market` holds the history before the job
// (up to and including its first tick).
struct JobStart {
  JobSpec job;
  MarketView market;
  int64_t start_tick = 0;  // absolute tick of the job's start in the traces
};

// The complete traces, future included. Only a simulator can give this, and
// only to policies whose needs_future() is true (the omniscient bound).
struct FutureView {
  std::span<const market::Trace* const> zones;
  int64_t start_tick = 0;
};

class Policy {
 public:
  virtual ~Policy() = default;

  virtual std::string_view name() const = 0;
  // True only for offline bounds; such a policy receives Prepare() before Start().
  virtual bool needs_future() const { return false; }
  virtual void Prepare(const FutureView& future) {}
  // Resets per-job state. Called before the first Decide().
  virtual void Start(const JobStart& start) {}
  // Where to run during the tick described by `obs`. Must be cheap: the
  // simulator calls it for every tick of thousands of jobs.
  virtual Decision Decide(const Observation& obs) = 0;
};

}  // namespace spot::policy
