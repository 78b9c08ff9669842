// Clock: the one way code reads time and waits, so tests can run it in
// virtual time (ManualClock) and production uses the real one (RealClock).
//
// Two time lines: NowUnixS() is wall time (Unix seconds, for records and
// epochs), MonotonicS() never goes back (for intervals and deadlines).
// SleepFor() waits on the clock's own time line: a ManualClock advances both
// at once and returns immediately. Thread-safe.
#pragma once

#include <atomic>
#include <cmath>
#include <cstdint>

namespace spot {

class Clock {
 public:
  virtual ~Clock() = default;
  virtual double NowUnixS() const = 0;
  virtual double MonotonicS() const = 0;
  // NowUnixS in whole milliseconds (for records that keep integers).
  int64_t NowUnixMs() const { return static_cast<int64_t>(std::floor(NowUnixS() * 1000)); }
  // Waits `seconds` (<= 0: returns at once).
  virtual void SleepFor(double seconds) = 0;
};

// The process's real clock (system_clock, steady_clock, this_thread sleeps).
// Never null; lives as long as the process.
Clock* RealClock();

// Virtual time: starts at `start_unix_s` and moves only by Advance() and
// SleepFor(), which advance both time lines by the same amount.
class ManualClock final : public Clock {
 public:
  explicit ManualClock(double start_unix_s = 1.7e9) : unix_s_(start_unix_s) {}
  double NowUnixS() const override { return unix_s_.load(); }
  double MonotonicS() const override { return unix_s_.load() - start_; }
  void SleepFor(double seconds) override { Advance(seconds); }
  void Advance(double seconds);
  // Advances to `unix_s`; a time already passed leaves the clock as it is.
  void AdvanceTo(double unix_s) { Advance(unix_s - NowUnixS()); }

 private:
  std::atomic<double> unix_s_;
  const double start_ = unix_s_.load();
};

}  // namespace spot
