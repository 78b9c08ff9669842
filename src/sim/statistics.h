// Statistics of an evaluation over sampled job starts: mean, p95 and a
// percentile-bootstrap 95% interval of a per-start quantity, with the starts
// grouped in strata (zones) that keep their sizes in every resample.
// Deterministic: the resampling stream depends only on the seed.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

namespace spot::sim {

struct Interval {
  double lo = 0;
  double hi = 0;
};

struct BootstrapOptions {
  int resamples = 2000;  // >= 1
  uint64_t seed = 1;     // the same seed gives the same interval
  double level = 0.95;   // the interval holds this central share of resampled means
};

// Percentile-bootstrap interval of the mean of all values of `strata`: each
// resample draws, with replacement, as many values from each stratum as it
// holds, and the interval is the (1 - level) / 2 and (1 + level) / 2
// quantiles of the resampled means. Empty strata are skipped; no values at
// all give {0, 0}.
Interval BootstrapMeanInterval(std::span<const std::span<const double>> strata,
                               const BootstrapOptions& options = {});
// One stratum.
Interval BootstrapMeanInterval(std::span<const double> values,
                               const BootstrapOptions& options = {});

// A per-start quantity summarised.
struct Distribution {
  double mean = 0;
  double p95 = 0;  // linear interpolation between order statistics (sim::Quantile)
  Interval ci;     // bootstrap interval of the mean
};

Distribution Summarize(std::span<const std::span<const double>> strata,
                       const BootstrapOptions& options = {});

}  // namespace spot::sim
