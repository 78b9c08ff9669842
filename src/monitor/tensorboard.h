// TensorBoard event files, written and read natively (no TensorFlow, no
// protobuf library).
//
// A file is a sequence of records:
//   uint64 length (little-endian), uint32 masked CRC32C of those 8 bytes,
//   `length` bytes of data, uint32 masked CRC32C of the data,
// where each data is a serialized tensorflow.Event protobuf. The first Event
// of a file holds the wall time and file_version "brain.Event:2"; each later
// one holds a step and a Summary of (tag, simple_value) scalars. TensorBoard
// finds files named "*tfevents*" under its --logdir and reads them while they
// grow.
#pragma once

#include <cstdint>
#include <cstdio>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "core/status.h"

namespace spot::monitor {

// CRC32C (Castagnoli, reflected polynomial 0x82F63B78) of `data`.
uint32_t Crc32c(std::string_view data);
// The CRC as event files store it: ((c >> 15) | (c << 17)) + 0xa282ead8.
uint32_t MaskedCrc32c(std::string_view data);

// Appends scalars to a new events file. Not thread-safe: one thread at a time.
// Once a write fails, every later call returns that error.
class EventWriter {
 public:
  // Creates `run_dir` (with parents) and a new file in it named
  // "events.out.tfevents.<unix seconds>.<hostname>.<pid>.<n>", created
  // exclusively so that no other writer (of this or another process) shares
  // it; writes the file_version event and flushes. Unavailable on I/O errors.
  static Result<std::unique_ptr<EventWriter>> Open(const std::string& run_dir);

  // Flushes and closes the file (errors are dropped: call Flush() to see them).
  ~EventWriter();
  EventWriter(const EventWriter&) = delete;
  EventWriter& operator=(const EventWriter&) = delete;

  // Appends one Event at `step` holding each (tag, value) as a simple_value (a
  // float: doubles are rounded, beyond float range become +-Inf), then
  // flushes. `wall_time_unix_s` defaults to now (fractional Unix seconds).
  // InvalidArgument for an empty tag; Unavailable (naming the file) when
  // writing fails, e.g. a full disk.
  Status AddScalars(int64_t step, const std::vector<std::pair<std::string, double>>& scalars,
                    std::optional<double> wall_time_unix_s = std::nullopt);
  Status AddScalar(std::string_view tag, int64_t step, double value,
                   std::optional<double> wall_time_unix_s = std::nullopt);

  // Hands buffered bytes to the OS (not fsync), so that readers see them.
  Status Flush();

  const std::string& path() const { return path_; }

 private:
  EventWriter(std::string path, std::FILE* file) : path_(std::move(path)), file_(file) {}
  Status WriteEvent(std::string_view event);

  std::string path_;
  std::FILE* file_ = nullptr;
  Status error_;  // the first write error; sticky
};

struct ScalarPoint {
  double wall_time = 0;  // Unix seconds
  int64_t step = 0;
  std::string tag;
  float value = 0;
};

struct EventFile {
  std::string file_version;          // "brain.Event:2" for files we write
  int64_t records = 0;               // every record, the file_version one included
  std::vector<ScalarPoint> scalars;  // in file order
};

// Reads an events file, checking the framing and both CRCs of every record and
// decoding Event fields wall_time, step, file_version and summary values with
// a simple_value (other fields and values are skipped). DataLoss naming the
// file, the record's byte offset and what is wrong for a damaged record; a
// record cut short at the end of the file (a writer still appending) ends the
// read without error when `allow_partial_tail`. NotFound when missing.
Result<EventFile> ReadEventFile(const std::string& path, bool allow_partial_tail = false);

// The scalars of every "*tfevents*" file directly in `run_dir`, merged and
// ordered by (wall_time, step). Partial tails are allowed (live writers).
// NotFound when `run_dir` does not exist.
Result<std::vector<ScalarPoint>> ReadRunScalars(const std::string& run_dir);

}  // namespace spot::monitor
