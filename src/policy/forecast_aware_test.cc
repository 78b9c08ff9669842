// forecast-up's rules on hand-made markets of hourly ticks.
#include "policy/forecast_aware.h"

#include <gtest/gtest.h>

#include "policy/test_traces.h"

namespace spot::policy {
namespace {

using testing::MakeTrace;

// Runs of `up` ticks followed by one down tick, `reps` times, then `tail` up ticks.
std::vector<int32_t> Runs(int up, int reps, int tail) {
  std::vector<int32_t> a;
  for (int r = 0; r < reps; ++r) {
    a.insert(a.end(), up, 1);
    a.push_back(0);
  }
  a.insert(a.end(), tail, 1);
  return a;
}

class ForecastUp : public ::testing::Test {
 protected:
  void Use(std::vector<market::Trace> traces) {
    traces_ = std::move(traces);
    zones_.clear();
    for (const auto& t : traces_) zones_.push_back(&t);
  }
  // Starts a job at tick `now` and asks for the decision there.
  Decision DecideAt(int64_t now, Placement current, double progress = 0, double time = 0) {
    MarketView m(zones_, now, 1);
    policy_->Start({.job = job_, .market = m, .start_tick = now});
    Observation o{.tick = 0,
                  .time_hours = time,
                  .job = job_,
                  .progress_hours = progress,
                  .current = current,
                  .market = m};
    return policy_->Decide(o);
  }
  JobSpec job_{.compute_hours = 10, .deadline_hours = 40, .changeover_hours = 0.2};
  std::vector<market::Trace> traces_;
  std::vector<const market::Trace*> zones_;
  std::unique_ptr<Policy> policy_ = MakeForecastUpPolicy();
};

TEST_F(ForecastUp, WeighsPriceAgainstTheChanceOfPreemption) {
  // Zone 0 lives 2 h at a time, zone 1 lives 30 h: both up now. A preemption
  // costs ~2 d k = 0.12 $ over the 6 h horizon, so zone 0 wins only when
  // cheaper by more than 0.02 $/h.
  auto market = [&](double p0) {
    Use({MakeTrace(3600, Runs(2, 40, 1), std::vector<double>(121, p0)),
         MakeTrace(3600, Runs(30, 4, 1), std::vector<double>(125, 0.9))});
  };
  market(0.89);
  EXPECT_EQ(testing::TargetOf(DecideAt(120, Placement::Idle())), Placement::Spot(1));
  market(0.5);
  EXPECT_EQ(testing::TargetOf(DecideAt(120, Placement::Idle())), Placement::Spot(0));
}

TEST_F(ForecastUp, WaitsForSpotPredictedToReturn) {
  // Outages last exactly 2 h; this one is 2 h old, so capacity is back next
  // hour. Behind the line (UP would buy on-demand) with slack, it waits; with
  // no slack to spare, on-demand.
  std::vector<int32_t> a;
  for (int r = 0; r < 20; ++r) a.insert(a.end(), {1, 1, 1, 1, 0, 0});
  a.insert(a.end(), {1, 0, 0});
  Use({MakeTrace(3600, a)});
  const int64_t now = static_cast<int64_t>(a.size()) - 1;
  EXPECT_EQ(testing::TargetOf(DecideAt(now, Placement::Idle(), 0, 4)), Placement::Idle());
  EXPECT_EQ(testing::TargetOf(DecideAt(now, Placement::Idle(), 0, 28.5)), Placement::OnDemand());
}

TEST_F(ForecastUp, MovesBeforeAPredictedPreemption) {
  // Zone 0's runs always last exactly 4 h; the current one is 4 h old. Zone 1
  // lives 30 h. On spot in zone 0 it moves; a fresh zone 0 run it keeps.
  Use({MakeTrace(3600, Runs(4, 24, 4)), MakeTrace(3600, Runs(30, 3, 31))});
  EXPECT_EQ(testing::TargetOf(DecideAt(123, Placement::Spot(0))), Placement::Spot(1));
  EXPECT_EQ(testing::TargetOf(DecideAt(121, Placement::Spot(0))), Placement::Spot(0));
}

TEST_F(ForecastUp, WaitsForAPredictedPriceDropOnlyWhenAhead) {
  // Always up; the price is 2.0 in hours 0..5 of each day and 1.0 otherwise.
  const int days = 10;
  std::vector<double> price;
  for (int t = 0; t < 24 * days; ++t) price.push_back(t % 24 < 6 ? 2.0 : 1.0);
  Use({MakeTrace(3600, std::vector<int32_t>(24 * days, 1), price)});
  const int64_t now = 24 * 8 + 1;  // hour 1 of a day: the price drops within 6 h
  // Ahead of the line by more than 6 h of waiting: idle.
  EXPECT_EQ(testing::TargetOf(DecideAt(now, Placement::Idle(), 5, 1)), Placement::Idle());
  // On the line: no time to wait, spot now.
  EXPECT_EQ(testing::TargetOf(DecideAt(now, Placement::Idle(), 0.25, 1)), Placement::Spot(0));
  // Without prices it never waits.
  Use({MakeTrace(3600, std::vector<int32_t>(24 * days, 1))});
  EXPECT_EQ(testing::TargetOf(DecideAt(now, Placement::Idle(), 5, 1)), Placement::Spot(0));
}

// A market priced in some zones only (a zone whose price file is missing):
// there is no price to forecast as a whole, so it never waits for a drop,
// and it decides without reading a price series that is not there (it used
// to crash here).
TEST_F(ForecastUp, AMarketPricedInSomeZonesOnlyIsDecidedWithoutPrices) {
  const int days = 10;
  std::vector<double> price;
  for (int t = 0; t < 24 * days; ++t) price.push_back(t % 24 < 6 ? 2.0 : 1.0);
  const int64_t now = 24 * 8 + 1;
  Use({MakeTrace(3600, std::vector<int32_t>(24 * days, 1), price),
       MakeTrace(3600, std::vector<int32_t>(24 * days, 1))});
  // Ahead of the line, where a priced market would wait: spot now.
  EXPECT_EQ(testing::TargetOf(DecideAt(now, Placement::Idle(), 5, 1)).kind, InstanceKind::kSpot);
}

TEST_F(ForecastUp, SafetyNetIsUps) {
  Use({MakeTrace(3600, std::vector<int32_t>(100, 1))});
  // R = 40 - 30 = 10 < W + 2d = 10 + 0.4: on-demand.
  EXPECT_EQ(testing::TargetOf(DecideAt(50, Placement::Idle(), 0, 30)), Placement::OnDemand());
}

}  // namespace
}  // namespace spot::policy
