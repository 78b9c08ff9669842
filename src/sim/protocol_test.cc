// The evaluation protocols and the fit: what they may see, what they choose.
#include "sim/protocol.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>

#include "policy/test_traces.h"
#include "sim/evaluate.h"
#include "sim/svg_protocol.h"

namespace spot::sim {
namespace {

using policy::InstanceKind;
using policy::ParamSet;
using policy::Placement;
using policy::testing::MakeTrace;

// A policy with one tunable knob: mode 0 on-demand throughout, 1 spot when
// available (else idle), 2 idle for the job's first 3 ticks, then as 1 (on
// cheap spot: cheaper than on-demand, and late for a 4-hour deadline).
struct KnobOptions {
  int64_t mode = 0;
};
void DeclareFields(KnobOptions& o, FieldVisitor& v) {
  v.Int("mode", &o.mode, {.min = 0, .max = 2},
        "0 od, 1 spot when available, 2 the same after 3 idle ticks");
}
class KnobPolicy final : public policy::Policy {
 public:
  explicit KnobPolicy(KnobOptions o) : o_(o) {}
  std::string_view name() const override { return "knob"; }
  policy::Decision Decide(const policy::Observation& obs) override {
    if (o_.mode == 0) return obs.Gang(Placement::OnDemand());
    if (o_.mode == 2 && obs.tick < 3) return obs.Gang(Placement::Idle());
    if (obs.market.AvailableNow(0)) return obs.Gang(Placement::Spot(0));
    return obs.Gang(Placement::Idle());
  }

 private:
  KnobOptions o_;
};

policy::PolicyRegistry Registry(std::vector<std::string> modes) {
  policy::PolicyRegistry r;
  policy::RegisterBuiltinPolicies(r);
  Status s = r.RegisterWithOptions<KnobOptions>(
      "knob", "test", [](const KnobOptions& o) { return std::make_unique<KnobPolicy>(o); });
  EXPECT_TRUE(s.ok()) << s.ToString();
  s = r.SetTunables("knob", {{"mode", std::move(modes)}});
  EXPECT_TRUE(s.ok()) << s.ToString();
  return r;
}

// Spot always available at `price` $/h; 1-hour ticks.
market::Trace Flat(const char* name, int64_t ticks, double price) {
  return MakeTrace(3600, std::vector<int32_t>(ticks, 1), std::vector<double>(ticks, price), name);
}

const JobSpec kJob{
    .compute_hours = 2, .deadline_hours = 4, .changeover_hours = 0.5, .ondemand_price = 3};

TEST(SampleStartsIn, WindowsAndSpacing) {
  // [0, T) with S starts: SampleStarts' starts.
  auto a = SampleStartsIn(0, 100, 3600, 10, {.samples = 7});
  auto b = SampleStarts(100, 3600, 10, 7);
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_EQ(*a, *b);
  auto every = SampleStartsIn(50, 100, 3600, 10, {.every = 15});
  ASSERT_TRUE(every.ok());
  EXPECT_EQ(*every, (std::vector<int64_t>{50, 65, 80}));  // 95 + 10 > 100
  auto later = SampleStartsIn(50, 100, 1800, 10, {.samples = 4});
  ASSERT_TRUE(later.ok());
  for (int64_t s : *later) {
    EXPECT_GE(s, 50);
    EXPECT_LE(s + 20, 100);
  }
  EXPECT_FALSE(SampleStartsIn(0, 9, 3600, 10, {}).ok());
  EXPECT_FALSE(SampleStartsIn(0, 100, 3600, 10, {.samples = 0}).ok());
  EXPECT_FALSE(SampleStartsIn(0, 100, 3600, 10, {.every = -1}).ok());
}

// The fit never picks a grid point that misses a deadline `up` meets, even
// when it is cheaper; a policy without tunables runs nothing.
TEST(Fit, RefusesParametersThatMissDeadlinesUpMeets) {
  policy::PolicyRegistry r = Registry({"2", "0"});
  market::Trace t = Flat("a", 12, 0.5);
  RunMemo memo(r, kJob);
  const FitSet train[] = {{{&t}, {0, 2, 4}}};
  auto idle = memo.Runs("knob", {{"mode", "2"}}, train[0].zones, train[0].starts);
  auto od = memo.Runs("knob", {{"mode", "0"}}, train[0].zones, train[0].starts);
  ASSERT_TRUE(idle.ok() && od.ok());
  ASSERT_FALSE((*idle)[0].met_deadline);
  ASSERT_LT((*idle)[0].cost, (*od)[0].cost);  // the missing one is cheaper
  auto fit = FitPolicy(memo, "knob", train);
  ASSERT_TRUE(fit.ok()) << fit.status().ToString();
  EXPECT_EQ(fit->params, (ParamSet{{"mode", "0"}}));
  EXPECT_EQ(fit->candidates, 2);
  EXPECT_EQ(fit->rejected, 1);
  EXPECT_TRUE(fit->constraint_met);
  EXPECT_DOUBLE_EQ(fit->train_mean_cost, (*od)[0].cost);
  const int64_t before = memo.simulated();
  auto up = FitPolicy(memo, "up", train);
  ASSERT_TRUE(up.ok());
  EXPECT_TRUE(up->params.empty());
  EXPECT_EQ(memo.simulated(), before);
  // Equal costs: the earlier grid point (defaults first).
  policy::PolicyRegistry same = Registry({"1", "1"});
  RunMemo memo2(same, kJob);
  auto tie = FitPolicy(memo2, "knob", train);
  ASSERT_TRUE(tie.ok());
  EXPECT_EQ(tie->params, (ParamSet{{"mode", "1"}}));
}

// The one-standard-error rule: spot's price alternates between deadline-long
// blocks, 0.5 and `dear` $/h (on-demand 3). Spot (mode 1) saves $6.25 a job in
// a cheap block and loses 2.5 dear - 7.5 in a dear one. With dear = 5.4 it is
// cheaper on average by $0.125 a job, far inside its standard error ($2.04): the
// defaults (on-demand) stay. With dear = 2 it saves $4.375 a job, give or
// take $0.63: spot is chosen.
TEST(Fit, KeepsTheDefaultsUnlessTheSavingExceedsItsStandardError) {
  for (double dear : {5.4, 2.0}) {
    SCOPED_TRACE(dear);
    policy::PolicyRegistry r = Registry({"0", "1"});
    std::vector<double> price(40);
    for (size_t i = 0; i < price.size(); ++i) price[i] = (i / 4) % 2 == 0 ? 0.5 : dear;
    market::Trace t = MakeTrace(3600, std::vector<int32_t>(40, 1), price, "alternating");
    std::vector<int64_t> starts;
    for (int64_t s = 0; s + 4 <= 40; s += 4) starts.push_back(s);  // one per block
    const FitSet train[] = {{{&t}, starts}};
    RunMemo memo(r, kJob);
    auto fit = FitPolicy(memo, "knob", train);
    ASSERT_TRUE(fit.ok()) << fit.status().ToString();
    const double saving = (6.25 + (7.5 - 2.5 * dear)) / 2;
    EXPECT_NEAR(fit->saving_vs_defaults, saving, 1e-9);
    // Ten clusters, five of each kind: sqrt(10/9 * 10 * d^2) / 10, d = 6.25 - saving.
    const double se = std::sqrt(10.0 / 9 * 10 * (6.25 - saving) * (6.25 - saving)) / 10;
    EXPECT_NEAR(fit->saving_se, se, 1e-9);
    if (dear > 3) {
      EXPECT_TRUE(fit->kept_defaults);
      EXPECT_EQ(fit->params, (ParamSet{{"mode", "0"}}));
      EXPECT_DOUBLE_EQ(fit->train_mean_cost, 7.5);
    } else {
      EXPECT_FALSE(fit->kept_defaults);
      EXPECT_EQ(fit->params, (ParamSet{{"mode", "1"}}));
    }
  }
  // One cluster (every start within one deadline): the error is unknown and
  // the defaults stay, however large the saving.
  policy::PolicyRegistry r = Registry({"0", "1"});
  market::Trace cheap = Flat("cheap", 12, 0.5);
  const FitSet one_block[] = {{{&cheap}, {0, 1, 2}}};
  RunMemo memo(r, kJob);
  auto fit = FitPolicy(memo, "knob", one_block);
  ASSERT_TRUE(fit.ok());
  EXPECT_TRUE(fit->kept_defaults);
  EXPECT_NEAR(fit->saving_vs_defaults, 7.5 - 1.25, 1e-9);
  EXPECT_TRUE(std::isinf(fit->saving_se));
}

// Leave-one-out: zones a and b have cheap spot, c spot dearer than on-demand.
// Fitted on all three, the knob's best mode is on-demand (c dominates the
// mean); fitted without c (c left out) it is spot. So c's parameters show
// whether its own runs took part in its fit.
TEST(Protocol, LeaveOneOutNeverFitsOnTheScoredZone) {
  policy::PolicyRegistry r = Registry({"0", "1"});
  market::Trace a = Flat("a", 12, 0.5), b = Flat("b", 12, 0.5), c = Flat("c", 12, 50);
  const ProtocolMarket markets[] = {{"a", {&a}, "test"}, {"b", {&b}, "test"}, {"c", {&c}, "test"}};
  RunMemo memo(r, kJob);
  std::vector<FitSet> all;
  for (const auto& m : markets)
    all.push_back({m.zones, *SampleStartsIn(0, 12, 3600, 4, {.samples = 5})});
  auto in_sample = FitPolicy(memo, "knob", all);
  ASSERT_TRUE(in_sample.ok());
  ASSERT_EQ(in_sample->params, (ParamSet{{"mode", "0"}}));  // the test can tell

  const std::string policies[] = {"knob", "up"};
  auto res = RunProtocol(r, markets, kJob, policies,
                         {.protocol = Protocol::kLeaveOneOut, .sampling = {.samples = 5}});
  ASSERT_TRUE(res.ok()) << res.status().ToString();
  ASSERT_EQ(res->markets.size(), 3u);
  const PolicyScore& on_c = res->markets[2].policies[0];
  EXPECT_TRUE(on_c.fitted);
  EXPECT_EQ(on_c.params, (ParamSet{{"mode", "1"}}));
  EXPECT_EQ(res->markets[2].trained, (std::vector<std::string>{"a", "b"}));
  // a's fit saw b and c: c's dear spot makes on-demand the better mode.
  EXPECT_EQ(res->markets[0].policies[0].params, (ParamSet{{"mode", "0"}}));
  // Scored on c with spot: it pays c's price, 50 / 3 times on-demand's.
  EXPECT_NEAR(on_c.stats.cost.mean, 50 * 2.5, 1e-9);
  EXPECT_DOUBLE_EQ(on_c.stats.share_above_od, 1);
  EXPECT_FALSE(res->markets[0].policies[1].fitted);  // up has nothing to fit
  // Too few markets: refused.
  auto one =
      RunProtocol(r, std::span(markets, 1), kJob, policies, {.protocol = Protocol::kLeaveOneOut});
  EXPECT_EQ(one.status().code(), StatusCode::kInvalidArgument);
}

// Time-split: spot is cheap in the first half of the trace and dear in the
// second. The fit (on the first half) picks spot; had it seen the second
// half it would pick on-demand. Scored starts lie wholly in the second half.
TEST(Protocol, TimeSplitFitsOnTheFirstPartAndScoresWhollyInTheRest) {
  policy::PolicyRegistry r = Registry({"0", "1"});
  std::vector<double> price(40, 0.5);
  for (size_t i = 20; i < price.size(); ++i) price[i] = 50;
  market::Trace t = MakeTrace(3600, std::vector<int32_t>(40, 1), price, "z");
  const ProtocolMarket markets[] = {{"z", {&t}, "test"}};
  const std::string policies[] = {"knob"};
  for (StartSampling sampling : {StartSampling{.samples = 6}, StartSampling{.every = 3}}) {
    auto res = RunProtocol(r, markets, kJob, policies,
                           {.protocol = Protocol::kTimeSplit, .sampling = sampling});
    ASSERT_TRUE(res.ok()) << res.status().ToString();
    const MarketResult& m = res->markets[0];
    EXPECT_EQ(m.score_begin, 20);
    ASSERT_FALSE(m.starts.empty());
    for (int64_t s : m.starts) {
      EXPECT_GE(s, 20);
      EXPECT_LE(s + 4, 40);  // the whole deadline window
    }
    EXPECT_EQ(m.policies[0].params, (ParamSet{{"mode", "1"}}));
    EXPECT_NEAR(m.policies[0].fit.train_mean_cost, 0.5 * 2.5, 1e-9);
  }
  auto bad = RunProtocol(r, markets, kJob, policies,
                         {.protocol = Protocol::kTimeSplit, .train_fraction = 1});
  EXPECT_EQ(bad.status().code(), StatusCode::kInvalidArgument);
  auto short_part = RunProtocol(r, markets, kJob, policies,
                                {.protocol = Protocol::kTimeSplit, .train_fraction = 0.05});
  ASSERT_FALSE(short_part.ok());
  EXPECT_NE(short_part.status().message().find("training part"), std::string::npos)
      << short_part.status().message();
}

// Random two-state markets for the statistics checks.
std::vector<market::Trace> RandomZones(int n, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<market::Trace> zones;
  for (int i = 0; i < n; ++i) {
    zones.push_back(policy::testing::RandomTrace(rng, 600, 2000, 30, 12, true));
    zones.back().name = "zone" + std::to_string(i);
  }
  return zones;
}

// The ratio to up is paired start by start; up's own ratio is exactly 1; the
// pooled statistics are over every market's starts; and a second run gives
// the same numbers bit for bit.
TEST(Protocol, PairedRatioPooledAndDeterministic) {
  policy::PolicyRegistry r;
  policy::RegisterBuiltinPolicies(r);
  std::vector<market::Trace> zones = RandomZones(3, 5);
  std::vector<ProtocolMarket> markets;
  for (const auto& z : zones) markets.push_back({z.name, {&z}, "random"});
  const std::string policies[] = {"up", "greedy", "hazard-up"};
  JobSpec job{
      .compute_hours = 24, .deadline_hours = 30, .changeover_hours = 0.2, .ondemand_price = 3};
  ProtocolOptions opt{.protocol = Protocol::kLeaveOneOut, .sampling = {.samples = 12}};
  auto res = RunProtocol(r, markets, job, policies, opt);
  ASSERT_TRUE(res.ok()) << res.status().ToString();
  double pooled_ratio = 0;
  int n = 0;
  for (const MarketResult& m : res->markets) {
    const PolicyScore& up = m.policies[0];
    EXPECT_EQ(up.stats.ratio_to_up.mean, 1);
    EXPECT_EQ(up.stats.ratio_to_up.ci.lo, 1);
    EXPECT_EQ(up.stats.ratio_to_up.ci.hi, 1);
    const PolicyScore& g = m.policies[1];
    double ratio = 0, above = 0, saved = 0, best = -1e9, restart = 0, preempted = 0;
    for (size_t i = 0; i < m.starts.size(); ++i) {
      EXPECT_EQ(g.runs[i].start, m.starts[i]);
      saved += 1 - g.runs[i].cost / (3 * 24.2);
      best = std::max(best, 1 - g.runs[i].cost / (3 * 24.2));
      restart += g.runs[i].changeovers * 0.2 / 24;
      preempted += g.runs[i].preemptions;
      EXPECT_GE(g.runs[i].changeovers, 1);  // every run starts an instance
      ratio += g.runs[i].cost / up.runs[i].cost;
      above += g.runs[i].cost > 3 * (24 + 0.2) + 1e-9;
      pooled_ratio += g.runs[i].cost / up.runs[i].cost;
      ++n;
    }
    EXPECT_NEAR(g.stats.ratio_to_up.mean, ratio / m.starts.size(), 1e-12);
    EXPECT_NEAR(g.stats.share_above_od, above / m.starts.size(), 1e-12);
    EXPECT_NEAR(g.stats.od_mean_cost, 3 * 24.2, 1e-9);
    EXPECT_NEAR(g.stats.savings_vs_od.mean, saved / m.starts.size(), 1e-12);
    EXPECT_NEAR(g.stats.max_savings_vs_od, best, 1e-12);
    EXPECT_NEAR(g.stats.restart_share.mean, restart / m.starts.size(), 1e-12);
    EXPECT_NEAR(g.stats.mean_preemptions, preempted / m.starts.size(), 1e-12);
    EXPECT_LE(up.stats.savings_vs_od.mean, up.stats.max_savings_vs_od);
    EXPECT_LE(g.stats.ratio_to_up.ci.lo, g.stats.ratio_to_up.mean);
    EXPECT_GE(g.stats.ratio_to_up.ci.hi, g.stats.ratio_to_up.mean);
  }
  ASSERT_EQ(res->pooled.size(), 3u);
  EXPECT_EQ(res->pooled[1].stats.samples, 36);
  EXPECT_NEAR(res->pooled[1].stats.ratio_to_up.mean, pooled_ratio / n, 1e-12);

  auto again = RunProtocol(r, markets, job, policies, opt);
  ASSERT_TRUE(again.ok());
  for (size_t m = 0; m < res->markets.size(); ++m) {
    for (size_t p = 0; p < 3; ++p) {
      const ScoreStats &x = res->markets[m].policies[p].stats,
                       &y = again->markets[m].policies[p].stats;
      EXPECT_EQ(x.cost.mean, y.cost.mean);
      EXPECT_EQ(x.cost.ci.lo, y.cost.ci.lo);
      EXPECT_EQ(x.cost.ci.hi, y.cost.ci.hi);
      EXPECT_EQ(x.ratio_to_up.ci.lo, y.ratio_to_up.ci.lo);
      EXPECT_EQ(res->markets[m].policies[p].params, again->markets[m].policies[p].params);
    }
  }
  EXPECT_EQ(res->pooled[2].stats.cost.ci.hi, again->pooled[2].stats.cost.ci.hi);
  // The picture has a row per market and policy, and the pooled ones.
  std::string svg = RenderProtocolSvg(*res, "loo <test>");
  EXPECT_EQ(svg.rfind("<svg", 0), 0u);
  EXPECT_NE(svg.find("loo &lt;test&gt;"), std::string::npos);
  EXPECT_NE(svg.find("pooled  hazard-up"), std::string::npos);
  size_t circles = 0;
  for (size_t at = 0; (at = svg.find("<circle", at)) != std::string::npos; ++at) ++circles;
  EXPECT_EQ(circles, 3u * 3u + 3u);
}

// `spot sim eval` without a protocol: every policy, one zone and several as
// one market, on one thread and on three.
TEST(Evaluate, TheFiguresDoNotDependOnTheThreads) {
  policy::PolicyRegistry r;
  policy::RegisterBuiltinPolicies(r);
  std::vector<market::Trace> zones = RandomZones(3, 23);
  JobSpec job{
      .compute_hours = 24, .deadline_hours = 30, .changeover_hours = 0.2, .ondemand_price = 3};
  const market::Trace* one_zone[] = {&zones[0]};
  const market::Trace* all[] = {&zones[0], &zones[1], &zones[2]};
  for (const std::string name : {"up", "mdp", "omniscient", "mdp-zones"}) {
    for (std::span<const market::Trace* const> m : {std::span<const market::Trace* const>(one_zone),
                                                    std::span<const market::Trace* const>(all)}) {
      int calls = 0, last = 0;
      auto a = EvaluatePolicy(r, name, m, job, 7, nullptr, 1);
      auto b = EvaluatePolicy(
          r, name, m, job, 7, [&](int done, int) { ++calls, last = done; }, 3);
      ASSERT_TRUE(a.ok() && b.ok()) << name;
      EXPECT_EQ(calls, 7);
      EXPECT_EQ(last, 7);
      ASSERT_EQ(a->runs.size(), 7u);
      ASSERT_EQ(b->runs.size(), 7u);
      for (size_t i = 0; i < a->runs.size(); ++i) {
        EXPECT_EQ(a->runs[i].cost, b->runs[i].cost) << name << " run " << i;
        EXPECT_EQ(a->runs[i].changeovers, b->runs[i].changeovers) << name;
        EXPECT_EQ(a->runs[i].met_deadline, b->runs[i].met_deadline) << name;
      }
      EXPECT_EQ(a->mean_cost, b->mean_cost) << name;
      EXPECT_EQ(a->p95_cost, b->p95_cost) << name;
      EXPECT_EQ(a->deadline_misses, b->deadline_misses) << name;
    }
  }
}

// Starts simulated on several threads (each with its own policy instances)
// give the runs, the fitted parameters and the intervals of one thread, for
// the policies that carry state between ticks (mdp's chains and solutions,
// the forecasts), on single zones and on a market of three.
TEST(Protocol, TheFiguresDoNotDependOnTheThreads) {
  policy::PolicyRegistry r;
  policy::RegisterBuiltinPolicies(r);
  std::vector<market::Trace> zones = RandomZones(3, 17);
  std::vector<ProtocolMarket> markets;
  for (const auto& z : zones) markets.push_back({z.name, {&z}, "random"});
  const std::string policies[] = {"up", "hazard-up", "forecast-up", "mdp"};
  JobSpec job{
      .compute_hours = 24, .deadline_hours = 30, .changeover_hours = 0.2, .ondemand_price = 3};
  std::vector<ProtocolMarket> together = {{"all", {&zones[0], &zones[1], &zones[2]}, "random"}};
  const std::string mz[] = {"up", "mdp-zones"};
  for (int multi = 0; multi < 2; ++multi) {
    std::span<const ProtocolMarket> m = multi ? std::span<const ProtocolMarket>(together)
                                              : std::span<const ProtocolMarket>(markets);
    std::span<const std::string> p =
        multi ? std::span<const std::string>(mz) : std::span<const std::string>(policies);
    ProtocolOptions opt{.protocol = multi ? Protocol::kTimeSplit : Protocol::kLeaveOneOut,
                        .sampling = {.samples = 10}};
    opt.threads = 1;
    auto one = RunProtocol(r, m, job, p, opt);
    opt.threads = 3;
    auto three = RunProtocol(r, m, job, p, opt);
    ASSERT_TRUE(one.ok() && three.ok());
    EXPECT_EQ(one->simulated, three->simulated);
    ASSERT_EQ(one->markets.size(), three->markets.size());
    for (size_t k = 0; k < one->markets.size(); ++k) {
      for (size_t j = 0; j < p.size(); ++j) {
        const PolicyScore &a = one->markets[k].policies[j], &b = three->markets[k].policies[j];
        EXPECT_EQ(a.params, b.params) << p[j];
        ASSERT_EQ(a.runs.size(), b.runs.size());
        for (size_t i = 0; i < a.runs.size(); ++i) {
          EXPECT_EQ(a.runs[i].cost, b.runs[i].cost) << p[j] << " start " << a.runs[i].start;
          EXPECT_EQ(a.runs[i].changeovers, b.runs[i].changeovers);
          EXPECT_EQ(a.runs[i].met_deadline, b.runs[i].met_deadline);
        }
        EXPECT_EQ(a.stats.ratio_to_up.ci.lo, b.stats.ratio_to_up.ci.lo) << p[j];
        EXPECT_EQ(a.stats.ratio_to_up.ci.hi, b.stats.ratio_to_up.ci.hi) << p[j];
      }
    }
  }
}

TEST(Protocol, BadInputIsRefused) {
  policy::PolicyRegistry r;
  policy::RegisterBuiltinPolicies(r);
  market::Trace a = Flat("a", 12, 0.5), b = Flat("b", 12, 0.5);
  const ProtocolMarket markets[] = {{"a", {&a}, ""}, {"b", {&b}, ""}};
  const std::string unknown[] = {"nope"};
  EXPECT_EQ(RunProtocol(r, markets, kJob, unknown, {}).status().code(), StatusCode::kNotFound);
  EXPECT_EQ(RunProtocol(r, markets, kJob, std::span<const std::string>(), {}).status().code(),
            StatusCode::kInvalidArgument);
  const std::string up[] = {"up"};
  JobSpec long_job = kJob;
  long_job.deadline_hours = 13;
  auto too_long = RunProtocol(r, markets, long_job, up, {});
  ASSERT_FALSE(too_long.ok());
  EXPECT_NE(too_long.status().message().find("market a"), std::string::npos)
      << too_long.status().message();
  EXPECT_TRUE(ParseProtocol("loo").ok());
  EXPECT_EQ(ParseProtocol("cv").status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(ProtocolName(*ParseProtocol("time-split")), "time-split");
}

}  // namespace
}  // namespace spot::sim
