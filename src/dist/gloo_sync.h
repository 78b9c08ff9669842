// The gradient sync of an elastic generation (train::GradientSync over a Gloo
// process group): after each replica's backward, the share-weighted gradients
// are summed with the job's compression (compression.h), then one control
// all-reduce carries the loss sums, each rank's throughput, the reform and
// stop requests, and the floating-point buffers (batch-norm statistics) as
// the share-weighted mean, so every replica keeps the same ones. A step
// commits only when both collectives succeeded.
#pragma once

#include <chrono>
#include <memory>
#include <torch/csrc/distributed/c10d/ProcessGroup.hpp>
#include <vector>

#include "core/status.h"
#include "dist/compression.h"
#include "train/model.h"
#include "train/step_runner.h"

namespace spot::dist {

// All-reduces (sums) `t` over `pg`. Aborted naming `what` when it fails or times out.
Status AllReduceOrAbort(c10d::ProcessGroup& pg, at::Tensor& t, const char* what);

class GlooSync final : public train::GradientSync {
 public:
  struct Options {
    CompressionOptions compression;
    std::chrono::milliseconds timeout{10000};
    // Test and benchmark hook: after each step's compute, sleep this multiple
    // of it (1.0 makes a worker half as fast), to emulate a slower machine.
    double slowdown = 0;
  };
  // What this rank tells the group with the step.
  struct Control {
    bool reform = false;       // joiners wait or someone leaves: re-form after this step
    bool stop = false;         // this worker is stopping
    double samples_per_s = 0;  // this worker's compute throughput
  };

  static Result<std::unique_ptr<GlooSync>> Create(c10d::ProcessGroup& pg, train::Net& model,
                                                  const Options& options);

  void SetControl(const Control& c) { control_ = c; }
  Result<train::GlobalLoss> Sync(const train::ReplicaLoss& mine) override;

  // After a successful Sync: what the group said.
  bool reform() const { return reform_; }
  bool stop() const { return stop_; }
  const std::vector<double>& rates() const { return rates_; }  // per rank
  const CommStats& comm() const { return comm_; }              // the gradient all-reduce
  double collective_seconds() const { return comm_.seconds + control_seconds_; }
  // Seconds of compute of the last step, the slowdown included.
  double busy_seconds() const { return busy_seconds_; }

 private:
  GlooSync(c10d::ProcessGroup& pg, train::Net& model, Options o)
      : pg_(pg), model_(model), opt_(o) {}
  void Flatten();
  void Unflatten();

  c10d::ProcessGroup& pg_;
  train::Net& model_;
  Options opt_;
  std::unique_ptr<GradientReducer> reducer_;
  std::vector<at::Tensor> params_;
  std::vector<TensorSpan> layout_;
  at::Tensor flat_;
  Control control_;
  bool reform_ = false, stop_ = false;
  std::vector<double> rates_;
  CommStats comm_;
  double control_seconds_ = 0;
  double busy_seconds_ = 0;
};

}  // namespace spot::dist
