#include "policy/baseline_policies.h"

#include "policy/zone_choice.h"

namespace spot::policy {
namespace {

class OnDemandPolicy final : public Policy {
 public:
  std::string_view name() const override { return "od"; }
  Decision Decide(const Observation& obs) override { return obs.Gang(Placement::OnDemand()); }
};

class GreedyPolicy final : public Policy {
 public:
  std::string_view name() const override { return "greedy"; }
  void Start(const JobStart&) override { net_.Reset(); }
  Decision Decide(const Observation& obs) override {
    if (net_.Engaged(obs)) return obs.Gang(Placement::OnDemand());
    int z = PickSpotZone(obs);
    return obs.Gang(z >= 0 ? Placement::Spot(z) : Placement::Idle());
  }

 private:
  LatchedSafetyNet net_;
};

}  // namespace

std::unique_ptr<Policy> MakeOnDemandPolicy() { return std::make_unique<OnDemandPolicy>(); }
std::unique_ptr<Policy> MakeGreedyPolicy() { return std::make_unique<GreedyPolicy>(); }

}  // namespace spot::policy
