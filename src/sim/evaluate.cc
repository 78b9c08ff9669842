#include "sim/evaluate.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <memory>
#include <mutex>
#include <system_error>
#include <thread>
#include <vector>

namespace spot::sim {

double Quantile(std::vector<double> v, double q) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  double pos = q * static_cast<double>(v.size() - 1);
  size_t lo = static_cast<size_t>(std::floor(pos));
  size_t hi = std::min(lo + 1, v.size() - 1);
  return v[lo] + (pos - static_cast<double>(lo)) * (v[hi] - v[lo]);
}

int SimulationThreads(int threads) {
  if (threads > 0) return threads;
  return static_cast<int>(std::clamp(std::thread::hardware_concurrency(), 1u, 8u));
}

void RunInShares(size_t items, size_t shares, const std::function<void(size_t, size_t)>& run) {
  shares = std::max<size_t>(1, shares);
  auto share = [&](size_t k) {
    for (size_t i = items * k / shares; i < items * (k + 1) / shares; ++i) run(k, i);
  };
  std::vector<size_t> left;  // shares no thread could be started for
  {
    std::vector<std::jthread> pool;
    for (size_t k = 1; k < shares; ++k) {
      try {
        pool.emplace_back(share, k);
      } catch (const std::system_error&) {
        left.push_back(k);
      }
    }
    share(0);
    for (size_t k : left) share(k);
  }
}

Result<PolicyStats> EvaluatePolicy(const policy::PolicyRegistry& registry, const std::string& name,
                                   std::span<const market::Trace* const> zones, const JobSpec& job,
                                   int samples, const EvalProgressFn& progress, int threads) {
  auto begin = std::chrono::steady_clock::now();
  SPOT_RETURN_IF_ERROR(ValidateMarket(zones, job));
  SPOT_ASSIGN_OR_RETURN(
      std::vector<int64_t> starts,
      SampleStarts(zones[0]->ticks(), zones[0]->gap_seconds, job.deadline_hours, samples));
  const size_t n = std::clamp<size_t>(starts.size(), 1, SimulationThreads(threads));
  std::vector<std::unique_ptr<policy::Policy>> instances;
  for (size_t k = 0; k < n; ++k) {
    SPOT_ASSIGN_OR_RETURN(std::unique_ptr<policy::Policy> p, registry.Create(name));
    instances.push_back(std::move(p));
  }
  PolicyStats st;
  st.policy = name;
  st.samples = samples;
  st.runs.resize(starts.size());
  std::mutex mu;  // the progress callback's
  int done = 0;
  RunInShares(starts.size(), n, [&](size_t k, size_t i) {
    st.runs[i] = SimulateJob(*instances[k], zones, starts[i], job);
    if (!progress) return;
    std::lock_guard lock(mu);
    progress(++done, samples);
  });
  std::vector<double> costs;
  for (const RunResult& r : st.runs) {
    costs.push_back(r.cost);
    st.mean_cost += r.cost / samples;
    st.mean_spot_hours += r.spot_hours / samples;
    st.mean_od_hours += r.od_hours / samples;
    st.deadline_misses += !r.met_deadline;
  }
  st.p50_cost = Quantile(costs, 0.5);
  st.p95_cost = Quantile(costs, 0.95);
  st.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - begin).count();
  return st;
}

}  // namespace spot::sim
