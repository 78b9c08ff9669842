// The data behind SpotMonitor's dashboard and `spot report` (its fields are
// documented in docs/monitor.md), built from the job store, the job's market
// and the files the training writes in the job directory.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "control/job_store.h"
#include "control/run_spec.h"
#include "core/status.h"
#include "market/trace.h"

namespace spot::control {

struct DashboardInputs {
  const RunSpec* spec = nullptr;
  JobStore* store = nullptr;
  std::vector<const market::Trace*> zones;
  std::string job_dir;
  int64_t epochs = 0;
  bool live = false;  // the page keeps polling while true
  double wall_now_unix_s = 0;
  // Pool risks at the current tick (-1: unknown), one per zone; empty: computed.
  std::vector<double> pool_risk;
};

// NotFound for a job the store does not have.
Result<std::string> DashboardData(const DashboardInputs& in);

// Simulated seconds since the job's start: now for a live job, the end of
// its last instance for one that ended.
double JobNowSeconds(const JobRecord& job, const std::vector<InstanceRecord>& instances,
                     double wall_now_unix_s);

}  // namespace spot::control
