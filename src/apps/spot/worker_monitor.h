// What a `spot worker` shows of itself: Prometheus metrics at /metrics (step
// time, throughput, loss, learning rate, gradient norm, checkpoint stalls and
// bytes, collective time, time per step phase, its generation and world), a
// step profile (trace events of every step's phases and every save) and,
// while it is rank 0, TensorBoard scalars in the job's run directory.
#pragma once

#include <memory>
#include <string>

#include "core/status.h"
#include "dist/elastic_trainer.h"

namespace spot::cli {

struct WorkerMonitorOptions {
  std::string job_id;
  std::string worker_id;
  int metrics_port = -1;  // -1: no /metrics; 0: any free port
  // The address /metrics listens on: loopback, or this machine's address
  // toward the controller (a worker scraped from another machine).
  std::string metrics_host = "127.0.0.1";
  std::string tensorboard_dir;  // "": no event files
  // The step profile (monitor/chrome_trace.h): each step's phases and each
  // save, as trace events; "": none.
  std::string trace_path;
};

class WorkerMonitor {
 public:
  static Result<std::unique_ptr<WorkerMonitor>> Start(const WorkerMonitorOptions& options);
  ~WorkerMonitor();
  // Callbacks that feed the metrics and event files; they live as long as this object.
  dist::WorkerObserver Observer();
  int metrics_port() const;  // 0 when not serving

 private:
  struct Impl;
  explicit WorkerMonitor(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace spot::cli
