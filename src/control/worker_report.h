// What a command workload's program reports (spottrain.report, the C++
// client's Report; POST /api/v1/jobs/ID/report) and how the controller keeps
// it: the training's progress (core/job_files.h's ProgressReport, which the
// controller, the monitor and the dashboard read, as a native worker's rank 0
// writes it), one step-log line per new step, and every report as a JSON line
// (reports.jsonl, metrics included). Thread-safe.
#pragma once

#include <cstdint>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>

#include "core/clock.h"
#include "core/job_files.h"
#include "core/status.h"

namespace spot::control {

struct WorkerReport {
  std::string instance;
  int64_t rank = 0;
  int64_t step = 0;  // completed steps
  std::optional<int64_t> total_steps;
  std::optional<int64_t> epoch;
  std::optional<double> loss;
  std::optional<int64_t> samples;  // processed since the last report
  std::map<std::string, double> metrics;
  bool done = false;  // the training finished
};

// InvalidArgument naming the field for a body that is not a report: a JSON
// object with an integer `step` >= 0 and, where present, the types above
// (numbers finite, counts >= 0, at most 64 metrics); unknown fields too.
Result<WorkerReport> ParseWorkerReport(std::string_view body);

// The step of the newest version the Python client's manifests name in a
// command workload's checkpoint directory (`ckpt-<N:012d>.json` with format
// "spottrain-ckpt-1"): the program's progress when it sends no reports.
// nullopt when there is none.
std::optional<int64_t> NewestManifestStep(const std::string& checkpoint_dir);

class ReportSink {
 public:
  // `job`: the job's name; `files`: its directory; the progress so far is
  // read from it (a restarted controller goes on from there).
  ReportSink(std::string job, JobFiles files, Clock* clock);

  // Parses and keeps one report (see the file comment).
  Status Take(std::string_view body);
  // Wall time (unix s) of the last report taken; 0: none yet.
  double last_report_unix_s() const;

 private:
  const std::string job_;
  const JobFiles files_;
  Clock* clock_;
  mutable std::mutex mu_;
  ProgressReport progress_;
  int64_t last_logged_step_ = -1;
  double last_report_unix_s_ = 0;
};

}  // namespace spot::control
