// The shared protocols between a job's controller, its workers and its
// monitor, as types instead of file names and JSON fields repeated in
// dist/, control/ and apps/:
//   - JobFiles: where each file of a job's directory lives;
//   - ProgressReport: what rank 0 of the training reports, atomically, as
//     one JSON object, and the controller, the monitor and the dashboard read.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"

namespace spot {

// The files of one job's directory (train.output_dir of `spot run`).
struct JobFiles {
  std::string dir;

  std::string progress() const;     // progress.json: rank 0's ProgressReport
  std::string step_log() const;     // steps.csv: "step,epoch,loss,lr" per committed step
  std::string summary() const;      // summary.json: the training's result
  std::string tensorboard() const;  // tensorboard/: event files
  std::string instances() const;    // instances/<id>/: each instance's local disk
  std::string decisions() const;    // decisions.jsonl: the controller's decision log
  std::string worker_job() const;   // train.yaml: the job file the workers run
  std::string state_dir() const;    // controller/: the controller's state (the default)
};
// The controller's SQLite store in a state directory.
std::string StateDbPath(const std::string& state_dir);

struct ProgressReport {
  std::string job;
  int64_t step = 0;         // committed steps
  int64_t total_steps = 0;  // of the whole training
  int64_t epoch = 0;
  double loss = 0;
  double test_accuracy = -1;  // -1: not evaluated yet
  int world = 0;              // workers in the current generation
  int64_t generation = 0;
  int64_t restored_step = 0;  // the step the training resumed from
  bool done = false;
  // Of the job done, when the training knows it better than step /
  // total_steps (a stand-in training in virtual time); -1: step / total.
  double fraction = -1;
  // Workers of the current generation flagged as stragglers (their ids).
  std::vector<std::string> stragglers;
};

// One line of a job's step log (JobFiles::step_log): a committed step, as
// "step,epoch,loss,lr"; a step redone after a loss appears again. Losses (the
// batch's mean, in double) and rates are written with 9 significant digits,
// the same text for the same bits: runs are compared line by line.
struct StepLogRow {
  int64_t step = 0;
  int64_t epoch = 0;
  double loss = 0;
  double lr = 0;
};
std::string StepLogLine(const StepLogRow& row);  // with its newline
// InvalidArgument quoting the line for anything but such a line.
Result<StepLogRow> ParseStepLogLine(std::string_view line);
// The rows of a step log in file order; lines that do not parse (a torn last
// line) are skipped. A missing file has none.
std::vector<StepLogRow> ReadStepLog(const std::string& path);

// One line of JSON (no trailing newline).
std::string ProgressReportJson(const ProgressReport& r);
// InvalidArgument for anything but such an object, naming the field whose
// type is wrong; absent fields keep their defaults.
Result<ProgressReport> ParseProgressReport(const std::string& text);

}  // namespace spot
