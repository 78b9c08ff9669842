// A synthetic spot market fitted to real records, so every command also runs
// on a machine without ../shared/data.
//
// Model, per zone: availability alternates between "up" runs (a spot instance
// can be had and kept) and "down" runs, with run lengths drawn independently
// from two lognormal distributions (an alternating renewal process). The
// lognormal's sigma is the spread of the log run lengths; its mu is set so the
// mean matches the empirical mean run length, which keeps the availability
// fraction and the preemption rate of the source. Prices change at Poisson
// times (rate changes_per_hour); at each change the log price moves as an
// AR(1) around log(level): x' = m + reversion * (x - m) + volatility * z.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/status.h"
#include "market/trace.h"

namespace spot::market {

// A lognormal distribution of run lengths in hours: log(L) ~ N(mu, sigma^2).
struct LogNormalHours {
  double mu = 0;
  double sigma = 0;
  int64_t runs = 0;  // runs it was fitted from; 0 = this state never occurs
  double Mean() const;
  double Median() const;
};

struct PriceModel {
  bool known = false;           // false: generated traces carry no prices
  double initial = 0;           // $/h at tick 0
  double level = 0;             // long-run (geometric mean) $/h, > 0 when known
  double changes_per_hour = 0;  // rate of price change points
  double reversion = 0;         // AR(1) coefficient of log price per change, in [0, 1)
  double volatility = 0;        // std of the log-price innovation per change
};

struct SyntheticModel {
  Pool pool;
  std::string name;                  // e.g. "us-east-1a_v100_1"
  std::string fitted_from;           // the files (or trace) the parameters came from
  double gap_seconds = 0;            // tick of generated traces, > 0
  int32_t capacity = 1;              // count written for an "up" tick (node count)
  double availability_fraction = 0;  // measured on the source (for reports)
  LogNormalHours up;                 // available run lengths
  LogNormalHours down;               // unavailable run lengths
  PriceModel price;

  // mean(up) / (mean(up) + mean(down)): the long-run fraction generated traces have.
  double ImpliedAvailability() const;
};

struct FitOptions {
  int32_t min_count = 1;  // a tick is "up" when available >= min_count (gang size), >= 1
};

// Fits a model to any trace. Runs that touch either end of the trace are
// truncated, so they are used only when a state has no complete run.
// InvalidArgument for an empty trace, gap_seconds <= 0 or min_count < 1.
Result<SyntheticModel> FitSyntheticModel(const Trace& trace, const FitOptions& options = {});

// A trace of `ticks` ticks drawn from `model`: identical for identical
// (model, ticks, seed) on every platform. available[t] is model.capacity or 0;
// prices are filled when model.price.known. REQUIRES: model.gap_seconds > 0.
Trace GenerateSyntheticTrace(const SyntheticModel& model, int64_t ticks, uint64_t seed);

// Built-in fits of the five zones of availability/aws-v100-2023-02 (p3.2xlarge,
// 195 s ticks) with the prices of prices/aws_p3.2xlarge_spot_2023-02-15_2023-04-02.csv.
// On-demand price of p3.2xlarge there: kP3OnDemandUsdPerHour.
std::vector<SyntheticModel> DefaultSyntheticModels();
inline constexpr double kP3OnDemandUsdPerHour = 3.06;

// One generated trace per default model, each seeded from `seed` and its index;
// 20158 ticks = the 45.5 days of the source.
std::vector<Trace> DefaultSyntheticZones(int64_t ticks = 20158, uint64_t seed = 1);

}  // namespace spot::market
