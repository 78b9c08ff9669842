// Fitting a policy's tunable parameters (policy/registry.h) on training data,
// and the memo of simulated runs the evaluation protocols share.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <set>
#include <span>
#include <string>
#include <tuple>
#include <vector>

#include "core/status.h"
#include "market/trace.h"
#include "policy/registry.h"
#include "sim/spot_sim.h"

namespace spot::sim {

// One run as the protocols keep it.
struct StartRun {
  int64_t start = 0;  // absolute tick of the job's start
  double cost = 0;    // $
  double od_hours = 0;
  double spot_hours = 0;
  bool met_deadline = false;
  int changeovers = 0;  // instance starts and moves (each costs the job's d of no progress)
  int preemptions = 0;  // ticks at which the market took instances back
};

// Runs policies, by name and parameters, on markets (one zone or several as
// one market) from given starts, and remembers every run: the protocols ask
// for the same (policy, parameters, market, start) many times (each fold of
// leave-one-out re-reads the other zones). Policies are deterministic given
// the market and the start, so a remembered run is the run. A market is
// identified by its traces' addresses: they must outlive the memo. Not
// thread-safe.
class RunMemo {
 public:
  // `threads` > 1 simulates the starts a call has not seen on that many
  // threads, each with its own instance of the policy (0: one per core, at
  // most 8).
  // Policies start every job afresh (Policy::Start), so the runs are the same
  // on any number of threads.
  // `recorded_ondemand_price`: each market's runs priced at the on-demand
  // price its zones record (WithRecordedOnDemandPrice), not the job's.
  RunMemo(const policy::PolicyRegistry& registry, JobSpec job, int threads = 1,
          bool recorded_ondemand_price = false);

  // The runs of `policy` with `params` from each of `starts`. NotFound for an
  // unknown policy, InvalidArgument for bad parameters, a bad market or job,
  // or a start outside the traces.
  Result<std::vector<StartRun>> Runs(const std::string& policy, const policy::ParamSet& params,
                                     std::span<const market::Trace* const> zones,
                                     std::span<const int64_t> starts);

  const JobSpec& job() const { return job_; }
  int threads() const { return threads_; }
  const policy::PolicyRegistry& registry() const { return registry_; }
  int64_t simulated() const { return simulated_; }  // runs simulated (not remembered)
  int64_t asked() const { return asked_; }          // runs asked for

 private:
  using Key = std::tuple<std::string, std::vector<const market::Trace*>, int64_t>;
  using RunMap = std::map<Key, StartRun>;
  Result<policy::Policy*> Instance(const std::string& key, const std::string& policy,
                                   const policy::ParamSet& params);
  // Fills the runs of `todo` (entries of runs_ not simulated yet) on up to
  // threads_ threads.
  Status Simulate(const std::string& key, const std::string& policy, const policy::ParamSet& params,
                  std::span<const market::Trace* const> zones, const JobSpec& job,
                  std::span<const RunMap::iterator> todo);

  const policy::PolicyRegistry& registry_;
  JobSpec job_;
  int threads_ = 1;
  bool recorded_ondemand_price_ = false;
  RunMap runs_;
  std::map<std::string, std::unique_ptr<policy::Policy>> instances_;
  std::set<std::vector<const market::Trace*>> valid_;
  int64_t simulated_ = 0, asked_ = 0;
};

// A training set: a market and the starts to run on it.
struct FitSet {
  std::vector<const market::Trace*> zones;
  std::vector<int64_t> starts;
};

struct FitResult {
  policy::ParamSet params;     // the chosen grid point
  double train_mean_cost = 0;  // its mean cost over every training start
  int candidates = 0;          // grid points tried
  // Grid points that missed a deadline `up` met on some training start.
  int rejected = 0;
  // False when every grid point missed such a deadline: the one with the
  // fewest such misses was chosen (then the cheapest).
  bool constraint_met = true;
  // The cheapest grid point's mean saving per training start against the
  // defaults (paired, same starts; $) and the saving's standard error, 0 and
  // 0 when the defaults are the cheapest. kept_defaults: the defaults were
  // chosen because that saving was within one standard error.
  double saving_vs_defaults = 0;
  double saving_se = 0;
  bool kept_defaults = false;
};

// Called after each training set of each candidate: (runs done, runs in all).
using FitProgressFn = std::function<void(int64_t done, int64_t total)>;

// Chooses `policy`'s parameters on `train`: among its grid points (all of
// them run on every training start), those that never miss a deadline `up`
// meets on the same start, the least mean cost over all training starts;
// costs equal to a part in 1e12 go to the earlier grid point (defaults
// first). The one-standard-error rule then keeps the defaults (when they meet
// that constraint) unless the cheapest point's mean saving against them
// exceeds its standard error: starts of one training set less than a
// deadline apart meet the same market events, so the error is computed over
// clusters (a set's starts within one deadline-long block of ticks), and
// with fewer than two clusters it is unknown and the defaults stay. A policy
// without tunables gets its defaults without a run. InvalidArgument when
// `train` holds no start.
Result<FitResult> FitPolicy(RunMemo& memo, const std::string& policy, std::span<const FitSet> train,
                            const FitProgressFn& progress = nullptr);

}  // namespace spot::sim
