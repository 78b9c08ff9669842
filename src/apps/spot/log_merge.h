// Reading a job's log files back for `spot logs`: each file read line by line
// as it grows, the lines that are not JSON (a crash's stderr, progress
// lines) attached to the time of their file's previous line, and the files
// merged in time order.
//
// Not thread-safe: one thread reads a LogTail.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "core/logging.h"

namespace spot::cli {

// One log file of a job.
struct LogSource {
  std::string path;
  std::string label;  // "controller", "rendezvous" or the instance's id
  std::string role;   // "controller", "rendezvous" or "worker"
};

// The log files of a job directory that exist now: controller.log,
// rendezvous.log, then instances/<id>.log by id.
std::vector<LogSource> JobLogSources(const std::string& job_dir);

struct LogLine {
  int64_t unix_ms = 0;              // its @timestamp, or the time it is attached to
  std::string text;                 // as written, without its newline
  std::optional<LogRecord> record;  // nullopt: not a line of the JSON format
};

// A file read as it grows.
class LogTail {
 public:
  explicit LogTail(std::string path) : path_(std::move(path)) {}

  // The lines in the next `max_bytes` appended since the last call. With
  // `complete` (the file will not grow), a last line without its newline
  // too once the end is reached; otherwise that waits for the rest. A file that shrank is read
  // again from its start; a missing file has no lines. A line that is not JSON takes the time of
  // the file's line before it; before any, that of the first JSON line read in the same call, or
  // else the file's modification time.
  std::vector<LogLine> Read(bool complete, uint64_t max_bytes = UINT64_MAX);
  // Whether the last Read reached the end of the file.
  bool at_end() const { return at_end_; }

 private:
  std::vector<LogLine> TakeLines(bool with_partial);  // complete lines, parsed
  void AssignTimes(std::vector<LogLine>& lines);

  std::string path_;
  uint64_t offset_ = 0;  // bytes consumed
  std::string partial_;  // a line without its newline yet
  bool at_end_ = false;
  bool have_time_ = false;
  int64_t last_ms_ = 0;  // of the last line returned
};

// One line of a merged log and the index of its source.
struct MergedLine {
  size_t source = 0;
  LogLine line;
};

// The k-way merge by time of `files` streams: `next(f)` gives stream f's
// next line (nullopt at its end), `emit` gets every line in time order. Each
// stream keeps its order; equal times come in the order of the streams.
void MergeStreams(size_t files, const std::function<std::optional<LogLine>(size_t)>& next,
                  const std::function<void(MergedLine)>& emit);

// The same over lines in memory.
std::vector<MergedLine> MergeByTime(std::vector<std::vector<LogLine>> files);

// The same over whole files, read a chunk at a time (memory: about a chunk
// per file, whatever their size).
void MergeFiles(const std::vector<LogSource>& sources, const std::function<void(MergedLine)>& emit,
                uint64_t chunk_bytes = 1 << 20);

// Which lines `spot logs` shows.
struct LogFilter {
  int min_level = -1;    // LogLevelRank; -1: every level
  std::string instance;  // "": every source
  std::optional<int64_t> since_ms;
};

// The level of a line: its record's, or for another line "error" when it
// starts with "error" (the CLI's own error lines), else "info".
std::string LineLevel(const LogLine& line);
bool Shown(const LogFilter& filter, const LogSource& source, const LogLine& line);

// "2026-12-03 07:00:00.123Z [i-0002 rank 1 gen 3] warn  message"; a line
// that is not JSON: "2026-12-03 07:00:00.123Z [i-0002] the line".
std::string HumanLine(const LogSource& source, const LogLine& line);
// A JSON line as written; another line as an object with its (attached)
// @timestamp, its level, the line as message, the file and the source.
std::string JsonLine(const LogSource& source, const LogLine& line);

// Whether the job that writes in `job_dir` has ended: `spot run` writes its
// run-summary.json last, so one at least as new as controller.log.
bool JobEnded(const std::string& job_dir);

// --since: "90s", "10m", "2h", "1d" before `now_ms`, or a time
// "2026-12-03T07:00:00Z" / "2026-12-03T07:00:00.123Z". InvalidArgument
// naming the value otherwise.
Result<int64_t> ParseSince(const std::string& text, int64_t now_ms);

}  // namespace spot::cli
