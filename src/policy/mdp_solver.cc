#include "policy/mdp_solver.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <exception>
#include <future>
#include <limits>
#include <map>
#include <mutex>

namespace spot::policy {
namespace {

constexpr int kModes = 3;  // idle, spot, on-demand: the MdpAction values
constexpr int kIdle = 0, kSpot = 1, kOd = 2;
constexpr double kEps = 1e-9;

// One successor of a chain state and its chance.
struct Next {
  int state;
  double p;
};

using Successors = std::array<Next, 3>;

// The successors of `s` over one step: the run goes on (older, or the same
// bucket) or flips to the other side's first bucket.
Successors SuccessorsOf(const AvailabilityChain& c, int s) {
  double live = c.survive[s], adv = AdvanceChance(s);
  int flip = IsUp(s) ? kAgeBuckets : 0;
  return {Next{adv > 0 ? s + 1 : s, live * adv}, Next{s, live * (1 - adv)}, Next{flip, 1 - live}};
}

// The backward induction; fills action[] and the values at step 0.
class Solver {
 public:
  Solver(const AvailabilityChain& chain, const JobSpec& job, const MdpGrid& grid, int64_t steps,
         int64_t net_cell)
      : c_(chain), job_(job), g_(grid), steps_(steps), net_(net_cell) {
    q_ = g_.step_hours / g_.cells_per_step;
    cd_ = static_cast<int64_t>(std::lround(job.changeover_hours / q_));
    half_ = std::max<int64_t>(1, g_.cells_per_step / 2);
    width_ = (net_ + 1) * kModes * kChainStates;
    for (int s = 0; s < kChainStates; ++s) succ_[s] = SuccessorsOf(chain, s);
  }

  void Run(std::vector<uint8_t>& action, std::vector<double>& start_value) {
    std::vector<double> next(width_, 0), cur(width_, 0);
    action.assign(static_cast<size_t>(steps_) * width_, kOd);
    for (int64_t i = steps_ - 1; i >= 0; --i) {
      for (int64_t x = 0; x <= net_; ++x) {
        const double w = Work(i, x);
        const Rows rows = RowsAt(next, i, x);
        for (int s = 0; s < kChainStates; ++s) {
          const Choices c = ChoicesAt(rows, w, s);
          const std::array<Pick, kModes> best = BestByMode(c, w, s);
          for (int m = 0; m < kModes; ++m) {
            size_t at = Cell(x, m, s);
            cur[at] = best[m].value;
            action[static_cast<size_t>(i) * width_ + at] = static_cast<uint8_t>(best[m].action);
          }
        }
      }
      std::swap(cur, next);
    }
    start_value.resize(kChainStates);
    for (int s = 0; s < kChainStates; ++s)
      start_value[s] = net_ >= 0 ? next[Cell(0, kIdle, s)] : Forced(0, 0, kIdle);
  }

 private:
  // The next step's values at one (deficit, mode), by chain state.
  using Row = const double*;
  // The rows a step from deficit x can reach: [entering] for spot (on spot;
  // taken back halfway, idle) and on-demand, and idle.
  struct Rows {
    Row spot[2], spot_lost[2], od[2], idle;
  };
  static constexpr int kRows = sizeof(Rows) / sizeof(Row);

  size_t Cell(int64_t x, int m, int s) const {
    return static_cast<size_t>((x * kModes + m) * kChainStates + s);
  }
  double Work(int64_t i, int64_t x) const {
    return job_.compute_hours -
           (static_cast<double>(i) * g_.step_hours - static_cast<double>(x) * q_);
  }
  // The safety net's cost: the rest on on-demand.
  double Forced(int64_t i, int64_t x, int m) const {
    double w = Work(i, x);
    if (w <= kEps) return 0;
    return job_.ondemand_price * (w + (m == kOd ? 0 : job_.changeover_hours));
  }
  // The values of (i, x, m, .) with i the step after the current one; past
  // the work, the net or the horizon every state has the same value, written
  // to fixed_[slot].
  Row RowAt(const std::vector<double>& next, int64_t i, int64_t x, int m, int slot) {
    if (x <= net_ && i < steps_ && Work(i, x) > kEps) return next.data() + Cell(x, m, 0);
    fixed_[slot].fill(Forced(i, x, m));  // 0 once the work is done
    return fixed_[slot].data();
  }
  Rows RowsAt(const std::vector<double>& next, int64_t i, int64_t x) {
    Rows r;
    int slot = 0;  // each row its own scratch in fixed_
    for (int enter = 0; enter < 2; ++enter) {
      const int64_t x1 = x + (enter ? cd_ : 0);
      r.spot[enter] = RowAt(next, i + 1, x1, kSpot, slot++);
      r.spot_lost[enter] = RowAt(next, i + 1, x1 + half_, kIdle, slot++);
      r.od[enter] = RowAt(next, i + 1, x1, kOd, slot++);
    }
    r.idle = RowAt(next, i + 1, x + g_.cells_per_step, kIdle, slot++);
    return r;
  }
  // The three terms summed in their order without a branch: a successor of
  // chance 0 adds exactly 0 (values are finite), as if it were skipped.
  double Expect(Row row, int s) const {
    const Successors& n = succ_[s];
    return n[0].p * row[n[0].state] + n[1].p * row[n[1].state] + n[2].p * row[n[2].state];
  }

  // Spot from chain state s (up), entering it or not: billed at the chain's
  // price; taken back halfway through the step when the chain goes down.
  double SpotValue(const Rows& rows, bool enter, int s, double w) const {
    const double d = job_.changeover_hours, step = g_.step_hours, p = c_.spot_price;
    double need = w + (enter ? d : 0);
    if (need <= step) return p * need;
    // From an up state the first two successors are up, the third the flip.
    const Row on = rows.spot[enter], lost = rows.spot_lost[enter];
    const Successors& n = succ_[s];
    return n[0].p * (p * step + on[n[0].state]) + n[1].p * (p * step + on[n[1].state]) +
           n[2].p * (p * step / 2 + lost[n[2].state]);
  }

  // The values of each choice at (step, deficit, chain state s), by whether
  // it enters what it chooses (the modes differ in that only).
  struct Choices {
    double spot[2], idle, od[2];
  };
  Choices ChoicesAt(const Rows& rows, double w, int s) const {
    Choices c{};
    if (w <= kEps) return c;
    const double d = job_.changeover_hours, step = g_.step_hours, k = job_.ondemand_price;
    for (int enter = 0; enter < 2; ++enter) {
      if (IsUp(s)) c.spot[enter] = SpotValue(rows, enter, s, w);
      const double need = w + (enter ? d : 0);
      c.od[enter] = need <= step ? k * need : k * step + Expect(rows.od[enter], s);
    }
    c.idle = Expect(rows.idle, s);
    return c;
  }

  struct Pick {
    double value;
    int action;
  };
  // The best of spot (when the chain is up), idle and on-demand, preferred
  // in that order on (near) ties: waiting keeps options.
  static Pick Best(bool up, double spot, double idle, double od) {
    Pick b{idle, kIdle};
    if (up && !(idle < spot - kEps)) b = {spot, kSpot};
    if (od < b.value - kEps) b = {od, kOd};
    return b;
  }
  // The best choice from each mode held: from spot, staying on it costs no
  // changeover (a spot mode in a down state was taken back: it holds
  // nothing, as idle); from on-demand, staying on on-demand.
  static std::array<Pick, kModes> BestByMode(const Choices& c, double w, int s) {
    if (w <= kEps) return {Pick{0, kIdle}, Pick{0, kIdle}, Pick{0, kIdle}};
    const bool up = IsUp(s);
    std::array<Pick, kModes> b;
    b[kIdle] = Best(up, c.spot[1], c.idle, c.od[1]);
    b[kSpot] = up ? Best(true, c.spot[0], c.idle, c.od[1]) : b[kIdle];
    b[kOd] = Best(up, c.spot[1], c.idle, c.od[0]);
    return b;
  }

  const AvailabilityChain& c_;
  const JobSpec& job_;
  const MdpGrid& g_;
  int64_t steps_, net_;
  double q_ = 0;
  int64_t cd_ = 0, half_ = 1;
  size_t width_ = 0;
  std::array<Successors, kChainStates> succ_;  // by state, computed once
  std::array<std::array<double, kChainStates>, kRows> fixed_;
};

}  // namespace

MdpSolution::MdpSolution(const AvailabilityChain& chain, const JobSpec& job, const MdpGrid& grid)
    : job_(job), grid_(grid) {
  steps_ = std::max<int64_t>(
      1, static_cast<int64_t>(std::ceil(job.deadline_hours / grid.step_hours - kEps)));
  double q = grid.step_hours / grid.cells_per_step;
  double room = job.deadline_hours - job.compute_hours - 2 * job.changeover_hours;
  net_cell_ = room < 0 ? -1 : static_cast<int64_t>(std::floor(room / q + kEps));
  Solver(chain, job, grid, steps_, net_cell_).Run(action_, start_value_);
}

size_t MdpSolution::Index(int64_t i, int64_t x, int mode, int state) const {
  size_t width = static_cast<size_t>(net_cell_ + 1) * kModes * kChainStates;
  return static_cast<size_t>(i) * width +
         static_cast<size_t>((x * kModes + mode) * kChainStates + state);
}

MdpAction MdpSolution::Act(double time_hours, double deficit_hours, InstanceKind held,
                           int state) const {
  double q = grid_.step_hours / grid_.cells_per_step;
  int64_t x = std::max<int64_t>(0, std::llround(deficit_hours / q));
  int64_t i = std::clamp<int64_t>(
      static_cast<int64_t>(std::floor(time_hours / grid_.step_hours + kEps)), 0, steps_ - 1);
  // The job asks while work is left, so its cell must hold some: rounding
  // the deficit down could put the last sliver of work (less than half a
  // cell) in a cell where it is done, every action of which costs nothing,
  // and the job would sit idle until the net took it to on-demand.
  const double past_work = static_cast<double>(i) * grid_.step_hours - job_.compute_hours;
  if (static_cast<double>(x) * q - past_work <= kEps) {
    x = static_cast<int64_t>(std::floor(past_work / q + kEps)) + 1;
  }
  if (x > net_cell_) return MdpAction::kOnDemand;
  int mode = held == InstanceKind::kSpot ? kSpot : held == InstanceKind::kOnDemand ? kOd : kIdle;
  if (mode == kSpot && !IsUp(state)) mode = kIdle;
  return static_cast<MdpAction>(action_[Index(i, x, mode, state)]);
}

std::shared_ptr<const MdpSolution> SolveMdp(const AvailabilityChain& chain, const JobSpec& job,
                                            const MdpGrid& grid) {
  std::vector<double> key(chain.survive.begin(), chain.survive.end());
  key.insert(key.end(),
             {chain.spot_price, job.compute_hours, job.deadline_hours, job.changeover_hours,
              job.ondemand_price, grid.step_hours, static_cast<double>(grid.cells_per_step)});
  // Bounded: a solution is a few MB; starts of one market reuse a handful
  // (several at once when starts are simulated on several threads), so the
  // least recently used one goes first. A solution being solved is in the
  // cache too (not counted): a thread that needs it meanwhile waits for it
  // instead of solving it again.
  using Future = std::shared_future<std::shared_ptr<const MdpSolution>>;
  struct Entry {
    Future solution;
    uint64_t used = 0;
  };
  static std::mutex mu;
  static std::map<std::vector<double>, Entry> cache;
  static uint64_t uses = 0;
  std::promise<std::shared_ptr<const MdpSolution>> solving;
  Future found;
  {
    std::lock_guard<std::mutex> lock(mu);
    auto it = cache.find(key);
    if (it != cache.end()) {
      it->second.used = ++uses;
      found = it->second.solution;
    } else {
      // At most 16 solved; those being solved come on top.
      auto ready = [](const Entry& e) {
        return e.solution.wait_for(std::chrono::seconds(0)) == std::future_status::ready;
      };
      auto lru = cache.end();
      size_t solved = 0;
      for (auto e = cache.begin(); e != cache.end(); ++e) {
        if (!ready(e->second)) continue;
        ++solved;
        if (lru == cache.end() || e->second.used < lru->second.used) lru = e;
      }
      if (solved >= 16) cache.erase(lru);
      cache.emplace(key, Entry{solving.get_future().share(), ++uses});
    }
  }
  if (found.valid()) return found.get();
  try {
    auto solution = std::make_shared<const MdpSolution>(chain, job, grid);
    solving.set_value(solution);
    return solution;
  } catch (...) {  // the threads waiting get the error; the next call solves anew
    solving.set_exception(std::current_exception());
    std::lock_guard<std::mutex> lock(mu);
    cache.erase(key);
    throw;
  }
}

}  // namespace spot::policy
