#include "policy/omniscient.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <string>
#include <vector>

#include "fleet/migration.h"

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

// States are idle and each instance group past its changeover; an entry
// lands J ticks later, or finishes the job in its last changeover tick
// (omniscient.h says why the changeover's ticks need no states). When moves
// between regions cost money, idle and on-demand states also carry the zone
// the job's state is in (a slot: none yet, or zone z), as the simulator does.
class DpSolver {
 public:
  // `moves`: zones x zones, $ of a move (row: from), by the cheapest path.
  DpSolver(const FutureView& f, const JobSpec& job, int K, const std::vector<double>& moves)
      : f_(f), job_(job), Z_(static_cast<int>(f.zones.size())), K_(K), move_(moves) {
    h_ = f.zones[0]->gap_seconds / 3600.0;
    q_ = h_ / K_;
    J_ = job.changeover_hours <= 0 ? 0
                                   : static_cast<int>(std::ceil(job.changeover_hours / h_ - kEps));
    const bool paid = std::any_of(move_.begin(), move_.end(), [](double x) { return x > 0; });
    R_ = paid ? Z_ + 1 : 1;
    M_ = 2 * R_ + Z_;
    S_ = static_cast<int>(std::floor((job.deadline_hours - job.compute_hours) / q_ + kEps));
    T_ = static_cast<int64_t>(std::ceil(job.deadline_hours / h_ - kEps));
    T_ = std::min<int64_t>(T_, f.zones[0]->ticks() - f.start_tick);
    for (int j = 0; j <= J_; ++j) {
      double c = std::min(std::max(0.0, job.changeover_hours - j * h_), h_);
      cin_.push_back(c);
      work_.push_back(h_ - c);
      lost_.push_back(K_ - static_cast<int>(std::ceil((h_ - c) / q_ - kEps)));
    }
    // Deficit units from entering to phase J, and before the last changeover tick.
    for (int j = 0; j < J_; ++j) land_lost_ += lost_[j];
    pre_lost_ = J_ > 0 ? land_lost_ - lost_[J_ - 1] : 0;
  }

  int modes() const { return M_; }
  // The back-pointer table and the ring of layers.
  int64_t TableBytes() const {
    return (std::max<int64_t>(T_, 0) + Ring() * int64_t{sizeof(double)}) * M_ * (S_ + 1);
  }
  OmniscientPlan Solve();

 private:
  // Mode layout: idle in slot s (0..R-1), then spot zone z (R + z), then
  // on-demand in slot s (R + Z + s), instances in phase J. Slot 0 is "no
  // state anywhere yet", slot 1 + z "state in zone z" (one slot when moves
  // are free). A group is 0 idle, z + 1 spot zone z, Z + 1 on-demand.
  // A back pointer is the mode of the previous state, with kLanded set when
  // the state is an entry's landing (the previous state is J ticks earlier).
  static constexpr uint8_t kLanded = 0x80;
  int Idle(int s) const { return s; }
  int Spot(int z) const { return R_ + z; }
  int Od(int s) const { return R_ + Z_ + s; }
  int GroupOf(int m) const { return m < R_ ? 0 : m < R_ + Z_ ? m - R_ + 1 : Z_ + 1; }
  int SpotSlot(int z) const { return R_ > 1 ? 1 + z : 0; }
  int SlotOf(int m) const { return m < R_ ? m : m < R_ + Z_ ? SpotSlot(m - R_) : m - R_ - Z_; }
  // $ of entering spot zone z with the job's state in slot s.
  double Move(int s, int z) const {
    return s == 0 ? 0 : move_[static_cast<size_t>(s - 1) * Z_ + z];
  }
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
    const int g = GroupOf(m);
    return (g >= 1 && g <= Z_ && !SpotUp(g, t)) ? 0 : g;
  }
  // The ring of layers: a state is relaxed at most J ticks ahead (an entry's
  // landing), and at least one (two layers when there is no changeover).
  int64_t Ring() const { return std::max(J_ + 1, 2); }
  double* Layer(int64_t t) {
    return layers_.data() + static_cast<size_t>(t % Ring()) * LayerSize();
  }
  size_t LayerSize() const { return static_cast<size_t>(M_) * (S_ + 1); }
  void Window(int64_t t);
  void Step(int64_t t);
  void Finish(int64_t t, int g, int j, int d, double v, int64_t from, int src);
  void Enter(int64_t t, int g, int mode, int d, double v, int src);
  void Relax(int64_t t, int m, int d, double v, uint8_t back);
  std::vector<Placement> Backtrack() const;

  const FutureView& f_;
  JobSpec job_;
  int Z_, K_, J_ = 0, R_ = 1, M_ = 0, S_ = 0, land_lost_ = 0, pre_lost_ = 0;
  const std::vector<double>& move_;
  int64_t T_ = 0;
  double h_ = 0, q_ = 0;
  std::vector<double> cin_, work_;
  std::vector<int> lost_;
  std::vector<double> layers_;  // Ring() ticks of states: [t % Ring()][m][deficit]
  std::vector<uint8_t> back_;   // [t][m][deficit]: where the state at the start of tick t came from
  // Per group, at the current tick: its bill and whether it is up; for
  // entries, whether it stays up through the changeover and the changeover's
  // bill before its last tick and of that tick.
  std::vector<double> bill_;
  std::vector<uint8_t> up_, stays_up_;
  std::vector<double> pre_cost_, last_bill_;
  double best_ = kInf;
  int64_t best_t_ = -1, best_from_ = -1;
  int best_g_ = 0, best_src_ = 0, best_d_ = 0;
};

void DpSolver::Relax(int64_t t, int m, int d, double v, uint8_t back) {
  size_t i = static_cast<size_t>(m) * (S_ + 1) + d;
  double* next = Layer(t);
  if (v < next[i]) {
    next[i] = v;
    back_[static_cast<size_t>(t - 1) * LayerSize() + i] = back;
  }
}

// The job in group g, phase j, deficit d, value v at tick t works its last
// hours and is done within the tick (it entered from state `src` at tick
// `from`, the tick the schedule's last instance began).
void DpSolver::Finish(int64_t t, int g, int j, int d, double v, int64_t from, int src) {
  double p = static_cast<double>(t * K_ - d) * q_;
  double left = std::max(0.0, job_.compute_hours - p);
  double finish = t * h_ + cin_[j] + left;
  double total = v + Price(g, t) * (cin_[j] + left);
  if (finish <= job_.deadline_hours + kEps && total < best_) {
    best_ = total, best_t_ = t, best_from_ = from, best_g_ = g, best_src_ = src, best_d_ = d;
  }
}

// Entering group g (as `mode`) at tick t from state (src, d) of value v,
// the move's cost included.
void DpSolver::Enter(int64_t t, int g, int mode, int d, double v, int src) {
  if (J_ == 0) {  // no changeover: the entry runs this tick, as a stay would
    double p = static_cast<double>(t * K_ - d) * q_;
    if (p + work_[0] >= job_.compute_hours - kEps) return Finish(t, g, 0, d, v, t, src);
    if (d + lost_[0] <= S_) Relax(t + 1, mode, d + lost_[0], v + bill_[g], src);
    return;
  }
  const int64_t last = t + J_ - 1;  // the changeover's last tick
  if (last >= T_ || !stays_up_[g] || d + pre_lost_ > S_) return;
  const double p = static_cast<double>(t * K_ - d) * q_;  // no work before the last tick
  if (p + work_[J_ - 1] >= job_.compute_hours - kEps) {
    return Finish(last, g, J_ - 1, d + pre_lost_, v + pre_cost_[g], t, src);
  }
  if (d + land_lost_ <= S_) {
    Relax(last + 1, mode, d + land_lost_, v + pre_cost_[g] + last_bill_[g],
          static_cast<uint8_t>(src | kLanded));
  }
}

// For entries at tick t: per group, whether it is up through the changeover
// (ticks t .. t + J - 1), the bill of its ticks before the last and of the last.
void DpSolver::Window(int64_t t) {
  for (int g = 1; g <= Z_ + 1; ++g) {
    bool up = true;
    double cost = 0;
    for (int k = 0; k < J_ && up; ++k) {
      if (t + k >= T_) break;
      if (g <= Z_ && !SpotUp(g, t + k)) up = false;
      if (k + 1 < J_) cost += Price(g, t + k) * h_;
    }
    stays_up_[g] = up ? 1 : 0;
    pre_cost_[g] = cost;
    last_bill_[g] = t + J_ - 1 < T_ ? Price(g, t + J_ - 1) * h_ : 0;
  }
}

void DpSolver::Step(int64_t t) {
  double* cur = Layer(t);
  if (J_ > 0) Window(t);
  std::vector<int> eff(M_);
  for (int m = 0; m < M_; ++m) eff[m] = EffGroup(m, t);
  for (int g = 1; g <= Z_ + 1; ++g) {  // this tick's bill and availability per group
    bill_[g] = Price(g, t) * h_;
    up_[g] = g == Z_ + 1 || SpotUp(g, t);
  }
  // Per slot, the best state and the best of another group than its own.
  struct Best {
    double v = kInf;
    int m = -1, g = -1;
  };
  std::vector<Best> b1(R_), b2(R_);
  for (int d = 0; d <= S_; ++d) {
    std::fill(b1.begin(), b1.end(), Best{});
    std::fill(b2.begin(), b2.end(), Best{});
    for (int m = 0; m < M_; ++m) {
      double v = cur[static_cast<size_t>(m) * (S_ + 1) + d];
      if (v == kInf) continue;
      int g = eff[m];
      if (g != 0) {  // stay on the instance, in phase J
        double p = static_cast<double>(t * K_ - d) * q_;
        if (p + work_[J_] >= job_.compute_hours - kEps) {
          Finish(t, g, J_, d, v, t, m);
        } else if (d + lost_[J_] <= S_) {
          Relax(t + 1, m, d + lost_[J_], v + bill_[g], static_cast<uint8_t>(m));
        }
      }
      Best &x = b1[SlotOf(m)], &y = b2[SlotOf(m)];
      if (v < x.v) {
        if (g != x.g) y = x;
        x = {v, m, g};
      } else if (g != x.g && v < y.v) {
        y = {v, m, g};
      }
    }
    // The best state of slot s to enter group g from (not in g already).
    auto from = [&](int s, int g) -> const Best& { return b1[s].g == g ? b2[s] : b1[s]; };
    for (int s = 0; s < R_; ++s) {
      if (b1[s].m < 0) continue;
      if (d + K_ <= S_) Relax(t + 1, Idle(s), d + K_, b1[s].v, static_cast<uint8_t>(b1[s].m));
      const Best& o = from(s, Z_ + 1);  // on-demand runs where the state is
      if (o.m >= 0) Enter(t, Z_ + 1, Od(s), d, o.v, o.m);
    }
    for (int z = 0; z < Z_; ++z) {  // spot, moving the state to zone z
      if (!up_[z + 1]) continue;
      double best = kInf;
      int src = -1;
      for (int s = 0; s < R_; ++s) {
        const Best& o = from(s, z + 1);
        if (o.m >= 0 && o.v + Move(s, z) < best) best = o.v + Move(s, z), src = o.m;
      }
      if (src >= 0) Enter(t, z + 1, Spot(z), d, best, src);
    }
  }
  std::fill(cur, cur + LayerSize(), kInf);  // reused for tick t + J + 1
}

OmniscientPlan DpSolver::Solve() {
  OmniscientPlan plan;
  plan.units_per_tick = K_;
  if (S_ < 0 || T_ <= 0) return plan;
  layers_.assign(static_cast<size_t>(Ring()) * LayerSize(), kInf);
  back_.assign(static_cast<size_t>(T_) * LayerSize(), 0);
  bill_.assign(Z_ + 2, 0);
  up_.assign(Z_ + 2, 0);
  stays_up_.assign(Z_ + 2, 0);
  pre_cost_.assign(Z_ + 2, 0);
  last_bill_.assign(Z_ + 2, 0);
  Layer(0)[Idle(0) * static_cast<size_t>(S_ + 1)] = 0;  // idle, no state yet, no deficit
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
  // The last instance runs from best_from_ through best_t_; before it, the
  // state (best_src_, deficit) at the start of tick best_from_.
  for (int64_t t = best_from_; t <= best_t_; ++t) out[t] = PlacementOf(best_g_);
  int m = best_src_;
  int d = best_d_ - (best_from_ < best_t_ ? pre_lost_ : 0);
  for (int64_t t = best_from_; t > 0;) {
    // (m, d) is the state at the start of tick t; find where it came from.
    size_t i = static_cast<size_t>(m) * (S_ + 1) + d;
    uint8_t back = back_[static_cast<size_t>(t - 1) * LayerSize() + i];
    int src = back & ~kLanded;
    if (back & kLanded) {  // entered m at tick t - J from (src, d - land_lost_)
      for (int64_t k = t - J_; k < t; ++k) out[k] = PlacementOf(GroupOf(m));
      d -= land_lost_;
      t -= J_;
    } else {
      out[t - 1] = PlacementOf(GroupOf(m));
      d -= GroupOf(m) == 0 ? K_ : lost_[J_];
      t -= 1;
    }
    m = src;
  }
  return out;
}

// The $ of moving the job's state between each pair of zones (row: from),
// as the fleet model bills it, then by the cheapest path through other
// zones: in the DP a move through a third region never costs less than the
// direct one, which is what lets it forget a changeover cut short. Where the
// prices say otherwise (`shortened`) the DP charges the cheaper path, which
// keeps it a lower bound, no longer exact.
Result<std::vector<double>> MoveCosts(const FutureView& f, const JobSpec& job, bool* shortened) {
  std::vector<std::string> regions;
  for (const market::Trace* z : f.zones) regions.push_back(fleet::RegionOf(z->pool));
  SPOT_ASSIGN_OR_RETURN(std::vector<double> m,
                        fleet::MigrationMatrix(regions, job.checkpoint_gb, job.egress));
  const size_t n = regions.size();
  *shortened = false;
  for (size_t k = 0; k < n; ++k) {
    for (size_t i = 0; i < n; ++i) {
      for (size_t j = 0; j < n; ++j) {
        const double via = m[i * n + k] + m[k * n + j];
        if (via < m[i * n + j] - 1e-12) m[i * n + j] = via, *shortened = true;
      }
    }
  }
  return m;
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
  bool shortened = false;
  SPOT_ASSIGN_OR_RETURN(std::vector<double> moves, MoveCosts(future, job, &shortened));
  bool exact = !shortened && K == UnitsPerTick(gap_s, job.changeover_hours * 3600, 1 << 30);
  for (;;) {
    DpSolver solver(future, job, K, moves);
    if (solver.modes() > 127) {
      return InvalidArgumentError(
          "omniscient: too many zones for the DP (at most 41 with moves that cost, 125 without)");
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
