// Step profiles in the Trace Event Format (the JSON that chrome://tracing,
// Perfetto and speedscope open). Each worker appends one complete event
// ("ph": "X") per line to its own file while it trains (TraceLog): a killed
// worker leaves every line but possibly the last whole. `spot profile` merges
// a run's files into one trace, one process per worker, and summarizes where
// the steps' time went (MergeTraceFiles).
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"

namespace spot::monitor {

// The lanes of a worker's trace (its "threads").
enum class TraceLane { kStep = 0, kCheckpoint = 1, kEvaluation = 2 };

class TraceLog {
 public:
  // Appends to `path` (created with its directory). After `max_events` it
  // records only every 100th step's events, so a long run stays small.
  static Result<std::unique_ptr<TraceLog>> Open(const std::string& path,
                                                int64_t max_events = 100000);
  ~TraceLog();
  TraceLog(const TraceLog&) = delete;
  TraceLog& operator=(const TraceLog&) = delete;

  // One complete event: `name` in `lane`, from `start` for `seconds`, with the
  // step it belongs to. Thread-safe. Write errors turn the log off (logged once).
  void Complete(std::string_view name, TraceLane lane, std::chrono::steady_clock::time_point start,
                double seconds, int64_t step);
  int64_t events() const;

 private:
  struct Impl;
  explicit TraceLog(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

// Where the time of one worker's steps went, per phase (event name).
struct PhaseRow {
  std::string process;  // the worker (its trace file's name without ".trace.jsonl")
  std::string phase;
  std::string lane;   // step | checkpoint | evaluation
  int64_t count = 0;  // events
  double total_s = 0;
  double mean_ms = 0;
  double p95_ms = 0;
  double share = 0;  // of the worker's step-lane time (0 for other lanes)
};

struct ProfileSummary {
  std::vector<PhaseRow> rows;  // by process, then lane, then phase in first-seen order
  int64_t events = 0;
  int64_t skipped_lines = 0;  // a last line cut short by a kill
};

// Reads the trace files (each a TraceLog's) and returns one trace document:
// {"traceEvents": [...], "displayTimeUnit": "ms"}, each file a process named
// after it, its lanes named. InvalidArgument naming the file and line for a
// line that is not a complete event (but a cut-short last line, counted).
Result<std::string> MergeTraceFiles(const std::vector<std::string>& files, ProfileSummary* summary);

// The trace files of a run directory: <dir>/profile/*.trace.jsonl, sorted.
std::vector<std::string> TraceFilesOf(const std::string& run_dir);
// Where a worker's trace goes in a run directory (the id made file-safe).
std::string TracePathFor(const std::string& run_dir, const std::string& worker_id);

}  // namespace spot::monitor
