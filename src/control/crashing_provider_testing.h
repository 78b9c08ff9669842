// A provider that "crashes" the controller using it: a Poll (the start of a
// reconcile pass) throws SimulatedCrash once the test armed it, or at the
// Poll numbered `crash_at_poll` (1 is the first; 0: never by count). The
// exception unwinds the controller as a kill -9 between two passes would
// stop it; the instances are left running in the wrapped provider.
#pragma once

#include <atomic>
#include <cstdint>
#include <string>
#include <vector>

#include "cloud/provider.h"

namespace spot::control::testing {

struct SimulatedCrash {};

class CrashingProvider final : public cloud::Provider {
 public:
  explicit CrashingProvider(cloud::Provider* inner, int64_t crash_at_poll = 0)
      : inner_(inner), crash_at_poll_(crash_at_poll) {}
  void Arm() { armed_ = true; }
  Result<cloud::InstanceView> Launch(const cloud::InstanceSpec& s, double now_s) override {
    return inner_->Launch(s, now_s);
  }
  Status Terminate(const std::string& id, double now_s) override {
    return inner_->Terminate(id, now_s);
  }
  std::vector<cloud::InstanceView> List() const override { return inner_->List(); }
  Result<std::vector<cloud::ProviderEvent>> Poll(double now_s) override {
    if (armed_ || ++polls_ == crash_at_poll_) throw SimulatedCrash{};
    return inner_->Poll(now_s);
  }
  Status Adopt(const cloud::InstanceView& v, double now_s) override {
    return inner_->Adopt(v, now_s);
  }

 private:
  cloud::Provider* inner_;
  const int64_t crash_at_poll_;
  int64_t polls_ = 0;
  std::atomic<bool> armed_{false};
};

}  // namespace spot::control::testing
