#include "core/clock.h"

#include <chrono>
#include <thread>

namespace spot {
namespace {

class SystemClock final : public Clock {
 public:
  double NowUnixS() const override {
    return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch())
        .count();
  }
  double MonotonicS() const override {
    return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch())
        .count();
  }
  void SleepFor(double seconds) override {
    if (seconds > 0) std::this_thread::sleep_for(std::chrono::duration<double>(seconds));
  }
};

}  // namespace

Clock* RealClock() {
  // Never destroyed: objects destroyed at exit (a test's shared server
  // stopping its process) still read it.
  static SystemClock* const clock = new SystemClock;
  return clock;
}

void ManualClock::Advance(double seconds) {
  if (!(seconds > 0)) return;
  double now = unix_s_.load();
  while (!unix_s_.compare_exchange_weak(now, now + seconds)) {
  }
}

}  // namespace spot
