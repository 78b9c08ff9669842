// spot_bench's `run` workload: the controller, `spot run`, on the demo job
// (examples/fashion-mnist-spot.yaml: Fashion-MNIST's CNN on a gang of 2 spot
// workers over the replayed p3.2xlarge market, or the synthetic market fitted
// to it when the trace files are absent). From the job's run-summary.json and
// its instances' logs:
//   notice -> checkpoint flushed to both tiers, against the notice's budget
//            (market.notice_seconds / time_compression of wall time; AWS's 120 s
//            in market time);
//   controller overhead per reconcile pass, against the reconcile interval;
//   cost against on demand only and against SpotSim's prediction for the same
//   market segment, with preemptions, steps redone and accuracy.
// LibTorch-free header.
#pragma once

#include <string>

#include "core/status.h"

namespace spot::bench {

struct RunBenchOptions {
  std::string spot_bin;      // the `spot` binary
  std::string job_file;      // the demo job (examples/fashion-mnist-spot.yaml)
  std::string source_dir;    // relative paths in the job resolve against it
  std::string dataset_path;  // train.dataset.path; "" keeps the job's
  std::string work_dir;
  int repeats = 1;          // runs of the job; figures pool (notices) or take the median
  double timeout_s = 1200;  // per run; then the job is cancelled (SIGTERM) and the run fails
};

// Returns the report (Markdown tables, raw numbers, method). Fails when a run
// fails (the job does not end SUCCEEDED); a missed goal is a result.
Result<std::string> RunRunWorkload(const RunBenchOptions& options);

}  // namespace spot::bench
