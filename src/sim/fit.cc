#include "sim/fit.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <utility>

#include "sim/evaluate.h"

namespace spot::sim {
namespace {

std::string ConfigKey(const std::string& policy, const policy::ParamSet& params) {
  return policy + "{" + policy::FormatParams(params) + "}";
}

struct Candidate {
  double sum_cost = 0;
  int64_t runs = 0;
  int64_t misses_up_met = 0;
};

// a is better than b (b comes later in the grid).
bool Better(const Candidate& a, const Candidate& b) {
  if ((a.misses_up_met > 0) != (b.misses_up_met > 0)) return a.misses_up_met == 0;
  if (a.misses_up_met != b.misses_up_met) return a.misses_up_met < b.misses_up_met;
  const double ma = a.sum_cost / a.runs, mb = b.sum_cost / b.runs;
  return ma < mb - 1e-12 * std::max(std::abs(ma), std::abs(mb));
}

// The mean per-start saving of `b` against `a` (paired) and its
// cluster-robust standard error; clusters are one training set's starts in
// one deadline-long block of ticks. The error is infinite with one cluster.
struct Saving {
  double mean = 0;
  double se = 0;
};
Saving PairedSaving(std::span<const FitSet> train, std::span<const std::vector<StartRun>> a,
                    std::span<const std::vector<StartRun>> b, double deadline_hours) {
  struct Cluster {
    double sum = 0;
    int64_t starts = 0;
  };
  std::map<std::pair<size_t, int64_t>, Cluster> clusters;  // (set, block)
  const double block_seconds = deadline_hours * 3600;
  double total = 0;
  int64_t n = 0;
  for (size_t i = 0; i < train.size(); ++i) {
    const double gap_seconds = train[i].zones.front()->gap_seconds;
    for (size_t k = 0; k < a[i].size(); ++k) {
      const double d = a[i][k].cost - b[i][k].cost;
      const auto block = static_cast<int64_t>(
          std::floor(static_cast<double>(a[i][k].start) * gap_seconds / block_seconds));
      Cluster& c = clusters[{i, block}];
      c.sum += d;
      ++c.starts;
      total += d;
      ++n;
    }
  }
  Saving s{.mean = total / static_cast<double>(n)};
  const double m = static_cast<double>(clusters.size());
  if (m < 2) {
    s.se = std::numeric_limits<double>::infinity();
    return s;
  }
  double sq = 0;
  for (const auto& [key, c] : clusters) {
    const double r = c.sum - static_cast<double>(c.starts) * s.mean;
    sq += r * r;
  }
  s.se = std::sqrt(sq * m / (m - 1)) / static_cast<double>(n);
  return s;
}

}  // namespace

RunMemo::RunMemo(const policy::PolicyRegistry& registry, JobSpec job, int threads,
                 bool recorded_ondemand_price)
    : registry_(registry),
      job_(job),
      threads_(SimulationThreads(threads)),
      recorded_ondemand_price_(recorded_ondemand_price) {}

Result<policy::Policy*> RunMemo::Instance(const std::string& key, const std::string& policy,
                                          const policy::ParamSet& params) {
  auto it = instances_.find(key);
  if (it != instances_.end()) return it->second.get();
  SPOT_ASSIGN_OR_RETURN(std::unique_ptr<policy::Policy> p,
                        registry_.Create(policy::PolicyConfig(policy, params)));
  return (instances_[key] = std::move(p)).get();
}

Status RunMemo::Simulate(const std::string& key, const std::string& policy,
                         const policy::ParamSet& params,
                         std::span<const market::Trace* const> zones, const JobSpec& job,
                         std::span<const RunMap::iterator> todo) {
  const size_t n = std::min(todo.size(), static_cast<size_t>(threads_));
  std::vector<policy::Policy*> instances;
  for (size_t k = 0; k < n; ++k) {  // the k-th thread's own instance
    SPOT_ASSIGN_OR_RETURN(policy::Policy * p,
                          Instance(k == 0 ? key : key + "#" + std::to_string(k), policy, params));
    instances.push_back(p);
  }
  RunInShares(todo.size(), n, [&](size_t k, size_t i) {
    const int64_t start = std::get<2>(todo[i]->first);
    RunResult r = SimulateJob(*instances[k], zones, start, job);
    todo[i]->second = {.start = start,
                       .cost = r.cost,
                       .od_hours = r.od_hours,
                       .spot_hours = r.spot_hours,
                       .met_deadline = r.met_deadline,
                       .changeovers = r.changeovers,
                       .preemptions = r.preemptions};
  });
  simulated_ += static_cast<int64_t>(todo.size());
  return Status::Ok();
}

Result<std::vector<StartRun>> RunMemo::Runs(const std::string& policy,
                                            const policy::ParamSet& params,
                                            std::span<const market::Trace* const> zones,
                                            std::span<const int64_t> starts) {
  std::vector<const market::Trace*> market(zones.begin(), zones.end());
  const JobSpec job = recorded_ondemand_price_ ? WithRecordedOnDemandPrice(job_, zones) : job_;
  if (!valid_.count(market)) {
    SPOT_RETURN_IF_ERROR(ValidateMarket(zones, job));
    valid_.insert(market);
  }
  const std::string key = ConfigKey(policy, params);
  for (int64_t s : starts) {
    if (s < 0 || s >= zones[0]->ticks()) {
      return InvalidArgumentError("start tick " + std::to_string(s) + " is outside " +
                                  zones[0]->name + " (0.." + std::to_string(zones[0]->ticks()) +
                                  ")");
    }
  }
  std::vector<const StartRun*> slots;
  slots.reserve(starts.size());
  std::vector<RunMap::iterator> fresh;  // runs not simulated yet
  for (int64_t s : starts) {
    ++asked_;
    auto [it, added] = runs_.try_emplace(Key{key, market, s});
    if (added) fresh.push_back(it);
    slots.push_back(&it->second);
  }
  if (!fresh.empty()) {
    Status st = Simulate(key, policy, params, zones, job, fresh);
    if (!st.ok()) {
      for (auto it : fresh) runs_.erase(it);
      return st;
    }
  }
  std::vector<StartRun> out;
  out.reserve(slots.size());
  for (const StartRun* r : slots) out.push_back(*r);
  return out;
}

Result<FitResult> FitPolicy(RunMemo& memo, const std::string& policy, std::span<const FitSet> train,
                            const FitProgressFn& progress) {
  const std::vector<policy::ParamSet> grid = memo.registry().Grid(policy);
  FitResult out;
  out.candidates = static_cast<int>(grid.size());
  if (grid.size() == 1) {  // nothing to fit; no run needed
    out.params = grid[0];
    out.train_mean_cost = std::nan("");
    return out;
  }
  int64_t per_candidate = 0;
  for (const FitSet& t : train) per_candidate += static_cast<int64_t>(t.starts.size());
  if (per_candidate == 0) return InvalidArgumentError("fitting " + policy + ": no training start");
  const int64_t total = per_candidate * static_cast<int64_t>(grid.size() + 1);
  int64_t done = 0;
  std::vector<std::vector<StartRun>> up;
  for (const FitSet& t : train) {
    SPOT_ASSIGN_OR_RETURN(auto runs, memo.Runs("up", {}, t.zones, t.starts));
    up.push_back(std::move(runs));
    if (progress) progress(done += static_cast<int64_t>(t.starts.size()), total);
  }
  std::vector<Candidate> cands(grid.size());
  for (size_t g = 0; g < grid.size(); ++g) {
    for (size_t i = 0; i < train.size(); ++i) {
      SPOT_ASSIGN_OR_RETURN(auto runs, memo.Runs(policy, grid[g], train[i].zones, train[i].starts));
      for (size_t k = 0; k < runs.size(); ++k) {
        cands[g].sum_cost += runs[k].cost;
        cands[g].misses_up_met += up[i][k].met_deadline && !runs[k].met_deadline;
      }
      cands[g].runs += static_cast<int64_t>(runs.size());
      if (progress) progress(done += static_cast<int64_t>(runs.size()), total);
    }
    out.rejected += cands[g].misses_up_met > 0;
  }
  size_t best = 0;
  for (size_t g = 1; g < grid.size(); ++g) {
    if (Better(cands[g], cands[best])) best = g;
  }
  if (best != 0 && cands[0].misses_up_met == 0) {
    // Both were run above: the memo hands their runs back.
    std::vector<std::vector<StartRun>> defaults, cheapest;
    for (const FitSet& t : train) {
      SPOT_ASSIGN_OR_RETURN(auto d, memo.Runs(policy, grid[0], t.zones, t.starts));
      SPOT_ASSIGN_OR_RETURN(auto c, memo.Runs(policy, grid[best], t.zones, t.starts));
      defaults.push_back(std::move(d));
      cheapest.push_back(std::move(c));
    }
    const Saving s = PairedSaving(train, defaults, cheapest, memo.job().deadline_hours);
    out.saving_vs_defaults = s.mean;
    out.saving_se = s.se;
    if (!(s.mean > s.se)) {
      out.kept_defaults = true;
      best = 0;
    }
  }
  out.params = grid[best];
  out.train_mean_cost = cands[best].sum_cost / static_cast<double>(cands[best].runs);
  out.constraint_met = cands[best].misses_up_met == 0;
  return out;
}

}  // namespace spot::sim
