#include "train/step_runner.h"

#include <ATen/ATen.h>
#include <fmt/format.h>
#include <spdlog/spdlog.h>
#include <torch/nn/functional/loss.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <limits>

#include "train/augment.h"
#include "train/batch_prefetcher.h"
#include "train/folder_data.h"
#include "train/layer_precision.h"
#include "train/loss_scaler.h"
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

std::string OverflowText(const StepOutcome& o, const TrainerCounters& c) {
  return fmt::format(
      "step {}: a gradient overflowed at loss scale {:g}: update skipped, scale now {:g}", c.step,
      o.loss_scale, c.loss_scale);
}

std::string LayerGroupOf(const std::string& name) {
  const size_t last = name.rfind('.');
  if (last == std::string::npos) return "model";
  std::string module = name.substr(0, last);
  const size_t first = module.find('.');
  if (first != std::string::npos) {
    const size_t second = module.find('.', first + 1);
    if (second != std::string::npos) module.resize(second);
  }
  return module;
}

int64_t TotalSteps(const TrainSpec& spec, int64_t n) {
  if (spec.epochs <= 0) return spec.steps;
  // The spec bounds epochs; saturate all the same rather than wrap around.
  int64_t total = 0;
  if (__builtin_mul_overflow(spec.epochs, StepsPerEpoch(spec, n), &total)) {
    total = std::numeric_limits<int64_t>::max();
  }
  return spec.steps > 0 ? std::min(total, spec.steps) : total;
}

StepRunner::StepRunner(const TrainSpec& spec, const TensorSet& data, TrainRefs state)
    : spec_(spec),
      data_(data),
      state_(std::move(state)),
      steps_per_epoch_(StepsPerEpoch(spec, data.size())),
      total_steps_(TotalSteps(spec, data.size())),
      prefetch_(spec.PrefetchOn() ? std::make_unique<BatchPrefetcher>() : nullptr) {}

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
  if (data_.shards) {
    o = SlotOrder(seed, epoch, data_.size(), data_.shards->shard_size(), shard_slots());
  } else if (spec_.sampling == "shuffle") {
    o = EpochOrder(seed, epoch, data_.size());
  } else {
    const at::Tensor labels = data_.labels.contiguous();
    const std::vector<int64_t> l(labels.data_ptr<int64_t>(),
                                 labels.data_ptr<int64_t>() + labels.numel());
    o = ClassOrder(seed, epoch, l, spec_.sampling == "balanced");
  }
  if (!shard_owners_.empty()) ArrangeByOwner(o, spec_.batch_size, shard_size_, shard_owners_);
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

void StepRunner::PreparePrecision() {
  if (spec_.precision != "auto") return;
  LayerPrecision* lp = state_.model->layer_precision();
  if (lp == nullptr) return;  // the spec reader refuses auto for such models
  TrainerCounters& c = *state_.counters;
  if (!c.precision_chosen) {
    // The first batches in file order: the same whatever the epoch, the
    // world or a resume; measured without touching weights or generators.
    std::vector<at::Tensor> batches;
    const int64_t n = data_.size(), b = spec_.batch_size;
    for (int64_t k = 0; k < spec_.precision_options.probe_batches && k * b < n; ++k) {
      batches.push_back(data_.Range(k * b, std::min(n, (k + 1) * b)).first.to(spec_.device));
    }
    const std::vector<LayerError> errors = MeasureLayerErrors(*state_.model, batches);
    c.fp32_layers = Float32Layers(errors, spec_.precision_options.budget);
    c.precision_chosen = true;
    spdlog::info("{}", DescribeSelection(errors, c.fp32_layers, spec_.precision_options.budget));
  }
  if (lp->kept() != c.fp32_layers) lp->KeepFloat32(c.fp32_layers);
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

StepRunner::~StepRunner() = default;

void StepRunner::SetShardOwners(int64_t shard_size, std::vector<int32_t> owners, int own_rank) {
  shard_size_ = shard_size;
  shard_owners_ = std::move(owners);
  own_rank_ = shard_owners_.empty() ? -1 : own_rank;
  Reset();
}

int64_t StepRunner::shard_slots() const {
  if (!data_.shards) return 0;
  const int64_t size = data_.shards->shard_size();
  return ShardSlots((data_.size() + size - 1) / size, spec_.batch_size);
}

Slice StepRunner::OwnPart(Slice batch) {
  EnsureOrder();
  return OwnPartOfCurrentOrder(batch);
}

// The batch is arranged by owner: count the samples of lower ranks, then ours.
Slice StepRunner::OwnPartOfCurrentOrder(Slice batch) const {
  const int64_t* o = order_.data_ptr<int64_t>();
  auto owner = [&](int64_t p) { return shard_owners_[static_cast<size_t>(o[p] / shard_size_)]; };
  int64_t p = batch.begin;
  while (p < batch.end && owner(p) < own_rank_) ++p;
  Slice mine{p, p};
  while (mine.end < batch.end && owner(mine.end) == own_rank_) ++mine.end;
  return mine;
}

void StepRunner::Reset() {
  order_epoch_ = -1;
  if (prefetch_) prefetch_->Drop();
}

// Positions [part.begin, part.end) of this epoch's order: samples, targets,
// augmentation. Needs only immutable things (the order tensor of the epoch,
// the data), so it runs on the prefetch thread.
std::function<Batch()> StepRunner::BatchMaker(Slice part) const {
  return [this, order = order_, epoch = state_.counters->epoch, part]() -> Batch {
    auto [x, y] = data_.Take(order.slice(0, part.begin, part.end));
    if (spec_.augment.enabled() && x.dim() == 4) {
      x = Augment(spec_.augment, x, at::arange(part.begin, part.end, at::kLong),
                  static_cast<uint64_t>(spec_.seed), epoch);
    }
    return {x, y};
  };
}

Batch StepRunner::TakeBatch(Slice part) {
  if (!prefetch_) return BatchMaker(part)();
  return prefetch_->Take({state_.counters->epoch, part.begin, part.end}, BatchMaker(part));
}

void StepRunner::Prefetch(Slice part) {
  if (prefetch_ && part.size() > 0) {
    prefetch_->Start({state_.counters->epoch, part.begin, part.end}, BatchMaker(part));
  }
}

// The next global batch of this epoch split as this one was (the same offset
// and size in it), and that part's first micro-batch; empty at the epoch's
// end (its order is the next epoch's).
Slice StepRunner::PredictNextPart(Slice batch, Slice mine) const {
  const int64_t n = data_.size();
  if (batch.end >= n) return {};
  const Slice next = GlobalBatch(batch.end / spec_.batch_size, spec_.batch_size, n);
  const int64_t at = next.begin + (mine.begin - batch.begin);
  const Slice next_mine = own_rank_ >= 0 && next.size() > 0
                              ? OwnPartOfCurrentOrder(next)
                              : Slice{std::min(at, next.end), std::min(next.end, at + mine.size())};
  if (next_mine.size() == 0) return {};
  const int64_t micro = std::min<int64_t>(spec_.distributed.accumulation_steps, next_mine.size());
  return SplitBatch(next_mine, std::vector<double>(micro, 1.0))[0];
}

Result<StepOutcome> StepRunner::Run(Slice batch, Slice mine, GradientSync& sync,
                                    bool want_grad_norm) {
  using Clock = std::chrono::steady_clock;
  const auto t0 = Clock::now();
  EnsureOrder();
  PreparePrecision();
  TrainerCounters& c = *state_.counters;
  const bool scaling = spec_.precision == "fp16";
  const PrecisionOptions& amp = spec_.precision_options;
  const LossScale scale_state{c.loss_scale, c.loss_scale_growth_tracker};
  const double loss_scale = scaling ? CurrentLossScale(amp, scale_state) : 1.0;
  const at::Device device(spec_.device);
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
  // Ends the span that began at `from` (now the next one's start).
  auto span = [&out](StepPhase phase, Clock::time_point& from) {
    const Clock::time_point now = Clock::now();
    out.spans.push_back({phase, from, std::chrono::duration<double>(now - from).count()});
    from = now;
  };
  ReplicaLoss local{.samples = mine.size(), .batch = batch.size()};
  const int64_t micro =
      std::min<int64_t>(spec_.distributed.accumulation_steps, std::max<int64_t>(1, mine.size()));
  const std::vector<Slice> parts = SplitBatch(mine, std::vector<double>(micro, 1.0));
  for (size_t i = 0; i < parts.size(); ++i) {
    const Slice& part = parts[i];
    if (part.size() == 0) continue;
    at::manual_seed(static_cast<uint64_t>(spec_.seed) * 1000003u +
                    static_cast<uint64_t>(c.step) * 8191u + static_cast<uint64_t>(part.begin));
    Clock::time_point at = Clock::now();
    auto [x, y] = TakeBatch(part);
    // While this part computes: the next part, or the next step's first.
    Prefetch(i + 1 < parts.size() ? parts[i + 1] : PredictNextPart(batch, mine));
    x = x.to(device);
    y = y.to(device);
    span(StepPhase::kData, at);
    at::Tensor logits;
    {
      PrecisionScope precision(spec_.precision, spec_.device);
      logits = state_.model->forward(x);
    }
    at::Tensor loss = LossSum(spec_.loss, logits.to(at::kFloat), y);
    if (fault != 1.0) loss = loss * fault;
    local.loss_sum += loss.item<double>();
    span(StepPhase::kForward, at);
    at::Tensor objective = loss / static_cast<double>(batch.size());
    // fp16: scaled so that small gradients do not flush to zero in half precision.
    if (scaling) objective = objective * loss_scale;
    objective.backward();
    span(StepPhase::kBackward, at);
  }
  local.compute_seconds = std::chrono::duration<double>(Clock::now() - t0).count();
  out.compute_seconds = local.compute_seconds;
  Clock::time_point at = Clock::now();
  SPOT_ASSIGN_OR_RETURN(GlobalLoss global, sync.Sync(local));
  span(StepPhase::kSync, at);
  out.loss = global.mean();
  // Judge the loss before it touches the weights.
  out.anomaly = Judge(out.loss);
  if (!out.anomaly.empty()) return out;
  if (scaling) {
    // After the sync every replica holds the same gradients: the same verdict.
    out.overflow = UnscaleGradients(state_.model->parameters(), loss_scale);
    const LossScale next = NextLossScale(amp, scale_state, out.overflow);
    c.loss_scale = next.scale;
    c.loss_scale_growth_tracker = next.growth_tracker;
    out.loss_scale = loss_scale;
  }
  // Layer groups: gradients now, weights before and after the update.
  struct Group {
    std::vector<std::pair<at::Tensor, at::Tensor>> params;  // (parameter, its weights before)
    double grad_sq = 0, weight_sq = 0;
  };
  std::vector<std::pair<std::string, Group>> groups;
  if (layer_stats_every_ > 0 && c.step % layer_stats_every_ == 0) {
    at::NoGradGuard no_grad;
    for (const auto& item : state_.model->named_parameters()) {
      const std::string g = LayerGroupOf(item.key());
      auto it = std::find_if(groups.begin(), groups.end(),
                             [&](const auto& entry) { return entry.first == g; });
      if (it == groups.end()) it = groups.insert(groups.end(), {g, Group{}});
      Group& group = it->second;
      const at::Tensor& p = item.value();
      if (p.grad().defined()) group.grad_sq += p.grad().to(at::kDouble).pow(2).sum().item<double>();
      group.weight_sq += p.to(at::kDouble).pow(2).sum().item<double>();
      group.params.push_back({p, p.detach().clone()});
    }
  }
  if (want_grad_norm) {
    double sq = 0;
    for (const at::Tensor& p : state_.model->parameters()) {
      if (p.grad().defined()) sq += p.grad().pow(2).sum().item<double>();
    }
    out.grad_norm = std::sqrt(sq);
  }
  // An overflowed step is counted (the schedule moves on, as with PyTorch's
  // GradScaler) but leaves the weights and the optimizer's state unchanged.
  if (!out.overflow) state_.optimizer->step();
  span(StepPhase::kOptimizer, at);
  for (auto& [name, group] : groups) {
    at::NoGradGuard no_grad;
    double update_sq = 0;
    for (const auto& [p, before] : group.params) {
      update_sq += (p.detach() - before).to(at::kDouble).pow(2).sum().item<double>();
    }
    const double w = std::sqrt(group.weight_sq);
    out.layers.push_back({.group = name,
                          .grad_norm = std::sqrt(group.grad_sq),
                          .weight_norm = w,
                          .update_ratio = w > 0 ? std::sqrt(update_sq) / w : 0});
  }
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
