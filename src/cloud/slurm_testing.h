// A real Slurm cluster on this machine for tests: munged with its own key
// and socket, slurmctld on a bridge, and N slurmd nodes, each in a network
// namespace of its own (a veth pair to the bridge, an address on a private
// /24), so jobs land on distinct "hosts". Needs root and Debian's slurmctld,
// slurmd, slurm-client and munge.
//
// The cluster's partitions:
//   spot    PriorityTier=1, PreemptMode=CANCEL, GraceTime=grace_time_s (default)
//   spotlong  as spot with GraceTime=120 (a notice seen while the program saves)
//   urgent  PriorityTier=10, PreemptMode=OFF: its jobs preempt spot's
//   closed  State=DOWN: jobs wait there with Reason PartitionDown
// with PreemptType=preempt/partition_prio and
// SlurmctldParameters=preempt_send_user_signal (a job's --signal is sent when
// its preemption begins).
//
// Everything it starts is ended and everything it creates (namespaces,
// links, files) removed by the destructor, also when a test fails; a cluster
// left behind by a killed test process is cleaned up by the next Start().
// Not thread-safe.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "cloud/slurm_cli.h"
#include "core/status.h"
#include "core/temp_dir.h"

namespace spot::cloud {

struct SlurmClusterOptions {
  int nodes = 2;                // slurmd nodes, node1..nodeN, >= 1
  int cpus_per_node = 1;        // CPUs each node offers
  int grace_time_s = 5;         // GraceTime of the spot partition
  double start_timeout_s = 60;  // wall seconds for the nodes to become idle
};

class SlurmCluster {
 public:
  // Why a cluster cannot be started here ("" when it can): not root, or a
  // Slurm or munge program missing.
  static std::string Unsupported();
  // Starts the cluster and waits (up to start_timeout_s) until sinfo shows
  // every node idle. On failure, what was started is torn down and the
  // Status carries the daemons' last log lines.
  static Result<std::unique_ptr<SlurmCluster>> Start(const SlurmClusterOptions& options);
  ~SlurmCluster();
  SlurmCluster(const SlurmCluster&) = delete;
  SlurmCluster& operator=(const SlurmCluster&) = delete;

  const std::string& conf_path() const { return conf_path_; }  // for SLURM_CONF
  std::string dir() const { return dir_.path().string(); }     // the cluster's files
  std::vector<std::string> node_names() const;
  // This machine's address on the cluster's bridge (slurmctld's): what the
  // nodes reach this machine at, e.g. a controller's advertise_host.
  const std::string& host_address() const { return host_address_; }
  // Runs a Slurm tool (sbatch, squeue, scancel, sinfo, scontrol) of
  // /usr/bin against this cluster, with a 30 s deadline.
  Result<CliOutput> Tool(const std::string& name, std::vector<std::string> args);
  // Cancels every job and waits (up to timeout_s) until none runs.
  Status CancelAll(double timeout_s);
  // The last lines of the daemons' logs, for failure messages.
  std::string LogTail() const;

 private:
  explicit SlurmCluster(TempDir dir) : dir_(std::move(dir)) {}
  Status Setup(const SlurmClusterOptions& o);
  Status WaitIdle(double timeout_s);
  void Teardown();

  TempDir dir_;
  std::string conf_path_;
  std::string tag_;     // names its namespaces and links, from our pid
  std::string bridge_;  // its bridge's name
  std::string host_address_;
  std::vector<std::string> netns_;
  int nodes_ = 0;
  int64_t munged_pid_ = 0;
  int64_t slurmctld_pid_ = 0;
  std::vector<int64_t> slurmd_pids_;
  bool bridge_made_ = false;
};

}  // namespace spot::cloud
