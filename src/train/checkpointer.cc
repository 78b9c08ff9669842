#include "train/checkpointer.h"

#include <ATen/CPUGeneratorImpl.h>
#include <ATen/core/Generator.h>
#include <ATen/core/grad_mode.h>
#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <filesystem>
#include <limits>
#include <mutex>
#include <nlohmann/json.hpp>

#include "ckpt/interval.h"
#include "ckpt/store.h"
#include "ckpt/torch_adapter.h"
#include "core/clock.h"
#include "core/file_io.h"
#include "train/model.h"
#include "train/train_setup.h"
#include "train/train_state.h"

namespace spot::train {
namespace {

double Seconds(Checkpointer::Clock::time_point a, Checkpointer::Clock::time_point b) {
  return std::chrono::duration<double>(b - a).count();
}

// Gives `model` the weights a fresh start gives it: PrepareProcess seeds the
// CPU generator with spec.seed and BuildModel draws the initial weights from
// it. The generator is left as it was, so the run goes on exactly as one that
// found no checkpoint.
Status Reinitialize(const TrainSpec& spec, const std::vector<int64_t>& shape, Net& model) {
  at::Generator gen = at::detail::getDefaultCPUGenerator();
  at::Tensor state;
  {
    std::lock_guard<std::mutex> lock(gen.mutex());
    state = gen.get_state();
    gen.set_current_seed(static_cast<uint64_t>(spec.seed));
  }
  auto fresh = BuildModel(spec, shape);
  {
    std::lock_guard<std::mutex> lock(gen.mutex());
    gen.set_state(state);
  }
  if (!fresh.ok()) return fresh.status().WithContext("re-initializing the model");
  at::NoGradGuard no_grad;
  auto copy = [](const auto& from, const auto& to) -> Status {
    for (const auto& item : to) {
      const at::Tensor* src = from.find(item.key());
      if (src == nullptr || !src->sizes().equals(item.value().sizes())) {
        return InternalError("re-initializing the model: no fresh " + item.key());
      }
      item.value().copy_(*src);
    }
    return Status::Ok();
  };
  SPOT_RETURN_IF_ERROR(copy((*fresh)->named_parameters(), model.named_parameters()));
  return copy((*fresh)->named_buffers(), model.named_buffers());
}

}  // namespace

struct Checkpointer::Impl {
  TrainSpec spec;
  std::unique_ptr<ckpt::CheckpointStore> store;
  std::unique_ptr<ckpt::AsyncSaver> saver;
  std::optional<ckpt::IntervalPolicy> interval;
  int64_t parent_version = -1;
  Clock::time_point last_save_time = Clock::now();
  // A second divergence before passing the first one rolls back further than
  // the version restored the first time.
  int64_t last_anomaly_step = -1;
  int64_t last_restored_step = -1;

  Status AppendEvent(const nlohmann::json& event) const;
};

Status Checkpointer::Impl::AppendEvent(const nlohmann::json& event) const {
  std::string path = (std::filesystem::path(spec.output_dir) / "events.jsonl").string();
  SPOT_ASSIGN_OR_RETURN(AppendLog log, AppendLog::Open(path));
  log.Append(event.dump() + "\n");
  return log.Sync();
}

Status RollbackAllowed(const RollbackSpec& rb, int64_t rollbacks_so_far, const std::string& reason,
                       int64_t at_step) {
  if (!rb.enabled) return DataLossError(fmt::format("{} at step {}", reason, at_step));
  if (rollbacks_so_far >= rb.max_rollbacks) {
    return DataLossError(fmt::format("{} at step {}, after {} rollbacks (rollback.max_rollbacks)",
                                     reason, at_step, rollbacks_so_far));
  }
  return Status::Ok();
}

Checkpointer::Checkpointer(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Checkpointer::~Checkpointer() = default;

Result<std::unique_ptr<Checkpointer>> Checkpointer::Open(const TrainSpec& spec) {
  auto m = std::make_unique<Impl>();
  m->spec = spec;
  const CheckpointSpec& ck = spec.checkpoint;
  SPOT_ASSIGN_OR_RETURN(
      m->store,
      ckpt::CheckpointStore::Open({.dir = ck.dir,
                                   .durable_dir = ck.durable_dir,
                                   .retention = RetentionFor(ck),
                                   .durable_max_chain = static_cast<int>(ck.durable_max_chain)}));
  m->saver = std::make_unique<ckpt::AsyncSaver>(
      m->store.get(), ckpt::AsyncSaverOptions{.delta = ck.delta != "none",
                                              .full_every = static_cast<int>(ck.full_every)});
  if (ck.interval == "auto") {
    m->interval.emplace(
        ckpt::IntervalOptions{.mtbf_s = ck.mtbf_hours * 3600, .max_overhead = ck.max_overhead});
    // The save cost the job's previous writer measured, from its newest
    // version: a replacement worker saves on schedule from its first step.
    std::vector<ckpt::VersionInfo> versions = m->store->List();
    if (!versions.empty()) {
      auto meta = nlohmann::json::parse(versions.front().meta_json, nullptr, false);
      if (meta.is_object() && meta.contains("save_cost_s") && meta["save_cost_s"].is_number()) {
        m->interval->Seed(meta["save_cost_s"].get<double>());
      }
    }
  }
  return std::unique_ptr<Checkpointer>(new Checkpointer(std::move(m)));
}

bool Checkpointer::Due(int64_t step) const {
  if (step == last_saved_step_) return false;
  const Impl& m = *impl_;
  return ckpt::SaveDue(m.interval ? &*m.interval : nullptr, m.spec.checkpoint.interval_steps, step,
                       Seconds(m.last_save_time, Clock::now()));
}

Result<double> Checkpointer::Save(const TrainRefs& s, std::optional<double> test_loss) {
  Impl& m = *impl_;
  const auto t0 = Clock::now();
  const TrainerCounters& c = *s.counters;
  SPOT_ASSIGN_OR_RETURN(ckpt::Container * box, m.saver->Acquire());
  box->Recycle();
  SPOT_RETURN_IF_ERROR(CaptureTrainState(*s.model, *s.optimizer, s.optimizer_type, c, box));
  nlohmann::json meta = {{"epoch", c.epoch},
                         {"index_in_epoch", c.index_in_epoch},
                         {"test_accuracy", c.last_test_accuracy}};
  if (test_loss) meta["test_loss"] = *test_loss;
  if (c.rollbacks > 0) meta["rollbacks"] = c.rollbacks;
  if (m.interval && m.interval->CostSeconds() > 0) {
    meta["save_cost_s"] = m.interval->CostSeconds();
  }
  m.parent_version = m.saver->Submit(box, {.step = c.step,
                                           .parent = m.parent_version,
                                           .meta_json = meta.dump(),
                                           .plan = CodecPlanFor(m.spec.checkpoint)});
  if (!m.spec.checkpoint.async) SPOT_RETURN_IF_ERROR(m.saver->Flush());
  m.last_save_time = Clock::now();
  const double blocking = Seconds(t0, m.last_save_time);
  if (m.interval) m.interval->RecordSave(blocking);
  last_saved_step_ = c.step;
  return blocking;
}

void Checkpointer::RecordStep(double seconds, bool during_save) {
  if (impl_->interval) impl_->interval->RecordStep(seconds, during_save);
}

bool Checkpointer::busy() const { return impl_->saver->busy(); }

Status Checkpointer::Flush(std::optional<Clock::time_point> deadline) {
  return deadline ? impl_->saver->Flush(*deadline) : impl_->saver->Flush();
}

std::vector<ckpt::SaveReport> Checkpointer::TakeCompleted() {
  return impl_->saver->TakeCompleted();
}

Result<ResumeInfo> Checkpointer::Resume(const TrainRefs& s) {
  Impl& m = *impl_;
  // The parameters and buffers decode straight into the model's tensors (no
  // copy), when a failed read can be undone: a read that fails leaves them
  // holding garbage, and when no version loads the model is then built again
  // as a fresh start builds it.
  std::optional<ckpt::TensorPlacement> place;
  // A TorchScript module is not rebuilt here (its checks need the data).
  const bool rebuildable = !s.sample_shape.empty() && m.spec.model != "torchscript";
  if (rebuildable && !m.store->Empty()) {
    place.emplace();
    for (const auto& p : s.model->named_parameters()) place->Add("model/" + p.key(), p.value());
    for (const auto& b : s.model->named_buffers()) place->Add("model/" + b.key(), b.value());
  }
  auto loaded = m.store->LoadNewestValid(std::numeric_limits<int64_t>::max(),
                                         place ? place->place() : nullptr);
  if (!loaded.ok() && place) {
    SPOT_RETURN_IF_ERROR(Reinitialize(m.spec, s.sample_shape, *s.model));
  }
  if (!loaded.ok()) {
    if (loaded.status().code() != StatusCode::kNotFound) return loaded.status();
    if (m.store->Empty()) {
      spdlog::info("no checkpoint in {}; starting fresh", m.store->dir());
    } else {
      spdlog::warn("{}", loaded.status().message());
      spdlog::warn("no valid checkpoint; starting fresh");
    }
    return ResumeInfo{};
  }
  for (const std::string& why : loaded->skipped) spdlog::warn("skipping checkpoint: {}", why);
  auto restored = RestoreTrainState(loaded->container, *s.model, *s.optimizer, s.optimizer_type);
  if (!restored.ok()) {
    return restored.status().WithContext(
        fmt::format("resuming from checkpoint {}", loaded->info.id));
  }
  const TrainerCounters& c = *restored;
  const TrainSpec& spec = m.spec;
  if (c.model != ModelName(spec) || c.batch_size != spec.batch_size || c.seed != spec.seed) {
    return FailedPreconditionError(fmt::format(
        "{}: checkpoint {} was made by a different job (model {}, batch_size {}, seed {}); this "
        "job has model {}, batch_size {}, seed {}: use another checkpoint.dir or resume: never",
        m.store->dir(), loaded->info.id, c.model, c.batch_size, c.seed, ModelName(spec),
        spec.batch_size, spec.seed));
  }
  TrainerCounters& now = *s.counters;
  if (c.threads != now.threads || c.blas != now.blas) {
    spdlog::warn(
        "checkpoint was made with {} threads and BLAS {}; this run has {} and {}: "
        "training continues, but not bit-for-bit",
        c.threads, c.blas, now.threads, now.blas);
  }
  const int threads = now.threads;
  const std::string blas = now.blas;
  now = c;
  now.threads = threads;
  now.blas = blas;
  m.parent_version = loaded->info.id;
  last_saved_step_ = c.step;
  ResumeInfo r{.version = loaded->info.id,
               .step = c.step,
               .tier = loaded->info.tiers.empty()
                           ? "local"
                           : std::string(ckpt::TierName(loaded->info.tiers[0]))};
  spdlog::info("resuming from checkpoint {} ({} tier; step {}, epoch {}, sample {} of the epoch)",
               r.version, r.tier, c.step, c.epoch, c.index_in_epoch);
  return r;
}

Result<RollbackEvent> Checkpointer::Rollback(const TrainRefs& s, int64_t batch,
                                             const std::string& reason) {
  Impl& m = *impl_;
  const RollbackSpec& rb = m.spec.rollback;
  TrainerCounters& counters = *s.counters;
  const int64_t at_step = counters.step + 1;
  SPOT_RETURN_IF_ERROR(RollbackAllowed(rb, counters.rollbacks, reason, at_step));
  // Every version written so far must be visible before choosing one.
  SPOT_RETURN_IF_ERROR(m.saver->Flush());
  int64_t before = at_step;
  if (m.last_anomaly_step >= 0 && at_step <= m.last_anomaly_step) before = m.last_restored_step;
  auto loaded = m.store->LoadNewestValid(before);
  if (!loaded.ok()) {
    return DataLossError(
        fmt::format("{} at step {}, and no checkpoint before step {} to roll back to", reason,
                    at_step, before));
  }
  for (const std::string& why : loaded->skipped) spdlog::warn("skipping checkpoint: {}", why);
  const TrainerCounters now = counters;
  SPOT_ASSIGN_OR_RETURN(TrainerCounters c, RestoreTrainState(loaded->container, *s.model,
                                                             *s.optimizer, s.optimizer_type));
  std::vector<int64_t> skipped = now.skipped_batches;
  for (int64_t k = 0; k < rb.skip_batches; ++k) skipped.push_back(batch + k);
  std::sort(skipped.begin(), skipped.end());
  skipped.erase(std::unique(skipped.begin(), skipped.end()), skipped.end());
  counters = c;
  counters.threads = now.threads;
  counters.blas = now.blas;
  counters.rollbacks = now.rollbacks + 1;
  counters.lr_scale = now.lr_scale * rb.lr_factor;
  counters.skipped_batches = std::move(skipped);
  m.parent_version = loaded->info.id;
  m.last_anomaly_step = std::max(m.last_anomaly_step, at_step);
  m.last_restored_step = c.step;
  last_saved_step_ = c.step;
  RollbackEvent e{.at_step = at_step,
                  .batch = batch,
                  .reason = reason,
                  .restored_version = loaded->info.id,
                  .restored_step = c.step,
                  .lr_scale = counters.lr_scale};
  spdlog::warn(
      "{} at step {}: rolled back to checkpoint {} (step {}); skipping batch{} {}{}, "
      "learning rate x{:g}",
      reason, at_step, e.restored_version, e.restored_step, rb.skip_batches > 1 ? "es" : "", batch,
      rb.skip_batches > 1 ? fmt::format("-{}", batch + rb.skip_batches - 1) : "",
      counters.lr_scale);
  SPOT_RETURN_IF_ERROR(m.AppendEvent({{"event", "rollback"},
                                      {"at_step", e.at_step},
                                      {"batch", e.batch},
                                      {"reason", e.reason},
                                      {"restored_version", e.restored_version},
                                      {"restored_step", e.restored_step},
                                      {"skipped_batches", counters.skipped_batches},
                                      {"lr_scale", e.lr_scale},
                                      {"unix_ms", RealClock()->NowUnixMs()}}));
  return e;
}

double Checkpointer::MeasuredOverhead() const {
  return impl_->interval ? impl_->interval->MeasuredOverhead() : 0;
}
double Checkpointer::IntervalSeconds() const {
  return impl_->interval ? impl_->interval->IntervalSeconds() : 0;
}
bool Checkpointer::has_interval() const { return impl_->interval.has_value(); }

}  // namespace spot::train
