#include "policy/uniform_progress.h"

#include "policy/zone_choice.h"

namespace spot::policy {
namespace {

class UniformProgressPolicy final : public Policy {
 public:
  std::string_view name() const override { return "up"; }
  void Start(const JobStart&) override { net_.Reset(); }

  Decision Decide(const Observation& obs) override {
    if (net_.Engaged(obs)) return obs.Gang(Placement::OnDemand());
    const double d = obs.job.changeover_hours;
    const double p = obs.progress_hours;
    if (obs.current.kind == InstanceKind::kOnDemand &&
        p < ExpectedProgress(obs.job, obs.time_hours + 2 * d)) {
      return obs.Gang(Placement::OnDemand());
    }
    int z = PickSpotZone(obs);
    if (z >= 0) return obs.Gang(Placement::Spot(z));
    if (p < ExpectedProgress(obs.job, obs.time_hours)) return obs.Gang(Placement::OnDemand());
    return obs.Gang(Placement::Idle());
  }

 private:
  LatchedSafetyNet net_;
};

}  // namespace

std::unique_ptr<Policy> MakeUniformProgressPolicy() {
  return std::make_unique<UniformProgressPolicy>();
}

}  // namespace spot::policy
