// Scripted faults for runs of the controller in virtual time
// (control/fault_injection_test.cc): a decorator of any Provider whose calls,
// during given stretches of the job's simulated time, fail, take minutes, or
// answer with old news, and whose notices race the controller's own
// terminations and the workers' departures; and a decorator of any Clock
// whose wall time steps (as NTP steps it) and which runs actions when its
// time passes given points (a disk that fills up and is freed again).
//
// A fault is a stretch [from_s, from_s + for_s) and what happens in it; the
// schedule is fixed before the run, so a run is as deterministic as the
// provider and clock below it.
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "cloud/provider.h"
#include "core/clock.h"

namespace spot::cloud {

enum class ProviderCall { kLaunch, kTerminate, kPoll, kList, kAdopt };
const char* ProviderCallName(ProviderCall c);

// During [from_s, from_s + for_s) of the job's simulated time (the now_s of
// the calls; List, which has none, uses the last one seen), every call of
// kind `call`:
struct CallFault {
  ProviderCall call = ProviderCall::kLaunch;
  double from_s = 0;
  double for_s = 0;
  // Non-OK: Launch, Terminate and Adopt fail with it and nothing happens in
  // the cloud; Poll fails with it and List answers as at the stretch's
  // start (the describe API is down: events come late, all at once after
  // the stretch).
  Status error = Status::Ok();
  // Each call takes this many seconds of the clock (a slow API); it acts at
  // the now_s it was given.
  double delay_s = 0;
};

struct Stretch {
  double from_s = 0;
  double for_s = 0;
  bool Contains(double t) const { return t >= from_s && t < from_s + for_s; }
};

struct FaultyProviderOptions {
  Provider* inner = nullptr;  // not owned; must outlive the decorator
  Clock* clock = nullptr;     // slept on for `delay_s`; required when any delay is set
  std::vector<CallFault> faults;
  // During these stretches every Terminate the caller asks for races a
  // notice: the cloud gives the instance a termination notice at that very
  // second, which the next Poll delivers after the instance has gone.
  std::vector<Stretch> notice_on_terminate;
  // During these stretches a worker leaves on its notice: `depart_after_s`
  // after the notice its process exits with code 0 (it saved and left), the
  // instance still billed until reclaimed. With `exit_before_notice` the
  // Poll that brings both delivers the exit first.
  std::vector<Stretch> depart_on_notice;
  double depart_after_s = 0;
  bool exit_before_notice = false;
};

// Counts of what the decorator did, for a test's report.
struct FaultCounts {
  int failed_calls = 0;   // calls answered with a fault's error
  int slow_calls = 0;     // calls that slept a fault's delay
  int stale_answers = 0;  // Poll / List answered from before an outage
  int raced_notices = 0;  // notices given at a Terminate
  int departures = 0;     // workers that left on their notice
  int most_notices_in_a_poll = 0;
};

// Not thread-safe, as the providers it wraps.
class FaultyProvider final : public Provider {
 public:
  explicit FaultyProvider(FaultyProviderOptions options);

  Result<InstanceView> Launch(const InstanceSpec& spec, double now_s) override;
  Status Terminate(const std::string& id, double now_s) override;
  std::vector<InstanceView> List() const override;
  Result<std::vector<ProviderEvent>> Poll(double now_s) override;
  Status Adopt(const InstanceView& recorded, double now_s) override;

  const FaultCounts& counts() const { return counts_; }

 private:
  // The fault of kind `call` in force at now_s (the first listed), or null.
  const CallFault* Active(ProviderCall call, double now_s) const;
  // Sleeps the fault's delay; its error (OK when none or no fault).
  Status Apply(const CallFault* f) const;
  std::vector<ProviderEvent> WithDepartures(std::vector<ProviderEvent> events, double now_s);
  void Overlay(InstanceView& v) const;

  FaultyProviderOptions o_;
  mutable FaultCounts counts_;
  double last_now_s_ = 0;
  mutable std::vector<InstanceView> last_list_;   // the last answer outside an outage
  std::vector<ProviderEvent> pending_;            // raced notices and departures to come
  std::map<std::string, double> notice_overlay_;  // raced notices: instance -> time
  std::map<std::string, double> departed_;        // instance -> when its worker left
};

// A Clock over another (a ManualClock, in tests) whose wall time is stepped
// by a schedule, and which runs actions once its monotonic time passes their
// points. Times of the schedule are seconds of the inner clock's monotonic
// time since this clock was made. Actions run inside SleepFor (the only way
// virtual time moves under the controller), on the sleeping thread.
// Thread-safe.
class ScriptedClock final : public Clock {
 public:
  explicit ScriptedClock(Clock* inner) : inner_(inner), start_(inner->MonotonicS()) {}

  // From `at_s` on, wall time reads `step_s` more (negative: back).
  void StepWallAt(double at_s, double step_s);
  // Runs `action` once, at the first SleepFor that ends at or after `at_s`.
  void At(double at_s, std::function<void()> action);

  double NowUnixS() const override;
  double MonotonicS() const override { return inner_->MonotonicS(); }
  void SleepFor(double seconds) override;
  // Seconds since this clock was made (the schedule's time line).
  double ElapsedS() const { return inner_->MonotonicS() - start_; }

 private:
  Clock* const inner_;
  const double start_;
  mutable std::mutex mu_;
  std::vector<std::pair<double, double>> steps_;          // GUARDED_BY(mu_)
  std::multimap<double, std::function<void()>> actions_;  // GUARDED_BY(mu_)
};

}  // namespace spot::cloud
