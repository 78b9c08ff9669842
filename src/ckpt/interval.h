// When to checkpoint. Young (1974) and Daly (2006): with a checkpoint costing
// C seconds and failures arriving at rate 1/M, the interval minimizing
// expected lost plus spent time is about sqrt(2 C M) (Daly's refinement:
// sqrt(2 C M) - C for C < M / 2). CheckFreq (FAST '21) adds a cap: whatever
// the failure rate, the measured overhead C / T must stay under a target, so
// T >= C / target. With asynchronous saves C is what training loses per save:
// the time it blocks for the snapshot plus the slowdown of the steps that run
// while the background writer competes for cores; both are measured here.
#pragma once

#include <cstdint>

namespace spot::ckpt {

struct IntervalOptions {
  double mtbf_s = 3600;          // mean time between preemptions (> 0)
  double max_overhead = 0.01;    // cap on the fraction of training time spent on saves
  double min_interval_s = 1;     // never save more often than this
  double max_interval_s = 3600;  // nor less often
  // Until a save has been measured (here or by an earlier writer, Seed()),
  // save after this long, or after a tenth of the MTBF when that is sooner:
  // a process that starts on a market with short lifetimes must not wait
  // longer than its instance is likely to live.
  double first_save_s = 30;
};

class IntervalPolicy;

// The one rule of when a trainer saves (single-process and elastic alike):
// at the interval policy's time when there is one (checkpoint.interval:
// auto), else every `every_steps` steps. REQUIRES: every_steps >= 1.
bool SaveDue(const IntervalPolicy* policy, int64_t every_steps, int64_t step,
             double seconds_since_last_save);

class IntervalPolicy {
 public:
  explicit IntervalPolicy(IntervalOptions o) : opt_(o) {}

  // A training step took `seconds`; `saving` says whether a background save
  // was in flight during it.
  void RecordStep(double seconds, bool saving);
  // A save blocked training for `blocking_s`.
  void RecordSave(double blocking_s);
  // The cost of one save as an earlier writer of the same job measured it
  // (recorded in its checkpoints): used until this process measures its own,
  // so a replacement worker saves on the Young/Daly schedule from its start.
  // Ignored when not positive and finite.
  void Seed(double cost_s);
  // Updates the preemption estimate (e.g. from the market's hazard model).
  void SetMtbf(double mtbf_s) { opt_.mtbf_s = mtbf_s; }

  // Seconds of training between saves, per the rules above.
  double IntervalSeconds() const;
  // The measured cost of one save in seconds (blocking + interference).
  double CostSeconds() const;
  // Measured fraction of training time spent on saves so far.
  double MeasuredOverhead() const;
  // Young/Daly without the cap.
  static double YoungDaly(double cost_s, double mtbf_s);

 private:
  IntervalOptions opt_;
  int64_t saves_ = 0;
  double seed_cost_s_ = 0;  // Seed(), until saves_ > 0
  double blocking_s_ = 0;   // exponentially weighted mean of the snapshot time
  double total_blocking_s_ = 0;
  double idle_step_s_ = 0;  // mean step time with no save in flight
  int64_t idle_steps_ = 0;
  double busy_step_s_ = 0;  // mean step time during a save
  int64_t busy_steps_ = 0;
  double total_step_s_ = 0;
};

}  // namespace spot::ckpt
