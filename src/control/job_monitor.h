// SpotMonitor's controller side (docs/monitor.md). Beside the reconcile loop,
// about once a second, a JobMonitor:
//   - refreshes the controller's Prometheus metrics from the job store, the
//     market and the training's progress (instances by pool and lifecycle,
//     launches, preemptions, notices, dollars spent, the pools' prices,
//     capacity and predicted preemption risk, progress against the deadline,
//     workers per generation);
//   - scrapes each live worker's /metrics and records, per market tick, the
//     fraction of the tick it spent computing (the dashboard's heatmap);
//   - records an "epoch" event when the training finishes an epoch;
//   - writes the job's cost to its TensorBoard run directory.
// It also answers the dashboard's data and Prometheus' http_sd target list.
// Thread-safe: Refresh runs on one thread, the API server's readers on others.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "control/job_store.h"
#include "control/run_spec.h"
#include "core/clock.h"
#include "core/status.h"
#include "market/trace.h"

namespace spot::control {

struct JobMonitorOptions {
  RunSpec spec;
  JobStore* store = nullptr;
  std::vector<const market::Trace*> zones;  // the job's market
  std::string job_dir;                      // progress.json, steps.csv, tensorboard/
  std::string progress_path;                // the training's progress JSON
  int64_t epochs = 0;                       // the training's epochs (0: it runs by steps)
  std::string tensorboard_dir;              // where cost scalars go ("" = none)
  // Wall time (NowUnixS) comes from here; nullptr: the real clock.
  Clock* clock = nullptr;
  // Where an instance's worker serves /metrics, "HOST:PORT" as the worker
  // published it (MetricsAddressKey in the rendezvous: its address toward
  // the rendezvous, so instances on another network are scraped there);
  // "" or unset: not published, 127.0.0.1 at the port the store holds.
  std::function<std::string(const std::string& instance_id)> metrics_address;
};

class JobMonitor {
 public:
  explicit JobMonitor(JobMonitorOptions options);
  ~JobMonitor();

  // One refresh (see the file comment). Errors are the store's; a worker that
  // does not answer its scrape is skipped.
  Status Refresh();
  // A reconcile pass took this long (a histogram).
  void ObserveReconcile(double seconds);

  std::string MetricsText() const;
  // [{"targets":["HOST:PORT"],"labels":{...}}] for the live workers.
  std::string TargetsJson() const;
  // The dashboard's data (docs/monitor.md); `live` tells the page to keep polling.
  Result<std::string> DashboardJson(bool live) const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// The job-store key under which a worker's metrics port is kept.
std::string MetricsPortKey(const std::string& instance_id);

// The rendezvous key under which an instance's worker (or agent) publishes
// where it serves /metrics ("HOST:PORT", HOST in brackets when IPv6).
std::string MetricsAddressKey(const std::string& job, const std::string& instance_id);

// A "HOST:PORT" as published under MetricsAddressKey (brackets taken off an
// IPv6 host). InvalidArgument naming the text when it is not one (no host,
// a port that is not an integer in 1..65535).
Result<std::pair<std::string, int>> ParseMetricsAddress(const std::string& text);

// The probability that a gang of `nodes` spot instances entering the pool at
// `abs_tick` is reclaimed within `horizon_h` hours: 1 - S(a + h) / S(a), with
// S the Kaplan-Meier survival of the pool's capacity runs before `abs_tick`
// and `a` the age of the run in progress. -1 when the pool has no capacity
// now or its history holds no preemption to learn from.
double PreemptionRisk(const market::Trace& trace, int64_t abs_tick, int nodes, double horizon_h);

}  // namespace spot::control
