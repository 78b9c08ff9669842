// Evaluation protocols of SpotSim: what a policy's number means.
//   in-sample   every policy with its registered defaults, scored on starts
//               spread over the whole of every market. The defaults were
//               chosen by looking at these same traces: not out of sample.
//   loo         leave one market out: a policy's tunable parameters
//               (policy/registry.h) are fitted (sim/fit.h) on the starts of
//               every other market and scored on the left-out one.
//   time-split  parameters fitted once on the first `train_fraction` of every
//               market (the traces cut there: the fit never sees the rest),
//               scored on starts whose whole deadline window lies in the
//               rest; the policy sees the first part as history.
// Every policy is scored on the same starts as `up` and `od` (run alongside
// as references), so the ratio to `up` is paired start by start. Results per
// market and pooled over markets; intervals by a stratified percentile
// bootstrap (statistics.h). Deterministic: the same inputs give the same
// result, bit for bit.
#pragma once

#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"
#include "market/trace.h"
#include "policy/registry.h"
#include "sim/fit.h"
#include "sim/statistics.h"

namespace spot::sim {

enum class Protocol { kInSample, kLeaveOneOut, kTimeSplit };

// "in-sample", "loo", "time-split"; InvalidArgument naming the known ones.
Result<Protocol> ParseProtocol(std::string_view name);
std::string_view ProtocolName(Protocol p);

// Where job starts fall in a window of ticks.
struct StartSampling {
  int samples = 300;  // S evenly spaced starts per window, when every == 0; >= 1
  int64_t every = 0;  // > 0: a start every `every` ticks from the window's first
};

// The starts whose deadline window [s, s + W), W = ceil(D * 3600 / g), lies
// in [begin, end): with sampling.every = K, begin, begin + K, ... up to
// end - W; else S starts begin + floor(i * (end - begin - W) / S), i < S (for
// [0, T) the starts of SampleStarts). InvalidArgument when the window is
// shorter than W or the sampling is malformed.
Result<std::vector<int64_t>> SampleStartsIn(int64_t begin, int64_t end, double gap_seconds,
                                            double deadline_hours, const StartSampling& sampling);

struct ProtocolOptions {
  Protocol protocol = Protocol::kLeaveOneOut;
  StartSampling sampling;
  double train_fraction = 0.5;  // time-split: share of each trace fitted on, in (0, 1)
  BootstrapOptions bootstrap;
  int threads = 0;  // simulation threads (0: one per core, at most 8); figures do not depend on it
  // Each market priced at the on-demand price its zones record
  // (WithRecordedOnDemandPrice), the job's where they record none.
  bool recorded_ondemand_price = false;
};

// A market of the protocol: one zone, or several zones as one market.
struct ProtocolMarket {
  std::string name;
  std::vector<const market::Trace*> zones;  // not owned; outlive RunProtocol
  std::string prices;                       // which spot prices these are, for reports
};

// One policy scored on a set of starts (a market's, or pooled).
struct ScoreStats {
  int samples = 0;
  Distribution cost;         // $ per job
  Distribution ratio_to_up;  // cost / up's cost on the same start
  int deadline_misses = 0;
  int misses_up_met = 0;     // misses on starts where up met the deadline
  double mean_od_hours = 0;  // on-demand instance-hours per node
  double mean_spot_hours = 0;
  double share_above_od = 0;  // share of starts costing more than od on the same start
  double od_mean_cost = 0;    // od's mean cost on the same starts (the reference)
  // The seeds' claims, per start: the saving against on-demand on the same
  // start (1 - cost / od's cost; "up to 90 %" is its max), and the time lost
  // to restarts (changeovers x d, the hours an instance starts or moves
  // without progress) as a share of the job's compute C. Work since the last
  // checkpoint is not lost in this model (a notice saves it); what `spot
  // run` measures for real is in docs/benchmarks.md.
  Distribution savings_vs_od;
  double max_savings_vs_od = 0;
  Distribution restart_share;
  double mean_preemptions = 0;
};

struct PolicyScore {
  std::string policy;
  policy::ParamSet params;  // what it was scored with
  bool fitted = false;      // params came from a fit (else: defaults)
  FitResult fit;            // when fitted
  std::vector<StartRun> runs;
  ScoreStats stats;
};

struct MarketResult {
  std::string name;
  std::string prices;
  int64_t ticks = 0;
  int64_t score_begin = 0;  // the window the scored starts lie in
  int64_t score_end = 0;
  std::vector<int64_t> starts;        // scored starts
  std::vector<std::string> trained;   // the markets the fit used (names)
  std::vector<PolicyScore> policies;  // in the order asked
};

struct ProtocolResult {
  ProtocolOptions options;
  JobSpec job;
  std::vector<MarketResult> markets;
  std::vector<PolicyScore> pooled;  // per policy (no runs, no params)
  int64_t simulated = 0;            // runs simulated
  double seconds = 0;               // wall time
};

// (stage, done, total): stage names what is running ("fit hazard-up without
// us-east-1a", "score us-east-1a"); done and total count runs in that stage.
using ProtocolProgressFn =
    std::function<void(const std::string& stage, int64_t done, int64_t total)>;

// Runs `policies` under options.protocol. InvalidArgument for a bad market or
// job (naming the market), an empty policy list, loo with fewer than two
// markets, a train_fraction outside (0, 1), a time-split part shorter than
// the deadline; NotFound for an unknown policy.
Result<ProtocolResult> RunProtocol(const policy::PolicyRegistry& registry,
                                   std::span<const ProtocolMarket> markets, const JobSpec& job,
                                   std::span<const std::string> policies,
                                   const ProtocolOptions& options,
                                   const ProtocolProgressFn& progress = nullptr);

}  // namespace spot::sim
