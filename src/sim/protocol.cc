#include "sim/protocol.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <deque>

namespace spot::sim {
namespace {

using policy::ParamSet;

// Ticks a job's deadline window spans (SampleStarts' W).
Result<int64_t> WindowTicks(double gap_seconds, double deadline_hours) {
  if (!(gap_seconds > 0)) return InvalidArgumentError("gap_seconds must be > 0");
  const double w = std::ceil(deadline_hours * 3600 / gap_seconds - 1e-9);
  if (!(w >= 0 && w < 1e15)) return InvalidArgumentError("the deadline is out of range");
  return static_cast<int64_t>(w);
}

// The runs of one policy and of the references on the same starts.
struct Paired {
  std::span<const StartRun> runs, up, od;
};

ScoreStats Stats(std::span<const Paired> strata, const JobSpec& job,
                 const BootstrapOptions& bootstrap) {
  ScoreStats s;
  std::vector<std::vector<double>> costs, ratios, savings, restarts;
  s.max_savings_vs_od = -1e300;
  for (const Paired& p : strata) {
    std::vector<double>& c = costs.emplace_back();
    std::vector<double>& r = ratios.emplace_back();
    std::vector<double>& sv = savings.emplace_back();
    std::vector<double>& rs = restarts.emplace_back();
    for (size_t i = 0; i < p.runs.size(); ++i) {
      const StartRun& run = p.runs[i];
      c.push_back(run.cost);
      r.push_back(run.cost / p.up[i].cost);
      sv.push_back(1 - run.cost / p.od[i].cost);
      s.max_savings_vs_od = std::max(s.max_savings_vs_od, sv.back());
      rs.push_back(run.changeovers * job.changeover_hours / job.compute_hours);
      s.mean_preemptions += run.preemptions;
      s.deadline_misses += !run.met_deadline;
      s.misses_up_met += p.up[i].met_deadline && !run.met_deadline;
      s.mean_od_hours += run.od_hours;
      s.mean_spot_hours += run.spot_hours;
      s.share_above_od += run.cost > p.od[i].cost * (1 + 1e-12);
      s.od_mean_cost += p.od[i].cost;
      ++s.samples;
    }
  }
  if (s.samples > 0) {
    for (double* v : {&s.mean_od_hours, &s.mean_spot_hours, &s.share_above_od, &s.od_mean_cost,
                      &s.mean_preemptions}) {
      *v /= s.samples;
    }
  } else {
    s.max_savings_vs_od = 0;
  }
  std::vector<std::span<const double>> cs(costs.begin(), costs.end()),
      rs(ratios.begin(), ratios.end());
  s.cost = Summarize(cs, bootstrap);
  s.ratio_to_up = Summarize(rs, bootstrap);
  std::vector<std::span<const double>> svs(savings.begin(), savings.end()),
      rss(restarts.begin(), restarts.end());
  s.savings_vs_od = Summarize(svs, bootstrap);
  s.restart_share = Summarize(rss, bootstrap);
  return s;
}

class ProtocolRun {
 public:
  ProtocolRun(const policy::PolicyRegistry& registry, std::span<const ProtocolMarket> markets,
              const JobSpec& job, std::span<const std::string> policies,
              const ProtocolOptions& options, const ProtocolProgressFn& progress)
      : markets_(markets),
        policies_(policies.begin(), policies.end()),
        opt_(options),
        progress_(progress),
        memo_(registry, job, options.threads, options.recorded_ondemand_price) {}

  Result<ProtocolResult> Run() {
    auto begin = std::chrono::steady_clock::now();
    SPOT_RETURN_IF_ERROR(Check());
    SPOT_RETURN_IF_ERROR(Plan());
    ProtocolResult out{.options = opt_, .job = memo_.job()};
    std::vector<FitResult> shared_fit(policies_.size());
    if (opt_.protocol == Protocol::kTimeSplit) {
      for (size_t p = 0; p < policies_.size(); ++p) {
        SPOT_ASSIGN_OR_RETURN(shared_fit[p],
                              Fit(policies_[p], train_, "on every market's first part"));
      }
    }
    for (size_t m = 0; m < markets_.size(); ++m) {
      MarketResult& r = out.markets.emplace_back();
      r.name = markets_[m].name;
      r.prices = markets_[m].prices;
      r.ticks = markets_[m].zones[0]->ticks();
      r.score_begin = score_[m].begin;
      r.score_end = score_[m].end;
      r.starts = score_[m].starts;
      for (size_t p = 0; p < policies_.size(); ++p) {
        PolicyScore& ps = r.policies.emplace_back();
        ps.policy = policies_[p];
        ps.params = memo_.registry().Grid(ps.policy)[0];
        ps.fitted =
            opt_.protocol != Protocol::kInSample && memo_.registry().Grid(ps.policy).size() > 1;
        if (ps.fitted && opt_.protocol == Protocol::kTimeSplit) ps.fit = shared_fit[p];
        if (ps.fitted && opt_.protocol == Protocol::kLeaveOneOut) {
          SPOT_ASSIGN_OR_RETURN(ps.fit, Fit(ps.policy, LeftOut(m), "without " + r.name));
        }
        if (ps.fitted) ps.params = ps.fit.params;
      }
      r.trained = Trained(m);
      SPOT_RETURN_IF_ERROR(Score(m, r));
    }
    Pool(out);
    out.simulated = memo_.simulated();
    out.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - begin).count();
    return out;
  }

 private:
  struct Part {
    int64_t begin = 0, end = 0;
    std::vector<int64_t> starts;
  };

  Status Check() const {
    if (policies_.empty()) return InvalidArgumentError("no policy to evaluate");
    if (markets_.empty()) return InvalidArgumentError("no market to evaluate");
    for (const std::string& p : policies_) {
      if (!memo_.registry().Has(p)) return memo_.registry().Validate({.name = p});
    }
    if (opt_.protocol == Protocol::kLeaveOneOut && markets_.size() < 2) {
      return InvalidArgumentError(
          "loo needs at least two markets (it fits on the others and scores the one left out)");
    }
    if (opt_.protocol == Protocol::kTimeSplit &&
        !(opt_.train_fraction > 0 && opt_.train_fraction < 1)) {
      return InvalidArgumentError("train fraction must be in (0, 1), got " +
                                  std::to_string(opt_.train_fraction));
    }
    for (const ProtocolMarket& m : markets_) {
      if (m.zones.empty()) return InvalidArgumentError("market " + m.name + " has no zone");
      Status s = ValidateMarket(m.zones, memo_.job());
      if (!s.ok()) return s.WithContext("market " + m.name);
    }
    return Status::Ok();
  }

  // The scored part of every market, and for time-split the cut traces and
  // starts of the training part.
  Status Plan() {
    const JobSpec& job = memo_.job();
    for (const ProtocolMarket& m : markets_) {
      const int64_t T = m.zones[0]->ticks();
      const double g = m.zones[0]->gap_seconds;
      Part& part = score_.emplace_back(Part{0, T, {}});
      if (opt_.protocol == Protocol::kTimeSplit) {
        const int64_t split = static_cast<int64_t>(std::floor(T * opt_.train_fraction));
        part.begin = split;
        std::vector<const market::Trace*> cut;
        for (const market::Trace* z : m.zones) cut.push_back(&Cut(*z, split));
        auto starts = SampleStartsIn(0, split, g, job.deadline_hours, opt_.sampling);
        if (!starts.ok()) return starts.status().WithContext("market " + m.name + " training part");
        train_.push_back({std::move(cut), std::move(starts).value()});
      }
      auto starts = SampleStartsIn(part.begin, part.end, g, job.deadline_hours, opt_.sampling);
      if (!starts.ok()) {
        return starts.status().WithContext(
            "market " + m.name + (opt_.protocol == Protocol::kTimeSplit ? " scoring part" : ""));
      }
      part.starts = std::move(starts).value();
    }
    return Status::Ok();
  }

  // The first `ticks` ticks of `z`, kept alive for the memo.
  const market::Trace& Cut(const market::Trace& z, int64_t ticks) {
    market::Trace& t = cut_.emplace_back(z);
    t.available.resize(static_cast<size_t>(ticks));
    if (t.has_prices()) t.price.resize(static_cast<size_t>(ticks));
    return t;
  }

  std::vector<FitSet> LeftOut(size_t m) const {
    std::vector<FitSet> train;
    for (size_t o = 0; o < markets_.size(); ++o) {
      if (o != m) train.push_back({markets_[o].zones, score_[o].starts});
    }
    return train;
  }

  std::vector<std::string> Trained(size_t m) const {
    std::vector<std::string> out;
    for (size_t o = 0; o < markets_.size(); ++o) {
      if (opt_.protocol == Protocol::kTimeSplit) out.push_back(markets_[o].name + " (first part)");
      if (opt_.protocol == Protocol::kLeaveOneOut && o != m) out.push_back(markets_[o].name);
    }
    return out;
  }

  Result<FitResult> Fit(const std::string& policy, const std::vector<FitSet>& train,
                        const std::string& what) {
    if (memo_.registry().Grid(policy).size() < 2) return FitResult{.candidates = 1};
    const std::string stage = "fit " + policy + " " + what;
    auto r = FitPolicy(memo_, policy, train, [&](int64_t done, int64_t total) {
      if (progress_) progress_(stage, done, total);
    });
    if (!r.ok()) return r.status().WithContext(stage);
    return r;
  }

  Status Score(size_t m, MarketResult& r) {
    const ProtocolMarket& market = markets_[m];
    const std::string stage = "score " + market.name;
    const int64_t n = static_cast<int64_t>(r.starts.size());
    const int64_t total = n * static_cast<int64_t>(policies_.size() + 2);
    int64_t done = 0;
    auto runs = [&](const std::string& policy, const ParamSet& params) {
      auto out = memo_.Runs(policy, params, market.zones, r.starts);
      if (progress_) progress_(stage, done += n, total);
      return out;
    };
    SPOT_ASSIGN_OR_RETURN(std::vector<StartRun> up, runs("up", {}));
    SPOT_ASSIGN_OR_RETURN(std::vector<StartRun> od, runs("od", {}));
    up_.push_back(std::move(up));
    od_.push_back(std::move(od));
    for (PolicyScore& ps : r.policies) {
      auto got = runs(ps.policy, ps.params);
      if (!got.ok()) return got.status().WithContext(stage);
      ps.runs = std::move(got).value();
      const Paired one[] = {{ps.runs, up_.back(), od_.back()}};
      ps.stats = Stats(one, memo_.job(), opt_.bootstrap);
    }
    return Status::Ok();
  }

  void Pool(ProtocolResult& out) const {
    for (size_t p = 0; p < policies_.size(); ++p) {
      std::vector<Paired> strata;
      for (size_t m = 0; m < out.markets.size(); ++m) {
        strata.push_back({out.markets[m].policies[p].runs, up_[m], od_[m]});
      }
      PolicyScore& pooled = out.pooled.emplace_back();
      pooled.policy = policies_[p];
      pooled.stats = Stats(strata, memo_.job(), opt_.bootstrap);
    }
  }

  std::span<const ProtocolMarket> markets_;
  std::vector<std::string> policies_;
  ProtocolOptions opt_;
  const ProtocolProgressFn& progress_;
  RunMemo memo_;
  std::vector<Part> score_;
  std::vector<FitSet> train_;                   // time-split: every market's first part
  std::deque<market::Trace> cut_;               // the traces of those parts
  std::vector<std::vector<StartRun>> up_, od_;  // references per market
};

}  // namespace

Result<Protocol> ParseProtocol(std::string_view name) {
  if (name == "in-sample") return Protocol::kInSample;
  if (name == "loo") return Protocol::kLeaveOneOut;
  if (name == "time-split") return Protocol::kTimeSplit;
  return InvalidArgumentError("unknown protocol '" + std::string(name) +
                              "' (known: in-sample, loo, time-split)");
}

std::string_view ProtocolName(Protocol p) {
  switch (p) {
    case Protocol::kInSample:
      return "in-sample";
    case Protocol::kLeaveOneOut:
      return "loo";
    case Protocol::kTimeSplit:
      return "time-split";
  }
  return "?";
}

Result<std::vector<int64_t>> SampleStartsIn(int64_t begin, int64_t end, double gap_seconds,
                                            double deadline_hours, const StartSampling& s) {
  SPOT_ASSIGN_OR_RETURN(int64_t w, WindowTicks(gap_seconds, deadline_hours));
  if (s.every < 0) return InvalidArgumentError("start every must be >= 1 tick");
  if (s.every == 0 && s.samples < 1) return InvalidArgumentError("samples must be >= 1");
  if (begin < 0 || end - begin < w) {
    return InvalidArgumentError("the window of " + std::to_string(end - begin) +
                                " ticks is shorter than the deadline (" + std::to_string(w) +
                                " ticks)");
  }
  std::vector<int64_t> starts;
  const int64_t room = end - begin - w;  // the last start is begin + room
  if (s.every > 0) {
    for (int64_t t = begin; t <= begin + room; t += s.every) starts.push_back(t);
    return starts;
  }
  for (int64_t i = 0; i < s.samples; ++i) starts.push_back(begin + i * room / s.samples);
  return starts;
}

Result<ProtocolResult> RunProtocol(const policy::PolicyRegistry& registry,
                                   std::span<const ProtocolMarket> markets, const JobSpec& job,
                                   std::span<const std::string> policies,
                                   const ProtocolOptions& options,
                                   const ProtocolProgressFn& progress) {
  return ProtocolRun(registry, markets, job, policies, options, progress).Run();
}

}  // namespace spot::sim
