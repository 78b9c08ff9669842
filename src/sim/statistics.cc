#include "sim/statistics.h"

#include <random>

#include "sim/evaluate.h"

namespace spot::sim {
namespace {

// A uniform index in [0, n) from one 64-bit draw (Lemire's multiply-shift):
// the same on every platform, unlike std::uniform_int_distribution.
size_t Draw(std::mt19937_64& rng, size_t n) {
  return static_cast<size_t>((static_cast<unsigned __int128>(rng()) * n) >> 64);
}

}  // namespace

Interval BootstrapMeanInterval(std::span<const std::span<const double>> strata,
                               const BootstrapOptions& o) {
  size_t total = 0;
  for (auto s : strata) total += s.size();
  if (total == 0 || o.resamples < 1) return {};
  std::mt19937_64 rng(o.seed);
  std::vector<double> means(static_cast<size_t>(o.resamples));
  for (double& m : means) {
    double sum = 0;
    for (auto s : strata) {
      for (size_t i = 0; i < s.size(); ++i) sum += s[Draw(rng, s.size())];
    }
    m = sum / static_cast<double>(total);
  }
  const double tail = (1 - o.level) / 2;
  return {Quantile(means, tail), Quantile(means, 1 - tail)};
}

Interval BootstrapMeanInterval(std::span<const double> values, const BootstrapOptions& o) {
  const std::span<const double> one[] = {values};
  return BootstrapMeanInterval(one, o);
}

Distribution Summarize(std::span<const std::span<const double>> strata, const BootstrapOptions& o) {
  std::vector<double> all;
  for (auto s : strata) all.insert(all.end(), s.begin(), s.end());
  Distribution d;
  for (double v : all) d.mean += v;
  if (!all.empty()) d.mean /= static_cast<double>(all.size());
  d.p95 = Quantile(all, 0.95);
  d.ci = BootstrapMeanInterval(strata, o);
  return d;
}

}  // namespace spot::sim
