// The `fleet` workload of spot_bench: what a fleet costs the controller and
// the simulator. Over `pools` synthetic spot pools (two-state Markov capacity
// that can hold the fleet, partial reclaims, moving prices), an elastic job
// (min_nodes 1) under the fleet-up policy:
//   1. the real control::Controller in virtual time (ManualClock), over a
//      cloud::FakeProvider and a real SQLite JobStore, at N = 1, 100 and
//      1,000 instances, with the store on tmpfs and on the scratch
//      directory's disk: reconcile passes, mean and max
//      controller time per pass (and per pass per instance), provider API
//      calls per pass, wall seconds;
//   2. SpotSim runs/s of fleet-up at N = 1, 10 and 100 (sim::EvaluatePolicy)
//      against `up` on the same pools and job, in the same run.
// LibTorch-free header.
#pragma once

#include <string>
#include <vector>

#include "core/status.h"

namespace spot::bench {

struct FleetBenchOptions {
  std::string work_dir;  // scratch directory (on disk): the "disk" arms' SQLite stores
  // A memory-backed directory for the "tmpfs" arms' stores, where a commit's
  // fsync is free and the figures are the controller's own time; "" or
  // absent: those arms are skipped.
  std::string tmpfs_dir = "/dev/shm";
  int pools = 50;  // synthetic spot pools, >= 1
  // Work of each controller arm: min(controller_max_hours,
  // controller_instance_hours / N) compute-hours, so that the big fleets
  // stay within a few seconds; the deadline is 1.5 x that + 1 h (room for spot).
  double controller_max_hours = 24;
  double controller_instance_hours = 1500;
  std::vector<int> controller_nodes = {1, 100, 1000};  // store on tmpfs
  std::vector<int> disk_nodes = {1, 100, 1000};        // store on disk: an fsync per commit
  std::vector<int> sim_nodes = {1, 10, 100};
  int sim_samples = 300;  // job starts per policy and N
};

// Returns the report (Markdown) or the error that stopped it.
Result<std::string> RunFleetWorkload(const FleetBenchOptions& options);

}  // namespace spot::bench
