#include "market/synthetic.h"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "market/rng.h"

namespace spot::market {
namespace {

// Fits mu and sigma to run lengths (hours), matching the mean (see header).
LogNormalHours FitLogNormal(const std::vector<double>& hours) {
  LogNormalHours d;
  d.runs = static_cast<int64_t>(hours.size());
  if (hours.empty()) return d;
  const double n = static_cast<double>(hours.size());
  double mean = std::accumulate(hours.begin(), hours.end(), 0.0) / n;
  double log_mean = 0, log_sq = 0;
  for (double h : hours) log_mean += std::log(h) / n;
  for (double h : hours) log_sq += (std::log(h) - log_mean) * (std::log(h) - log_mean) / n;
  d.sigma = std::sqrt(log_sq);
  d.mu = std::log(mean) - d.sigma * d.sigma / 2;
  return d;
}

// Lengths (hours) of the complete runs of one state; the truncated ones only
// when there is no complete run.
std::vector<double> RunHours(const std::vector<AvailabilityRun>& runs, bool up, double gap_s) {
  std::vector<double> complete, truncated;
  for (size_t i = 0; i < runs.size(); ++i) {
    if (runs[i].up != up) continue;
    bool cut = i == 0 || runs[i].censored_end;
    (cut ? truncated : complete).push_back(static_cast<double>(runs[i].length) * gap_s / 3600);
  }
  return complete.empty() ? truncated : complete;
}

// Least-squares AR(1) coefficient and residual std of x around m.
void FitAr1(const std::vector<double>& x, double m, PriceModel* p) {
  double num = 0, den = 0;
  for (size_t k = 0; k + 1 < x.size(); ++k) {
    num += (x[k + 1] - m) * (x[k] - m);
    den += (x[k] - m) * (x[k] - m);
  }
  p->reversion = den > 0 ? std::clamp(num / den, 0.0, 0.999) : 0.0;
  double ss = 0;
  for (size_t k = 0; k + 1 < x.size(); ++k) {
    double r = (x[k + 1] - m) - p->reversion * (x[k] - m);
    ss += r * r;
  }
  p->volatility = x.size() > 1 ? std::sqrt(ss / static_cast<double>(x.size() - 1)) : 0.0;
}

PriceModel FitPrice(const Trace& trace) {
  PriceModel p;
  if (!trace.has_prices()) return p;
  std::vector<double> logs;  // log price at tick 0 and at every change
  double sum_log = 0;
  for (size_t t = 0; t < trace.price.size(); ++t) {
    double lp = std::log(std::max(trace.price[t], 1e-9));
    sum_log += lp;
    if (t == 0 || trace.price[t] != trace.price[t - 1]) logs.push_back(lp);
  }
  const double m = sum_log / static_cast<double>(trace.price.size());
  p.known = true;
  p.initial = trace.price.front();
  p.level = std::exp(m);
  p.changes_per_hour = static_cast<double>(logs.size() - 1) / trace.hours();
  FitAr1(logs, m, &p);
  return p;
}

// A run length in ticks: stochastic rounding keeps the mean, at least 1 tick.
int64_t DrawTicks(const LogNormalHours& d, double gap_s, Rng& rng) {
  double ticks = std::exp(d.mu + d.sigma * rng.Normal()) * 3600 / gap_s;
  ticks = std::min(ticks, 1e12);
  double whole = std::floor(ticks);
  if (rng.Uniform() <= ticks - whole) whole += 1;
  return std::max<int64_t>(1, static_cast<int64_t>(whole));
}

void FillAvailability(const SyntheticModel& m, Rng& rng, Trace* out) {
  const int64_t ticks = static_cast<int64_t>(out->available.size());
  bool up = m.down.runs == 0 || (m.up.runs > 0 && rng.Bernoulli(m.ImpliedAvailability()));
  for (int64_t t = 0; t < ticks;) {
    const LogNormalHours& d = up ? m.up : m.down;
    // A state that never occurs in the source never ends once entered.
    int64_t len = (up ? m.down.runs : m.up.runs) == 0 ? ticks : DrawTicks(d, m.gap_seconds, rng);
    int64_t end = std::min(ticks, t + len);
    std::fill(out->available.begin() + t, out->available.begin() + end, up ? m.capacity : 0);
    t = end;
    up = !up;
  }
}

void FillPrices(const PriceModel& p, double gap_s, Rng& rng, Trace* out) {
  const double change_p = 1 - std::exp(-p.changes_per_hour * gap_s / 3600);
  const double m = std::log(p.level);
  double x = std::log(std::max(p.initial, 1e-9));
  out->price.resize(out->available.size());
  for (double& price : out->price) {
    if (rng.Bernoulli(change_p)) x = m + p.reversion * (x - m) + p.volatility * rng.Normal();
    // Round to $0.0001 (as AWS quotes) so a price series has change points like a real one.
    price = std::round(std::exp(x) * 1e4) / 1e4;
  }
}

}  // namespace

double LogNormalHours::Mean() const { return std::exp(mu + sigma * sigma / 2); }
double LogNormalHours::Median() const { return std::exp(mu); }

double SyntheticModel::ImpliedAvailability() const {
  if (up.runs == 0) return 0;
  if (down.runs == 0) return 1;
  return up.Mean() / (up.Mean() + down.Mean());
}

Result<SyntheticModel> FitSyntheticModel(const Trace& trace, const FitOptions& options) {
  if (trace.available.empty()) return InvalidArgumentError("fit: empty trace " + trace.name);
  if (!(trace.gap_seconds > 0)) return InvalidArgumentError("fit: gap_seconds must be > 0");
  if (options.min_count < 1) return InvalidArgumentError("fit: min_count must be >= 1");
  SyntheticModel m;
  m.pool = trace.pool;
  m.name = trace.name;
  m.fitted_from = trace.source;
  m.gap_seconds = trace.gap_seconds;
  m.capacity = options.min_count;
  m.availability_fraction = AvailabilityFraction(trace, options.min_count);
  std::vector<AvailabilityRun> runs = AvailabilityRuns(trace, options.min_count);
  m.up = FitLogNormal(RunHours(runs, true, trace.gap_seconds));
  m.down = FitLogNormal(RunHours(runs, false, trace.gap_seconds));
  m.price = FitPrice(trace);
  return m;
}

Trace GenerateSyntheticTrace(const SyntheticModel& model, int64_t ticks, uint64_t seed) {
  Trace out;
  out.pool = model.pool;
  out.name = model.name;
  out.source = "synthetic(" + model.fitted_from + ", seed " + std::to_string(seed) + ")";
  out.gap_seconds = model.gap_seconds;
  out.available.assign(static_cast<size_t>(std::max<int64_t>(ticks, 0)), 0);
  // Separate streams, so adding prices does not change the availability.
  Rng avail_rng(seed), price_rng(seed ^ 0x5851f42d4c957f2dULL);
  FillAvailability(model, avail_rng, &out);
  if (model.price.known) FillPrices(model.price, model.gap_seconds, price_rng, &out);
  return out;
}

std::vector<Trace> DefaultSyntheticZones(int64_t ticks, uint64_t seed) {
  std::vector<Trace> out;
  std::vector<SyntheticModel> models = DefaultSyntheticModels();
  for (size_t i = 0; i < models.size(); ++i) {
    out.push_back(GenerateSyntheticTrace(models[i], ticks, seed * 1000003 + i));
  }
  return out;
}

}  // namespace spot::market
