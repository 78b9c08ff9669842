#include "policy/omniscient.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <string>
#include <utility>
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
  DpSolver(const FutureView& f, const JobSpec& job, int K, const std::vector<double>& moves,
           bool overlap)
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
    overlap_ = overlap && J_ >= 2;  // with one changeover tick it is an entry
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
  static constexpr uint8_t kNone = 0xFF;  // no state (a mode is below 0x7F)
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
  const double* Layer(int64_t t) const {
    return layers_.data() + static_cast<size_t>(t % Ring()) * LayerSize();
  }
  size_t LayerSize() const { return static_cast<size_t>(M_) * (S_ + 1); }
  void Window(int64_t t);
  void Step(int64_t t);
  void Overlaps(int64_t t, int a, int b);
  int LastFinishing(int64_t t, double w) const;
  void Bests(int s, int a, int b);
  void BestBut(int s, int e, int a, int b, double add, double* v, uint8_t* m) const;
  std::pair<double, int> BestAt(int s, int e, int d) const;
  void RelaxRange(int64_t t, int m, int lo, int hi, int shift, const double* v, double a1,
                  double a2, const uint8_t* from, uint8_t back);
  void Finish(int64_t t, int g, int j, int d, double v, int64_t from, int src);
  std::vector<Placement> Backtrack() const;

  const FutureView& f_;
  JobSpec job_;
  int Z_, K_, J_ = 0, R_ = 1, M_ = 0, S_ = 0, land_lost_ = 0, pre_lost_ = 0;
  bool overlap_ = false;  // spot entered from on-demand make before break
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
  // At the current tick cur_t_, per slot and deficit: the best state and the
  // best of the other modes (value, mode; Bests); per deficit, the entry
  // being relaxed.
  int64_t cur_t_ = 0;
  // Per layer of the ring, the deficits that may hold a state.
  struct Span {
    int lo = std::numeric_limits<int>::max(), hi = -1;
  };
  std::vector<Span> span_;
  std::vector<int> eff_;
  std::vector<double> b1v_, b2v_, ent_v_;
  std::vector<uint8_t> b1m_, b2m_, ent_m_;
  double best_ = kInf;
  int64_t best_t_ = -1, best_from_ = -1;
  int best_g_ = 0, best_src_ = 0, best_d_ = 0;
};

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

// The last deficit (-1: none) at which a job working w hours this tick
// finishes it: its progress (t K - d) q + w falls with d.
int DpSolver::LastFinishing(int64_t t, double w) const {
  auto done = [&](int64_t d) {
    return static_cast<double>(t * K_ - d) * q_ + w >= job_.compute_hours - kEps;
  };
  int64_t d = static_cast<int64_t>(std::floor(t * K_ - (job_.compute_hours - w) / q_));
  d = std::clamp<int64_t>(d, -1, S_);
  while (d < S_ && done(d + 1)) ++d;
  while (d >= 0 && !done(d)) --d;
  return static_cast<int>(d);
}

// Relaxes state (m, d + shift) of tick t with v[d] + a1 + a2 for d in
// [lo, hi], its back pointer from[d] | back (from: none, back alone).
void DpSolver::RelaxRange(int64_t t, int m, int lo, int hi, int shift, const double* v, double a1,
                          double a2, const uint8_t* from, uint8_t back) {
  if (lo > hi) return;
  Span& span = span_[t % Ring()];
  span.lo = std::min(span.lo, lo + shift);
  span.hi = std::max(span.hi, hi + shift);
  double* next = Layer(t) + static_cast<size_t>(m) * (S_ + 1) + shift;
  uint8_t* bp = back_.data() + static_cast<size_t>(t - 1) * LayerSize() +
                static_cast<size_t>(m) * (S_ + 1) + shift;
  // Two loops, one per kind of back pointer: one loop taking the pointer
  // from a lambda was 5% slower on aws-r5's grid.
  if (from == nullptr) {
    for (int d = lo; d <= hi; ++d) {
      const double x = v[d] + a1 + a2, o = next[d];
      bp[d] = x < o ? back : bp[d];
      next[d] = std::min(o, x);
    }
    return;
  }
  for (int d = lo; d <= hi; ++d) {
    const double x = v[d] + a1 + a2, o = next[d];
    const uint8_t f = from[d] | back;
    bp[d] = x < o ? f : bp[d];
    next[d] = std::min(o, x);
  }
}

// Per deficit in [a, b], the slot's best state (b1: value, mode) and the
// best of its other modes (b2), the first in mode order on ties: the best
// but for mode e is b1 unless b1 is e, then b2.
void DpSolver::Bests(int s, int a, int b) {
  const size_t n = static_cast<size_t>(S_) + 1;
  double *xv = &b1v_[s * n], *yv = &b2v_[s * n];
  uint8_t *xm = &b1m_[s * n], *ym = &b2m_[s * n];
  std::fill(xv + a, xv + b + 1, kInf);
  std::fill(yv + a, yv + b + 1, kInf);
  std::fill(xm + a, xm + b + 1, kNone);
  std::fill(ym + a, ym + b + 1, kNone);
  const double* cur = Layer(cur_t_);
  for (int k = 0; k < M_; ++k) {
    if (SlotOf(k) != s) continue;
    const double* v = cur + static_cast<size_t>(k) * n;
    const uint8_t mk = static_cast<uint8_t>(k);
    for (int d = a; d <= b; ++d) {
      const double x = xv[d], y = yv[d];
      const bool first = v[d] < x;
      yv[d] = first ? x : std::min(y, v[d]);
      ym[d] = first ? xm[d] : v[d] < y ? mk : ym[d];
      xv[d] = std::min(x, v[d]);
      xm[d] = first ? mk : xm[d];
    }
  }
}

// Folds into v / m for deficits [a, b] the best state of slot s but for mode
// e, plus `add`, where it is cheaper (an earlier slot's on ties).
void DpSolver::BestBut(int s, int e, int a, int b, double add, double* v, uint8_t* m) const {
  const size_t n = static_cast<size_t>(S_) + 1;
  const double *xv = &b1v_[s * n], *yv = &b2v_[s * n];
  const uint8_t *xm = &b1m_[s * n], *ym = &b2m_[s * n];
  for (int d = a; d <= b; ++d) {
    const bool two = xm[d] == e;
    const double x = (two ? yv[d] : xv[d]) + add;
    const uint8_t k = two ? ym[d] : xm[d];
    m[d] = x < v[d] ? k : m[d];
    v[d] = std::min(v[d], x);
  }
}

// The best state of slot s but for mode e at deficit d: value and mode (-1:
// none).
std::pair<double, int> DpSolver::BestAt(int s, int e, int d) const {
  const size_t i = static_cast<size_t>(s) * (S_ + 1) + d;
  const bool two = b1m_[i] == e;
  const uint8_t m = two ? b2m_[i] : b1m_[i];
  return {two ? b2v_[i] : b1v_[i], m == kNone ? -1 : m};
}

// Spot entered from on-demand make before break (OmniscientOptions::
// overlap_entries): on-demand, past its changeover, keeps working and
// billing through the spot group's changeover ticks but the last, which
// the spot group works alone (the job never holds both ready at once). A
// finish on on-demand within them is a stay's; one in the last tick is
// finished here.
void DpSolver::Overlaps(int64_t t, int a, int b) {
  if (t + J_ - 1 >= T_) return;
  const size_t n = static_cast<size_t>(S_) + 1;
  const double* cur = Layer(t);
  const int shift = lost_[J_ - 1];
  const int fo = LastFinishing(t + J_ - 1, work_[J_ - 1]);
  for (int z = 0; z < Z_; ++z) {
    if (!up_[z + 1] || !stays_up_[z + 1]) continue;
    for (int s = 0; s < R_; ++s) {
      const int od = Od(s);
      const double* v = cur + static_cast<size_t>(od) * n;
      const double add = pre_cost_[z + 1] + pre_cost_[Z_ + 1] + Move(s, z);
      for (int d = a; d <= std::min(b, fo); ++d) {
        if (v[d] != kInf) Finish(t + J_ - 1, z + 1, J_ - 1, d, v[d] + add, t, od);
      }
      RelaxRange(t + J_, Spot(z), std::max(a, fo + 1), std::min(b, S_ - shift), shift, v, add,
                 last_bill_[z + 1], nullptr, static_cast<uint8_t>(od | kLanded));
    }
  }
}

void DpSolver::Step(int64_t t) {
  cur_t_ = t;
  double* cur = Layer(t);
  const size_t n = static_cast<size_t>(S_) + 1;
  // Deficits [a, b] may hold a state at this tick.
  const Span span = std::exchange(span_[t % Ring()], Span{});
  if (span.lo > span.hi) return;
  const int a = span.lo, b = span.hi;
  if (J_ > 0) Window(t);
  std::vector<int>& eff = eff_;  // each mode's group after this tick's preemptions
  for (int m = 0; m < M_; ++m) eff[m] = EffGroup(m, t);
  for (int g = 1; g <= Z_ + 1; ++g) {  // this tick's bill and availability per group
    bill_[g] = Price(g, t) * h_;
    up_[g] = g == Z_ + 1 || SpotUp(g, t);
  }
  // The state an entry into group g comes from is the best of its slot (for
  // spot, of every slot with its move; the cheapest, the first slot on ties)
  // but for the mode of g itself (spot z while up, on-demand): the first in
  // mode order on ties, as is every choice here (the order the states were
  // once visited in, one by one: the plans do not depend on the loops).
  for (int s = 0; s < R_; ++s) Bests(s, a, b);
  // Finishing: the job done within this tick, staying (fs: last deficit) or
  // in an entry's last changeover tick (fe), in the order of the states.
  const int fs = LastFinishing(t, work_[J_]);
  const int fe = LastFinishing(t, work_[J_ > 0 ? J_ - 1 : 0]);
  for (int d = a; d <= std::min(b, std::max(fs, fe)); ++d) {
    if (d <= fs) {
      for (int m = 0; m < M_; ++m) {
        double v = cur[static_cast<size_t>(m) * n + d];
        if (v != kInf && eff[m] != 0) Finish(t, eff[m], J_, d, v, t, m);
      }
    }
    if (d > fe) continue;
    auto finish_entry = [&](int g, double v, int src) {
      if (J_ == 0) return Finish(t, g, 0, d, v, t, src);
      if (t + J_ - 1 >= T_ || !stays_up_[g] || d + pre_lost_ > S_) return;
      Finish(t + J_ - 1, g, J_ - 1, d + pre_lost_, v + pre_cost_[g], t, src);
    };
    for (int s = 0; s < R_; ++s) {
      auto [v, m] = BestAt(s, Od(s), d);
      if (m >= 0) finish_entry(Z_ + 1, v, m);
    }
    for (int z = 0; z < Z_; ++z) {
      if (!up_[z + 1]) continue;
      double best = kInf;
      int src = -1;
      for (int s = 0; s < R_; ++s) {
        auto [v, m] = BestAt(s, Spot(z), d);
        if (m >= 0 && v + Move(s, z) < best) best = v + Move(s, z), src = m;
      }
      if (src >= 0) finish_entry(z + 1, best, src);
    }
  }
  // The relaxations, each target state once per kind: entries first where
  // they land on the next tick from a lower deficit than a stay's (one
  // changeover tick), as the states' order has them.
  auto stays = [&] {
    const int hi = S_ - lost_[J_];
    for (int m = 0; m < M_; ++m) {
      if (eff[m] == 0) continue;
      RelaxRange(t + 1, m, std::max(a, fs + 1), std::min(b, hi), lost_[J_],
                 cur + static_cast<size_t>(m) * n, bill_[eff[m]], 0, nullptr,
                 static_cast<uint8_t>(m));
    }
  };
  // Relaxes the entries in ent_v_ / ent_m_ into `mode` of group g.
  auto enter = [&](int g, int mode) {
    if (J_ == 0) {
      RelaxRange(t + 1, mode, std::max(a, fe + 1), std::min(b, S_ - lost_[0]), lost_[0],
                 ent_v_.data(), bill_[g], 0, ent_m_.data(), 0);
    } else if (t + J_ - 1 < T_ && stays_up_[g]) {
      RelaxRange(t + J_, mode, std::max(a, fe + 1), std::min(b, S_ - land_lost_), land_lost_,
                 ent_v_.data(), pre_cost_[g], last_bill_[g], ent_m_.data(), kLanded);
    }
  };
  auto all_entries = [&] {
    for (int s = 0; s < R_; ++s) {  // idle: from the best state of the slot
      RelaxRange(t + 1, Idle(s), a, std::min(b, S_ - K_), K_, &b1v_[s * n], 0, 0, &b1m_[s * n], 0);
    }
    auto clear = [&] {
      std::fill(ent_v_.begin() + a, ent_v_.begin() + b + 1, kInf);
      std::fill(ent_m_.begin() + a, ent_m_.begin() + b + 1, kNone);
    };
    for (int s = 0; s < R_; ++s) {  // on-demand runs where the state is
      clear();
      BestBut(s, Od(s), a, b, 0, ent_v_.data(), ent_m_.data());
      enter(Z_ + 1, Od(s));
    }
    for (int z = 0; z < Z_; ++z) {  // spot, moving the state to zone z
      if (!up_[z + 1] || (J_ > 0 && (t + J_ - 1 >= T_ || !stays_up_[z + 1]))) continue;
      clear();
      for (int s = 0; s < R_; ++s) {
        BestBut(s, Spot(z), a, b, Move(s, z), ent_v_.data(), ent_m_.data());
      }
      enter(z + 1, Spot(z));
    }
  };
  if (J_ == 1 && land_lost_ > 0) {
    all_entries();
    stays();
  } else {
    stays();
    all_entries();
  }
  if (overlap_) Overlaps(t, a, b);
  for (int m = 0; m < M_; ++m) {  // reused for tick t + J + 1
    std::fill(cur + m * n + a, cur + m * n + b + 1, kInf);
  }
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
  const size_t n = static_cast<size_t>(S_) + 1;
  for (auto* v : {&b1v_, &b2v_}) v->assign(R_ * n, kInf);
  for (auto* v : {&b1m_, &b2m_}) v->assign(R_ * n, kNone);
  ent_v_.assign(n, kInf);
  ent_m_.assign(n, kNone);
  eff_.assign(M_, 0);
  span_.assign(static_cast<size_t>(Ring()), Span{});
  Layer(0)[Idle(0) * static_cast<size_t>(S_ + 1)] = 0;  // idle, no state yet, no deficit
  span_[0] = {0, 0};
  for (int64_t t = 0; t < T_; ++t) Step(t);
  if (best_ == kInf) return plan;
  plan.feasible = true;
  plan.cost = best_;
  if (!overlap_) plan.placements = Backtrack();  // back pointers do not tell overlaps apart
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
    DpSolver solver(future, job, K, moves, options.overlap_entries);
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
