// Market data types shared by every layer above market/: a pool of spot
// capacity and its availability and price on a regular tick grid. Plain data,
// no LibTorch, no I/O.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace spot::market {

// Where capacity comes from: one instance type in one zone of one cloud.
struct Pool {
  std::string cloud;          // "aws", "gcp", "azure"
  std::string region;         // "us-east-1"
  std::string zone;           // "us-east-1a"
  std::string instance_type;  // "p3.2xlarge"

  // "aws/us-east-1a/p3.2xlarge": a stable key for maps and reports.
  std::string Key() const;
};

// A step function of time: value[i] holds from time_s[i] until time_s[i + 1]
// (the last value holds forever). time_s is strictly increasing.
struct StepSeries {
  std::vector<double> time_s;
  std::vector<double> value;

  bool empty() const { return time_s.empty(); }
  // The value at time t (the first value before the first change point).
  // REQUIRES: !empty().
  double At(double t) const;
  // Samples the step function at t0, t0 + gap, ... (`ticks` samples).
  std::vector<double> Resample(double t0, double gap_s, int64_t ticks) const;
};

// Bounds the loaders hold a recorded trace to. They keep the arithmetic on
// ticks far from overflow: hours to ticks (a deadline of a year is 31.5 M
// ticks of a second), counts times a gang's size or a capacity scale.
inline constexpr double kMinGapSeconds = 1;             // a tick lasts at least a second
inline constexpr double kMaxGapSeconds = 7 * 86400;     // and at most a week
inline constexpr int32_t kMaxAvailableCount = 1000000;  // instances obtainable at a tick

// One pool's market on a regular grid of ticks (tick i starts at i * gap_seconds
// after the trace's start).
struct Trace {
  Pool pool;
  std::string name;                // short name for reports, e.g. the file's stem
  std::string source;              // the file it came from, or "synthetic(<fit>)"
  double gap_seconds = 0;          // tick length, > 0
  double start_unix_s = 0;         // UTC time of tick 0 (Unix seconds); 0 when unknown
  std::vector<int32_t> available;  // spot instances obtainable at each tick (>= 0)
  std::vector<double> price;       // spot $/h at each tick; empty when unknown
  double ondemand_price = 0;       // on-demand $/h the file records; 0 when it records none
  // How the file's values were read, when not as the shared records' counts
  // (e.g. SkyNomad's convention, where 1 is a preempted tick); "" otherwise.
  std::string read_as;

  int64_t ticks() const { return static_cast<int64_t>(available.size()); }
  double hours() const { return static_cast<double>(ticks()) * gap_seconds / 3600.0; }
  bool has_prices() const { return !price.empty(); }
};

// A maximal stretch of ticks [begin, begin + length) that are all "up"
// (available >= min_count) or all "down".
struct AvailabilityRun {
  int64_t begin = 0;
  int64_t length = 0;
  bool up = false;
  bool censored_end = false;  // the run reaches the trace's last tick
};

// The trace split into alternating up/down runs, in order. A tick is up when
// available[t] >= min_count (the node count of a gang). REQUIRES: min_count >= 1.
std::vector<AvailabilityRun> AvailabilityRuns(const Trace& trace, int32_t min_count = 1);

// Fraction of ticks that are up (0 for an empty trace).
double AvailabilityFraction(const Trace& trace, int32_t min_count = 1);

}  // namespace spot::market
