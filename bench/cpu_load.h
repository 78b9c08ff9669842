// How much CPU other processes take while a benchmark runs. On a 2-core
// machine one busy neighbour (a compiler, a test) cuts a 2-thread trainer's
// throughput several times over, so spot_bench waits for a quiet machine before
// each measurement, redoes disturbed ones and reports the load each figure saw.
// Linux only (/proc/stat). Not thread-safe.
#pragma once

namespace spot::bench {

class CpuLoadMeter {
 public:
  CpuLoadMeter();  // starts measuring

  // Average number of cores that other processes kept busy since construction:
  // the machine's busy time (/proc/stat) minus this process's and its reaped
  // children's (getrusage). -1 when /proc/stat cannot be read.
  double OtherCores() const;

 private:
  double start_wall_ = 0;
  double start_busy_ = -1;
  double start_own_ = 0;
};

// Samples 0.5 s windows until other processes use less than `max_cores`, or
// `max_wait_s` has passed. Returns the last window's value (-1 when unknown).
double WaitForQuiet(double max_cores, double max_wait_s);

}  // namespace spot::bench
