#include "sim/evaluate.h"

#include <algorithm>
#include <chrono>
#include <cmath>

namespace spot::sim {

double Quantile(std::vector<double> v, double q) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  double pos = q * static_cast<double>(v.size() - 1);
  size_t lo = static_cast<size_t>(std::floor(pos));
  size_t hi = std::min(lo + 1, v.size() - 1);
  return v[lo] + (pos - static_cast<double>(lo)) * (v[hi] - v[lo]);
}

Result<PolicyStats> EvaluatePolicy(const policy::PolicyRegistry& registry, const std::string& name,
                                   std::span<const market::Trace* const> zones,
                                   const JobSpec& job, int samples,
                                   const EvalProgressFn& progress) {
  auto begin = std::chrono::steady_clock::now();
  SPOT_RETURN_IF_ERROR(ValidateMarket(zones, job));
  SPOT_ASSIGN_OR_RETURN(std::vector<int64_t> starts,
                        SampleStarts(zones[0]->ticks(), zones[0]->gap_seconds,
                                     job.deadline_hours, samples));
  SPOT_ASSIGN_OR_RETURN(std::unique_ptr<policy::Policy> p, registry.Create(name));
  PolicyStats st;
  st.policy = name;
  st.samples = samples;
  std::vector<double> costs;
  for (int64_t s : starts) {
    RunResult r = SimulateJob(*p, zones, s, job);
    costs.push_back(r.cost);
    st.mean_cost += r.cost / samples;
    st.mean_spot_hours += r.spot_hours / samples;
    st.mean_od_hours += r.od_hours / samples;
    st.deadline_misses += !r.met_deadline;
    st.runs.push_back(std::move(r));
    if (progress) progress(static_cast<int>(st.runs.size()), samples);
  }
  st.p50_cost = Quantile(costs, 0.5);
  st.p95_cost = Quantile(costs, 0.95);
  st.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - begin).count();
  return st;
}

}  // namespace spot::sim
