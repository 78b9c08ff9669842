// Survival of spot lifetimes for preemption forecasts. A lifetime is an up run
// of a zone (an instance taken at its first tick lives that long); the run
// still open at the view's end is right-censored. The Kaplan-Meier curve of
// market/hazard.h gives the chance that a run which has lasted `age` ends
// within `horizon`, 1 - S(age + horizon) / S(age), and the expected remaining
// lifetime, the area under S after age over S(age) (restricted to the longest
// lifetime seen). Where fewer than min_at_risk runs outlived `age`, both fall
// back to a constant hazard (preemptions per up hour).
#pragma once

#include <memory>

#include "forecast/forecaster.h"
#include "market/hazard.h"

namespace spot::forecast {

class SurvivalModel {
 public:
  SurvivalModel() = default;
  // From the up runs of zone z in the view.
  static SurvivalModel FromHistory(const HistoryView& h, int z, int64_t min_at_risk = 5);

  double EndProbability(double age_hours, double horizon_hours) const;
  double ExpectedRemainingHours(double age_hours) const;
  const market::SurvivalCurve& curve() const { return curve_; }
  double rate_per_hour() const { return rate_; }

 private:
  int64_t AtRisk(double age_hours) const;

  market::SurvivalCurve curve_;
  std::vector<double> hours_sorted_;  // all lifetimes, ascending
  double rate_ = 0;                   // (preemptions + 0.5) / up hours
  int64_t min_at_risk_ = 5;
};

// Expected remaining lifetime (hours) of a spot instance taken or held in zone
// z at the view's end, from that zone's history.
double ExpectedRemainingLifetimeHours(const HistoryView& h, int z);

// The "km" preemption forecaster (a SurvivalModel per fit).
std::unique_ptr<PreemptionForecaster> MakeKaplanMeierHazard();

}  // namespace spot::forecast
