#include "policy/omniscient.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>

namespace spot::policy {
namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();
constexpr double kEps = 1e-9;

// The grid: K units per tick, so that the changeover's partial tick lands on it.
int UnitsPerTick(double gap_s, double d_s, int cap) {
  double J = std::ceil(d_s / gap_s - kEps);
  double f = J * gap_s - d_s;  // seconds of work in the last changeover tick
  bool whole = std::abs(gap_s - std::round(gap_s)) < 1e-6 && std::abs(f - std::round(f)) < 1e-6;
  if (!whole) return cap;
  int64_t g = std::llround(gap_s), fr = std::llround(f);
  int64_t q = fr == 0 ? g : std::gcd(g, fr);
  return static_cast<int>(std::min<int64_t>(g / q, cap));
}

class DpSolver {
 public:
  DpSolver(const FutureView& f, const JobSpec& job, int K)
      : f_(f), job_(job), Z_(static_cast<int>(f.zones.size())), K_(K) {
    h_ = f.zones[0]->gap_seconds / 3600.0;
    q_ = h_ / K_;
    J_ = job.changeover_hours <= 0 ? 0
                                   : static_cast<int>(std::ceil(job.changeover_hours / h_ - kEps));
    M_ = 1 + (Z_ + 1) * (J_ + 1);
    S_ = static_cast<int>(std::floor((job.deadline_hours - job.compute_hours) / q_ + kEps));
    T_ = static_cast<int64_t>(std::ceil(job.deadline_hours / h_ - kEps));
    T_ = std::min<int64_t>(T_, f.zones[0]->ticks() - f.start_tick);
    for (int j = 0; j <= J_; ++j) {
      double c = std::min(std::max(0.0, job.changeover_hours - j * h_), h_);
      cin_.push_back(c);
      work_.push_back(h_ - c);
      lost_.push_back(K_ - static_cast<int>(std::ceil((h_ - c) / q_ - kEps)));
    }
  }

  int modes() const { return M_; }
  int64_t TableBytes() const { return std::max<int64_t>(T_, 0) * M_ * (S_ + 1); }
  OmniscientPlan Solve();

 private:
  // Mode layout: 0 idle; then group g = 1..Z (spot zone g-1), Z+1 (on-demand),
  // each with phases 0..J.
  int Group(int m) const { return m == 0 ? 0 : 1 + (m - 1) / (J_ + 1); }
  int Phase(int m) const { return m == 0 ? 0 : (m - 1) % (J_ + 1); }
  int Mode(int g, int j) const { return 1 + (g - 1) * (J_ + 1) + j; }
  bool SpotUp(int g, int64_t t) const {
    return f_.zones[g - 1]->available[f_.start_tick + t] >= job_.nodes;
  }
  double Price(int g, int64_t t) const {
    double p = g == Z_ + 1                     ? job_.ondemand_price
               : f_.zones[g - 1]->has_prices() ? f_.zones[g - 1]->price[f_.start_tick + t]
                                               : 1.0;
    return p * job_.nodes;
  }
  Placement PlacementOf(int g) const {
    if (g == 0) return Placement::Idle();
    return g == Z_ + 1 ? Placement::OnDemand() : Placement::Spot(g - 1);
  }
  // The group a mode is in after the preemptions of tick t.
  int EffGroup(int m, int64_t t) const {
    int g = Group(m);
    return (g >= 1 && g <= Z_ && !SpotUp(g, t)) ? 0 : g;
  }
  void Step(int64_t t);
  void Run(int64_t t, int g, int j, int d, double v, int src);
  void Relax(int64_t t, int m, int d, double v, int src);
  std::vector<Placement> Backtrack() const;

  const FutureView& f_;
  JobSpec job_;
  int Z_, K_, J_ = 0, M_ = 0, S_ = 0;
  int64_t T_ = 0;
  double h_ = 0, q_ = 0;
  std::vector<double> cin_, work_;
  std::vector<int> lost_;
  std::vector<double> cur_, next_;
  std::vector<uint8_t> back_;  // [t + 1][m][deficit]: the mode at tick t it came from
  double best_ = kInf;
  int64_t best_t_ = -1;
  int best_g_ = 0, best_src_ = 0, best_d_ = 0;
};

void DpSolver::Relax(int64_t t, int m, int d, double v, int src) {
  size_t i = static_cast<size_t>(m) * (S_ + 1) + d;
  if (v < next_[i]) {
    next_[i] = v;
    back_[static_cast<size_t>(t) * M_ * (S_ + 1) + i] = static_cast<uint8_t>(src);
  }
}

// Runs instance group g in phase j during tick t from deficit d at cost v.
void DpSolver::Run(int64_t t, int g, int j, int d, double v, int src) {
  double p = static_cast<double>(t * K_ - d) * q_;
  double price = Price(g, t);
  if (p + work_[j] >= job_.compute_hours - kEps) {
    double left = std::max(0.0, job_.compute_hours - p);
    double finish = t * h_ + cin_[j] + left;
    double total = v + price * (cin_[j] + left);
    if (finish <= job_.deadline_hours + kEps && total < best_) {
      best_ = total, best_t_ = t, best_g_ = g, best_src_ = src, best_d_ = d;
    }
    return;
  }
  int nd = d + lost_[j];
  if (nd <= S_) Relax(t, Mode(g, std::min(j + 1, J_)), nd, v + price * h_, src);
}

void DpSolver::Step(int64_t t) {
  std::fill(next_.begin(), next_.end(), kInf);
  std::vector<int> eff(M_);
  for (int m = 0; m < M_; ++m) eff[m] = EffGroup(m, t);
  for (int d = 0; d <= S_; ++d) {
    double b1 = kInf, b2 = kInf;
    int m1 = -1, m2 = -1, g1 = -1;
    for (int m = 0; m < M_; ++m) {
      double v = cur_[static_cast<size_t>(m) * (S_ + 1) + d];
      if (v == kInf) continue;
      int g = eff[m];
      if (g != 0) Run(t, g, Phase(m), d, v, m);  // stay on the instance
      if (v < b1) {
        if (g != g1) b2 = b1, m2 = m1;
        b1 = v, m1 = m, g1 = g;
      } else if (g != g1 && v < b2) {
        b2 = v, m2 = m;
      }
    }
    if (m1 < 0) continue;
    if (d + K_ <= S_) Relax(t, 0, d + K_, b1, m1);  // idle
    for (int g = 1; g <= Z_ + 1; ++g) {             // enter another instance
      if (g <= Z_ && !SpotUp(g, t)) continue;
      bool other = g1 != g;
      if (other || m2 >= 0) Run(t, g, 0, d, other ? b1 : b2, other ? m1 : m2);
    }
  }
  cur_.swap(next_);
}

OmniscientPlan DpSolver::Solve() {
  OmniscientPlan plan;
  plan.units_per_tick = K_;
  if (S_ < 0 || T_ <= 0) return plan;
  size_t layer = static_cast<size_t>(M_) * (S_ + 1);
  cur_.assign(layer, kInf);
  next_.assign(layer, kInf);
  back_.assign(static_cast<size_t>(T_) * layer, 0);
  cur_[0] = 0;  // idle, no deficit
  for (int64_t t = 0; t < T_; ++t) Step(t);
  if (best_ == kInf) return plan;
  plan.feasible = true;
  plan.cost = best_;
  plan.placements = Backtrack();
  return plan;
}

std::vector<Placement> DpSolver::Backtrack() const {
  if (best_t_ < 0) return {};
  std::vector<Placement> out(static_cast<size_t>(best_t_) + 1);
  out[best_t_] = PlacementOf(best_g_);
  int m = best_src_, d = best_d_;
  for (int64_t t = best_t_; t > 0; --t) {
    // (m, d) is the state at the start of tick t; find where it came from.
    size_t i = static_cast<size_t>(m) * (S_ + 1) + d;
    int src = back_[static_cast<size_t>(t - 1) * M_ * (S_ + 1) + i];
    int g = Group(m), sg = EffGroup(src, t - 1);
    out[t - 1] = PlacementOf(g);
    if (g == 0) {
      d -= K_;
    } else {
      d -= lost_[sg == g ? Phase(src) : 0];
    }
    m = src;
  }
  return out;
}

class OmniscientPolicy final : public Policy {
 public:
  explicit OmniscientPolicy(OmniscientOptions o) : options_(o) {}
  std::string_view name() const override { return "omniscient"; }
  bool needs_future() const override { return true; }
  void Prepare(const FutureView& future) override { future_ = future; }
  void Start(const JobStart& start) override {
    future_.start_tick = start.start_tick;
    auto plan = SolveOmniscient(future_, start.job, options_);
    plan_ = plan.ok() ? std::move(plan).value() : OmniscientPlan{};
  }
  Decision Decide(const Observation& obs) override {
    if (!plan_.feasible || obs.tick >= static_cast<int64_t>(plan_.placements.size())) {
      return obs.Gang(Placement::OnDemand());  // no schedule meets the deadline: finish soonest
    }
    return obs.Gang(plan_.placements[obs.tick]);
  }

 private:
  OmniscientOptions options_;
  FutureView future_;
  OmniscientPlan plan_;
};

}  // namespace

Result<OmniscientPlan> SolveOmniscient(const FutureView& future, const JobSpec& job,
                                       const OmniscientOptions& options) {
  if (future.zones.empty()) return InvalidArgumentError("omniscient: no zones");
  double gap_s = future.zones[0]->gap_seconds;
  int K = UnitsPerTick(gap_s, job.changeover_hours * 3600, options.max_units_per_tick);
  bool exact = K == UnitsPerTick(gap_s, job.changeover_hours * 3600, 1 << 30);
  for (;;) {
    DpSolver solver(future, job, K);
    if (solver.modes() > 255) {
      return InvalidArgumentError("omniscient: changeover spans too many ticks for the DP");
    }
    if (solver.TableBytes() > options.max_table_bytes && K > 1) {
      K = std::max(1, K / 2);
      exact = false;
      continue;
    }
    OmniscientPlan plan = solver.Solve();
    plan.exact = exact;
    return plan;
  }
}

void DeclareFields(OmniscientOptions& o, FieldVisitor& v) {
  int64_t k = o.max_units_per_tick;
  v.Int("max_units_per_tick", &k, {.min = 1, .max = 4096},
        "progress grid per tick (K); a coarser grid stays a lower bound");
  o.max_units_per_tick = static_cast<int>(k);
  v.Int("max_table_bytes", &o.max_table_bytes, {.min = 1 << 20},
        "memory of the back-pointer table; K shrinks to fit");
}

std::unique_ptr<Policy> MakeOmniscientPolicy(OmniscientOptions options) {
  return std::make_unique<OmniscientPolicy>(options);
}

}  // namespace spot::policy
