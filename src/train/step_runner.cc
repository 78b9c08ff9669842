#include "train/step_runner.h"

#include <ATen/ATen.h>
#include <fmt/format.h>
#include <torch/nn/functional/loss.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <limits>

#include "train/augment.h"
#include "train/lr_schedule.h"
#include "train/sampler.h"

namespace spot::train {

int64_t StepsPerEpoch(const TrainSpec& spec, int64_t n) {
  return (n + spec.batch_size - 1) / spec.batch_size;
}

bool EvaluationDue(const TrainSpec& spec, const BatchEnd& end, int64_t step,
                   int64_t evaluated_step) {
  if (end.epoch_done || end.last) return true;
  return spec.eval_every > 0 && step % spec.eval_every == 0 && step != evaluated_step;
}

int64_t TotalSteps(const TrainSpec& spec, int64_t n) {
  int64_t total = spec.epochs > 0 ? spec.epochs * StepsPerEpoch(spec, n) : spec.steps;
  if (spec.steps > 0) total = std::min(total, spec.steps);
  return total;
}

StepRunner::StepRunner(const TrainSpec& spec, const TensorSet& data, TrainRefs state)
    : spec_(spec),
      data_(data),
      state_(std::move(state)),
      steps_per_epoch_(StepsPerEpoch(spec, data.size())),
      total_steps_(TotalSteps(spec, data.size())) {}

bool StepRunner::Finished() const {
  const TrainerCounters& c = *state_.counters;
  return c.step >= total_steps_ || (spec_.epochs > 0 && c.epoch >= spec_.epochs);
}

Slice StepRunner::NextBatch() const {
  return GlobalBatch(state_.counters->index_in_epoch / spec_.batch_size, spec_.batch_size,
                     data_.size());
}

int64_t StepRunner::BatchNumber() const {
  const TrainerCounters& c = *state_.counters;
  return c.epoch * steps_per_epoch_ + c.index_in_epoch / spec_.batch_size;
}

bool StepRunner::NextIsSkipped() const {
  const std::vector<int64_t>& s = state_.counters->skipped_batches;
  return std::binary_search(s.begin(), s.end(), BatchNumber());
}

void StepRunner::EnsureOrder() {
  const int64_t epoch = state_.counters->epoch;
  if (order_epoch_ == epoch) return;
  const auto seed = static_cast<uint64_t>(spec_.seed);
  std::vector<int64_t> o;
  if (spec_.sampling == "shuffle") {
    o = EpochOrder(seed, epoch, data_.size());
  } else {
    const at::Tensor labels = data_.labels.contiguous();
    const std::vector<int64_t> l(labels.data_ptr<int64_t>(),
                                 labels.data_ptr<int64_t>() + labels.numel());
    o = ClassOrder(seed, epoch, l, spec_.sampling == "balanced");
  }
  order_ = at::from_blob(o.data(), {data_.size()}, at::kLong).clone();
  order_epoch_ = epoch;
}

// Groups follow spec.param_groups, then the rest (MakeOptimizer). A frozen
// parameter computes no gradient (backward skips it) and holds none, so the
// optimizer passes it by and its state does not advance.
void StepRunner::ApplyParamGroups(double lr) {
  auto& groups = state_.optimizer->param_groups();
  const int64_t step = state_.counters->step;
  for (size_t g = 0; g < groups.size(); ++g) {
    const ParamGroupSpec* entry = g < spec_.param_groups.size() ? &spec_.param_groups[g] : nullptr;
    groups[g].options().set_lr(lr * (entry ? entry->lr_scale : 1.0));
    if (entry == nullptr) continue;  // the rest: as the model made them
    const bool frozen = entry->FrozenAt(step);
    for (at::Tensor& p : groups[g].params()) {
      if (p.requires_grad() == frozen) p.set_requires_grad(!frozen);
      if (frozen && p.grad().defined()) p.mutable_grad() = at::Tensor();
    }
  }
}

std::string StepRunner::Judge(double loss) const {
  const RollbackSpec& rb = spec_.rollback;
  const TrainerCounters& c = *state_.counters;
  if (!std::isfinite(loss)) return fmt::format("loss is {}", loss);
  if (rb.enabled && c.loss_ema_steps >= rb.warmup_steps && loss > rb.spike_factor * c.loss_ema) {
    return fmt::format("loss spike: {:.4g} > {:g} x {:.4g}", loss, rb.spike_factor, c.loss_ema);
  }
  return "";
}

Result<StepOutcome> StepRunner::Run(Slice batch, Slice mine, GradientSync& sync,
                                    bool want_grad_norm) {
  using Clock = std::chrono::steady_clock;
  const auto t0 = Clock::now();
  EnsureOrder();
  TrainerCounters& c = *state_.counters;
  StepOutcome out;
  out.batch = BatchNumber();
  out.lr = LearningRate(spec_.schedule, spec_.optimizer.lr, c.step, total_steps_) * c.lr_scale;
  ApplyParamGroups(out.lr);
  state_.optimizer->zero_grad();
  // Fault injection (faults.*_at_step, 1-based): this batch's loss diverges.
  const double fault = out.batch == spec_.faults.nan_loss_at_step - 1
                           ? std::numeric_limits<double>::quiet_NaN()
                       : out.batch == spec_.faults.spike_loss_at_step - 1 ? 1000.0
                                                                          : 1.0;
  ReplicaLoss local{.samples = mine.size(), .batch = batch.size()};
  const int64_t micro =
      std::min<int64_t>(spec_.distributed.accumulation_steps, std::max<int64_t>(1, mine.size()));
  for (const Slice& part : SplitBatch(mine, std::vector<double>(micro, 1.0))) {
    if (part.size() == 0) continue;
    at::manual_seed(static_cast<uint64_t>(spec_.seed) * 1000003u +
                    static_cast<uint64_t>(c.step) * 8191u + static_cast<uint64_t>(part.begin));
    at::Tensor idx = order_.slice(0, part.begin, part.end);
    auto [x, y] = data_.Take(idx);
    if (spec_.augment.enabled() && x.dim() == 4) {
      x = Augment(spec_.augment, x, at::arange(part.begin, part.end, at::kLong),
                  static_cast<uint64_t>(spec_.seed), c.epoch);
    }
    at::Tensor out;
    {
      PrecisionScope precision(spec_.precision);
      out = state_.model->forward(x);
    }
    at::Tensor loss = LossSum(spec_.loss, out.to(at::kFloat), y);
    if (fault != 1.0) loss = loss * fault;
    local.loss_sum += loss.item<double>();
    (loss / static_cast<double>(batch.size())).backward();
  }
  local.compute_seconds = std::chrono::duration<double>(Clock::now() - t0).count();
  out.compute_seconds = local.compute_seconds;
  SPOT_ASSIGN_OR_RETURN(GlobalLoss global, sync.Sync(local));
  out.loss = global.mean();
  // Judge the loss before it touches the weights.
  out.anomaly = Judge(out.loss);
  if (!out.anomaly.empty()) return out;
  if (want_grad_norm) {
    double sq = 0;
    for (const at::Tensor& p : state_.model->parameters()) {
      if (p.grad().defined()) sq += p.grad().pow(2).sum().item<double>();
    }
    out.grad_norm = std::sqrt(sq);
  }
  state_.optimizer->step();
  const double alpha = 2.0 / (static_cast<double>(spec_.rollback.window) + 1);
  c.loss_ema = c.loss_ema_steps == 0 ? out.loss : c.loss_ema + alpha * (out.loss - c.loss_ema);
  ++c.loss_ema_steps;
  ++c.step;
  out.committed = true;
  return out;
}

BatchEnd StepRunner::Advance(Slice batch) {
  TrainerCounters& c = *state_.counters;
  BatchEnd e{.epoch = c.epoch};
  c.index_in_epoch = batch.end;
  e.epoch_done = batch.end == data_.size();
  if (e.epoch_done) {
    ++c.epoch;
    c.index_in_epoch = 0;
  }
  e.last = c.step == total_steps_ || (spec_.epochs > 0 && c.epoch == spec_.epochs);
  return e;
}

}  // namespace spot::train
