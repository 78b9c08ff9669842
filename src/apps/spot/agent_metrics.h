// What `spot agent --metrics-port` serves at /metrics, so that the
// controller sees a command worker's utilization as a native worker's:
//   spot_train_compute_seconds_total  CPU seconds of the program's processes
//       (every descendant of the agent, those that ended included: see
//       core/process_cpu.h) over the CPUs its ranks may use, so that a
//       program keeping them all busy counts one second a wall second;
//   spot_agent_ranks_running          ranks of the program running now;
//   spot_agent_program_restarts_total restarts because the gang changed.
// Series carry job_id and worker_id labels, as a native worker's do.
#pragma once

#include <memory>
#include <string>

#include "core/status.h"

namespace spot::cli {

struct AgentMetricsOptions {
  std::string job;       // job_id label
  std::string instance;  // worker_id label
  int port = 0;          // 1..65535: the port to serve on
  // The address to serve on: loopback, or this machine's address toward the
  // controller (an instance scraped from another machine).
  std::string host = "127.0.0.1";
  int cpus = 1;  // > 0: the CPUs the ranks may use
};

// Thread safety: all methods may be called from any thread; the CPU counter
// is read from /proc when a scrape comes.
class AgentMetrics {
 public:
  // Starts serving on host:port. InvalidArgument for cpus < 1 or a port
  // out of range; Unavailable when the port cannot be bound; errors of
  // ProcessTreeCpu::Open.
  static Result<std::unique_ptr<AgentMetrics>> Start(const AgentMetricsOptions& options);
  ~AgentMetrics();

  void SetRanksRunning(int n);
  void CountRestart();
  int port() const;

 private:
  struct Impl;
  explicit AgentMetrics(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace spot::cli
