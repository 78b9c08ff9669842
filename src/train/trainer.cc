#include "train/trainer.h"

#include <ATen/Parallel.h>
#include <fmt/format.h>
#include <signal.h>
#include <spdlog/spdlog.h>
#include <torch/nn/functional/loss.h>
#include <torch/optim/adam.h>
#include <torch/optim/sgd.h>
#include <torch/utils.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <limits>
#include <nlohmann/json.hpp>
#include <set>

#include "ckpt/async_saver.h"
#include "ckpt/interval.h"
#include "ckpt/store.h"
#include "core/file_io.h"
#include "core/job_files.h"
#include "core/progress.h"
#include "train/fashion_mnist.h"
#include "train/lr_schedule.h"
#include "train/model.h"
#include "train/sampler.h"
#include "train/state_dict_export.h"
#include "train/train_setup.h"
#include "train/train_state.h"

namespace spot::train {
namespace {

using Clock = std::chrono::steady_clock;

double Seconds(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double>(b - a).count();
}

// Signals, set by the handlers and polled once per step.
std::atomic<int> g_stop_signal{0};
std::atomic<bool> g_checkpoint_request{false};

extern "C" void OnStopSignal(int sig) { g_stop_signal.store(sig); }
extern "C" void OnCheckpointSignal(int) { g_checkpoint_request.store(true); }

// Installs the handlers for its lifetime.
class SignalScope {
 public:
  explicit SignalScope(bool enabled) : enabled_(enabled) {
    if (!enabled_) return;
    g_stop_signal = 0;
    g_checkpoint_request = false;
    struct sigaction sa {};
    sa.sa_handler = OnStopSignal;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGTERM, &sa, &old_term_);
    sigaction(SIGINT, &sa, &old_int_);
    sa.sa_handler = OnCheckpointSignal;
    sigaction(SIGUSR1, &sa, &old_usr1_);
  }
  ~SignalScope() {
    if (!enabled_) return;
    sigaction(SIGTERM, &old_term_, nullptr);
    sigaction(SIGINT, &old_int_, nullptr);
    sigaction(SIGUSR1, &old_usr1_, nullptr);
  }

 private:
  bool enabled_;
  struct sigaction old_term_ {
  }, old_int_{}, old_usr1_{};
};

}  // namespace

struct Trainer::Impl {
  TrainSpec spec;
  TrainOptions opt;
  TensorSet train, test;
  std::shared_ptr<Net> model;
  std::unique_ptr<torch::optim::Optimizer> optimizer;
  std::unique_ptr<ckpt::CheckpointStore> store;
  std::unique_ptr<ckpt::AsyncSaver> saver;
  std::optional<ckpt::IntervalPolicy> interval;
  TrainerCounters counters;
  std::set<int64_t> skipped;  // counters.skipped_batches, for lookup
  int64_t parent_version = -1;
  int64_t last_saved_step = -1;
  Clock::time_point last_save_time;
  // Rollback bookkeeping: a second divergence before passing the first one
  // rolls back further than the version restored the first time.
  int64_t last_anomaly_step = -1;
  int64_t last_restored_step = -1;
  int64_t steps_per_epoch = 0;
  int64_t total_steps = 0;
  std::FILE* step_log = nullptr;
  TrainSummary summary;

  ~Impl() {
    if (step_log) std::fclose(step_log);
  }

  Status Setup();
  Status MaybeResume();
  Status SaveCheckpoint();
  void CollectSaveReports();
  Status Rollback(int64_t batch, const std::string& reason);
  Status AppendEvent(const nlohmann::json& event);
  EpochResult Evaluate();
  Status TrainLoop();
  Status Stop(int sig);
  Status WriteOutputs();
  int64_t GlobalBatch() const {
    return counters.epoch * steps_per_epoch + counters.index_in_epoch / spec.batch_size;
  }
};

Status Trainer::Impl::Setup() {
  int threads = PrepareProcess(spec);
  model = MakeModel(spec.model);
  if (!model) return InvalidArgumentError("unknown model " + spec.model);
  optimizer = MakeOptimizer(spec.optimizer, *model);

  counters.seed = spec.seed;
  counters.batch_size = spec.batch_size;
  counters.model = spec.model;
  counters.optimizer = spec.optimizer.type;
  counters.threads = threads;
  counters.blas = BlasLibrary();

  steps_per_epoch = (train.size() + spec.batch_size - 1) / spec.batch_size;
  total_steps = spec.epochs > 0 ? spec.epochs * steps_per_epoch : spec.steps;
  if (spec.steps > 0) total_steps = std::min(total_steps, spec.steps);

  SPOT_RETURN_IF_ERROR(CreateDirectories(spec.output_dir));
  const CheckpointSpec& ck = spec.checkpoint;
  SPOT_ASSIGN_OR_RETURN(
      store, ckpt::CheckpointStore::Open(
                 {.dir = ck.dir, .durable_dir = ck.durable_dir, .retention = RetentionFor(ck)}));
  saver = std::make_unique<ckpt::AsyncSaver>(
      store.get(), ckpt::AsyncSaverOptions{.delta = ck.delta != "none",
                                           .full_every = static_cast<int>(ck.full_every)});
  if (ck.interval == "auto") {
    interval.emplace(
        ckpt::IntervalOptions{.mtbf_s = ck.mtbf_hours * 3600, .max_overhead = ck.max_overhead});
  }
  if (!opt.step_log_path.empty()) {
    step_log = std::fopen(opt.step_log_path.c_str(), "a");
    if (!step_log) return UnavailableError("cannot open step log " + opt.step_log_path);
    std::setvbuf(step_log, nullptr, _IOLBF, 1 << 12);  // whole lines, as they happen
  }
  return Status::Ok();
}

Status Trainer::Impl::MaybeResume() {
  if (spec.resume == "never") {
    spdlog::info("resume: never; starting fresh");
    return Status::Ok();
  }
  auto loaded = store->LoadNewestValid();
  if (!loaded.ok()) {
    if (loaded.status().code() != StatusCode::kNotFound) return loaded.status();
    if (store->Empty()) {
      spdlog::info("no checkpoint in {}; starting fresh", store->dir());
    } else {
      spdlog::warn("{}", loaded.status().message());
      spdlog::warn("no valid checkpoint; starting fresh");
    }
    return Status::Ok();
  }
  for (const std::string& why : loaded->skipped) spdlog::warn("skipping checkpoint: {}", why);
  auto restored = RestoreTrainState(loaded->container, *model, *optimizer, spec.optimizer.type);
  if (!restored.ok()) {
    return restored.status().WithContext(
        fmt::format("resuming from checkpoint {}", loaded->info.id));
  }
  const TrainerCounters& c = *restored;
  if (c.model != spec.model || c.batch_size != spec.batch_size || c.seed != spec.seed) {
    return FailedPreconditionError(fmt::format(
        "{}: checkpoint {} was made by a different job (model {}, batch_size {}, seed {}); this "
        "job has model {}, batch_size {}, seed {}: use another checkpoint.dir or resume: never",
        store->dir(), loaded->info.id, c.model, c.batch_size, c.seed, spec.model, spec.batch_size,
        spec.seed));
  }
  if (c.threads != counters.threads || c.blas != counters.blas) {
    spdlog::warn(
        "checkpoint was made with {} threads and BLAS {}; this run has {} and {}: "
        "training continues, but not bit-for-bit",
        c.threads, c.blas, counters.threads, counters.blas);
  }
  int threads = counters.threads;
  std::string blas = counters.blas;
  counters = c;
  counters.threads = threads;
  counters.blas = blas;
  skipped = {c.skipped_batches.begin(), c.skipped_batches.end()};
  parent_version = loaded->info.id;
  last_saved_step = c.step;
  summary.resumed_from_step = c.step;
  summary.resumed_from_version = loaded->info.id;
  std::string tier =
      loaded->info.tiers.empty() ? "local" : std::string(ckpt::TierName(loaded->info.tiers[0]));
  spdlog::info("resuming from checkpoint {} ({} tier; step {}, epoch {}, sample {} of the epoch)",
               loaded->info.id, tier, c.step, c.epoch, c.index_in_epoch);
  return Status::Ok();
}

void Trainer::Impl::CollectSaveReports() {
  for (const ckpt::SaveReport& r : saver->TakeCompleted()) {
    ++summary.checkpoints_saved;
    summary.checkpoint_write_seconds += r.write_s;
    summary.checkpoint_bytes += r.info.file_bytes;
    summary.checkpoint_payload_bytes += r.info.payload_bytes;
    if (r.info.base >= 0) ++summary.delta_checkpoints;
    summary.last_checkpoint_version = r.info.id;
    spdlog::debug("checkpoint {} at step {}: {} of {} bytes ({}), written in {:.1f} ms", r.info.id,
                  r.info.step, r.info.file_bytes, r.info.payload_bytes, r.info.codecs,
                  r.write_s * 1e3);
  }
}

Status Trainer::Impl::SaveCheckpoint() {
  auto t0 = Clock::now();
  SPOT_ASSIGN_OR_RETURN(ckpt::Container * c, saver->Acquire());
  c->Recycle();
  counters.skipped_batches.assign(skipped.begin(), skipped.end());
  SPOT_RETURN_IF_ERROR(CaptureTrainState(*model, *optimizer, spec.optimizer.type, counters, c));
  nlohmann::json meta = {{"epoch", counters.epoch},
                         {"index_in_epoch", counters.index_in_epoch},
                         {"test_accuracy", counters.last_test_accuracy}};
  if (!summary.epochs.empty() && summary.epochs.back().step == counters.step) {
    meta["test_loss"] = summary.epochs.back().test_loss;
  }
  if (counters.rollbacks > 0) meta["rollbacks"] = counters.rollbacks;
  parent_version = saver->Submit(c, {.step = counters.step,
                                     .parent = parent_version,
                                     .meta_json = meta.dump(),
                                     .plan = CodecPlanFor(spec.checkpoint)});
  if (!spec.checkpoint.async) SPOT_RETURN_IF_ERROR(saver->Flush());
  double blocking = Seconds(t0, Clock::now());
  summary.checkpoint_seconds += blocking;
  if (interval) interval->RecordSave(blocking);
  last_saved_step = counters.step;
  last_save_time = Clock::now();
  CollectSaveReports();
  return Status::Ok();
}

Status Trainer::Impl::AppendEvent(const nlohmann::json& event) {
  std::string path = (std::filesystem::path(spec.output_dir) / "events.jsonl").string();
  std::FILE* f = std::fopen(path.c_str(), "a");
  if (!f) return UnavailableError("cannot append to " + path);
  std::string line = event.dump() + "\n";
  bool ok = std::fwrite(line.data(), 1, line.size(), f) == line.size();
  ok = std::fflush(f) == 0 && ok;
  ok = ::fsync(::fileno(f)) == 0 && ok;
  std::fclose(f);
  return ok ? Status::Ok() : UnavailableError("writing " + path);
}

Status Trainer::Impl::Rollback(int64_t batch, const std::string& reason) {
  const RollbackSpec& rb = spec.rollback;
  int64_t at_step = counters.step + 1;
  if (!rb.enabled) return AbortedError(fmt::format("{} at step {}", reason, at_step));
  if (counters.rollbacks >= rb.max_rollbacks) {
    return AbortedError(fmt::format("{} at step {}, after {} rollbacks (rollback.max_rollbacks)",
                                    reason, at_step, counters.rollbacks));
  }
  // Every version written so far must be visible before choosing one.
  SPOT_RETURN_IF_ERROR(saver->Flush());
  CollectSaveReports();
  int64_t before = at_step;
  if (last_anomaly_step >= 0 && at_step <= last_anomaly_step) before = last_restored_step;
  auto loaded = store->LoadNewestValid(before);
  if (!loaded.ok()) {
    return AbortedError(
        fmt::format("{} at step {}, and no checkpoint before step {} to roll "
                    "back to",
                    reason, at_step, before));
  }
  TrainerCounters now = counters;
  SPOT_ASSIGN_OR_RETURN(TrainerCounters c, RestoreTrainState(loaded->container, *model, *optimizer,
                                                             spec.optimizer.type));
  for (int64_t k = 0; k < rb.skip_batches; ++k) skipped.insert(batch + k);
  counters = c;
  counters.threads = now.threads;
  counters.blas = now.blas;
  counters.rollbacks = now.rollbacks + 1;
  counters.lr_scale = now.lr_scale * rb.lr_factor;
  counters.skipped_batches.assign(skipped.begin(), skipped.end());
  parent_version = loaded->info.id;
  last_anomaly_step = std::max(last_anomaly_step, at_step);
  last_restored_step = c.step;
  RollbackEvent e{.at_step = at_step,
                  .batch = batch,
                  .reason = reason,
                  .restored_version = loaded->info.id,
                  .restored_step = c.step,
                  .lr_scale = counters.lr_scale};
  summary.rollbacks.push_back(e);
  spdlog::warn(
      "{} at step {}: rolled back to checkpoint {} (step {}); skipping batch{} {}{}, "
      "learning rate x{:g}",
      reason, at_step, e.restored_version, e.restored_step, rb.skip_batches > 1 ? "es" : "", batch,
      rb.skip_batches > 1 ? fmt::format("-{}", batch + rb.skip_batches - 1) : "",
      counters.lr_scale);
  return AppendEvent({{"event", "rollback"},
                      {"at_step", e.at_step},
                      {"batch", e.batch},
                      {"reason", e.reason},
                      {"restored_version", e.restored_version},
                      {"restored_step", e.restored_step},
                      {"skipped_batches", counters.skipped_batches},
                      {"lr_scale", e.lr_scale},
                      {"unix_ms", std::chrono::duration_cast<std::chrono::milliseconds>(
                                      std::chrono::system_clock::now().time_since_epoch())
                                      .count()}});
}

EpochResult Trainer::Impl::Evaluate() {
  EvalSums e = EvaluateRange(*model, test, 0, test.size(), spec.eval_batch_size);
  EpochResult r;  // the caller sets r.epoch: it knows whether the epoch ended
  r.step = counters.step;
  r.test_accuracy = e.correct / e.count;
  r.test_loss = e.loss_sum / e.count;
  return r;
}

Status Trainer::Impl::Stop(int sig) {
  summary.stopped_by_signal = sig;
  spdlog::warn("{}: saving a checkpoint at step {} and stopping", strsignal(sig), counters.step);
  if (last_saved_step != counters.step) SPOT_RETURN_IF_ERROR(SaveCheckpoint());
  auto deadline =
      Clock::now() + std::chrono::duration_cast<Clock::duration>(
                         std::chrono::duration<double>(spec.checkpoint.flush_deadline_s));
  Status st = saver->Flush(deadline);
  CollectSaveReports();
  return st;
}

Status Trainer::Impl::TrainLoop() {
  model->train();
  Progress progress({.label = "train",
                     .total = total_steps,
                     .start = counters.step,
                     .log_interval_s = opt.log_interval_s,
                     .force_plain = opt.plain_progress});
  const int64_t n = train.size();
  const int64_t b = spec.batch_size;
  const int64_t nan_batch = spec.faults.nan_loss_at_step - 1;  // -1: no fault
  const int64_t spike_batch = spec.faults.spike_loss_at_step - 1;
  const RollbackSpec& rb = spec.rollback;
  const double ema_alpha = 2.0 / (static_cast<double>(rb.window) + 1);
  at::Tensor order;
  int64_t order_epoch = -1;
  at::Tensor x = at::empty({b, 1, train.images.size(2), train.images.size(3)});
  at::Tensor y = at::empty({b}, at::kLong);
  double train_seconds = 0;
  int64_t train_samples = 0;
  float loss_value = 0;
  double lr = 0;
  auto& groups = optimizer->param_groups();
  last_save_time = Clock::now();
  // A fresh run with rollback on saves its initial state: something to roll back to.
  if (rb.enabled && last_saved_step < 0) SPOT_RETURN_IF_ERROR(SaveCheckpoint());

  // Moves past the batch [begin, end): epoch accounting and evaluation.
  auto finish_batch = [&](int64_t end) {
    counters.index_in_epoch = end;
    bool epoch_done = end == n;
    if (epoch_done) {
      ++counters.epoch;
      counters.index_in_epoch = 0;
    }
    bool last = counters.step == total_steps || (spec.epochs > 0 && counters.epoch == spec.epochs);
    if (epoch_done || last) {
      EpochResult r = Evaluate();
      r.epoch = epoch_done ? counters.epoch - 1 : counters.epoch;
      counters.last_test_accuracy = r.test_accuracy;
      summary.epochs.push_back(r);
      if (progress.terminal()) std::fputs("\r\033[K", stderr);
      spdlog::info("epoch {}{} step {}: test accuracy {:.2f}%, test loss {:.4f}", r.epoch + 1,
                   epoch_done ? "" : " (partial)", r.step, r.test_accuracy * 100, r.test_loss);
    }
    return epoch_done;
  };

  while (counters.step < total_steps && (spec.epochs == 0 || counters.epoch < spec.epochs)) {
    if (int sig = g_stop_signal.load(); sig != 0) return Stop(sig);
    if (g_checkpoint_request.exchange(false) && last_saved_step != counters.step) {
      spdlog::info("checkpoint requested (SIGUSR1) at step {}", counters.step);
      SPOT_RETURN_IF_ERROR(SaveCheckpoint());
    }
    auto t0 = Clock::now();
    // A step is "during a save" when a write is pending at its start or end.
    const bool saving_at_start = interval && saver->busy();
    if (order_epoch != counters.epoch) {
      std::vector<int64_t> o = EpochOrder(static_cast<uint64_t>(spec.seed), counters.epoch, n);
      order = at::from_blob(o.data(), {n}, at::kLong).clone();
      order_epoch = counters.epoch;
    }
    int64_t begin = counters.index_in_epoch;
    int64_t end = std::min(n, begin + b);
    const int64_t batch = GlobalBatch();
    if (skipped.count(batch)) {
      finish_batch(end);
      continue;
    }
    at::Tensor idx = order.slice(0, begin, end);
    if (x.size(0) != end - begin) {
      x.resize_({end - begin, x.size(1), x.size(2), x.size(3)});
      y.resize_({end - begin});
    }
    at::index_select_out(x, train.images, 0, idx);
    at::index_select_out(y, train.labels, 0, idx);

    lr = LearningRate(spec.schedule, spec.optimizer.lr, counters.step, total_steps) *
         counters.lr_scale;
    for (auto& g : groups) g.options().set_lr(lr);
    optimizer->zero_grad();
    at::Tensor loss = at::cross_entropy_loss(model->forward(x), y);
    if (batch == nan_batch) loss = loss * std::numeric_limits<float>::quiet_NaN();
    if (batch == spike_batch) loss = loss * 1000;
    loss_value = loss.item<float>();
    // Judge the loss before it touches the weights.
    std::string anomaly;
    if (!std::isfinite(loss_value)) {
      anomaly = fmt::format("loss is {}", loss_value);
    } else if (rb.enabled && counters.loss_ema_steps >= rb.warmup_steps &&
               loss_value > rb.spike_factor * counters.loss_ema) {
      anomaly = fmt::format("loss spike: {:.4g} > {:g} x {:.4g}", loss_value, rb.spike_factor,
                            counters.loss_ema);
    }
    if (!anomaly.empty()) {
      SPOT_RETURN_IF_ERROR(Rollback(batch, anomaly));
      order_epoch = -1;
      continue;
    }
    loss.backward();
    optimizer->step();
    counters.loss_ema = counters.loss_ema_steps == 0
                            ? loss_value
                            : counters.loss_ema + ema_alpha * (loss_value - counters.loss_ema);
    ++counters.loss_ema_steps;
    double step_s = Seconds(t0, Clock::now());
    train_seconds += step_s;
    train_samples += end - begin;
    if (interval) interval->RecordStep(step_s, saving_at_start || saver->busy());

    ++counters.step;
    if (step_log) {
      std::fputs(StepLogLine({counters.step, counters.epoch, loss_value, lr}).c_str(), step_log);
    }
    bool epoch_done = finish_batch(end);
    const bool save = ckpt::SaveDue(interval ? &*interval : nullptr, spec.checkpoint.interval_steps,
                                    counters.step, Seconds(last_save_time, Clock::now()));
    if (save) SPOT_RETURN_IF_ERROR(SaveCheckpoint());
    double rate = train_seconds > 0 ? static_cast<double>(train_samples) / train_seconds : 0;
    progress.Update(counters.step,
                    fmt::format("epoch {} loss {:.4f} lr {:.2e} {:.0f} samples/s",
                                counters.epoch + (epoch_done ? 0 : 1), loss_value, lr, rate));
  }
  if (last_saved_step != counters.step) SPOT_RETURN_IF_ERROR(SaveCheckpoint());
  SPOT_RETURN_IF_ERROR(saver->Flush());
  CollectSaveReports();
  summary.train_samples_per_s =
      train_seconds > 0 ? static_cast<double>(train_samples) / train_seconds : 0;
  if (interval) {
    summary.checkpoint_overhead = interval->MeasuredOverhead();
    summary.checkpoint_interval_s = interval->IntervalSeconds();
  } else if (train_seconds > 0) {
    summary.checkpoint_overhead =
        summary.checkpoint_seconds / (train_seconds + summary.checkpoint_seconds);
  }
  progress.Finish(
      fmt::format("loss {:.4f} {:.0f} samples/s", loss_value, summary.train_samples_per_s));
  return Status::Ok();
}

Status Trainer::Impl::WriteOutputs() {
  summary.steps = counters.step;
  if (summary.epochs.empty() || summary.epochs.back().step != counters.step) {
    // Nothing left to train (resumed at the end): evaluate what we have.
    EpochResult r = Evaluate();
    r.epoch = counters.epoch;
    summary.epochs.push_back(r);
  }
  summary.test_accuracy = summary.epochs.back().test_accuracy;
  summary.test_loss = summary.epochs.back().test_loss;
  summary.model_path = (std::filesystem::path(spec.output_dir) / "model.pt").string();
  summary.summary_path = JobFiles{spec.output_dir}.summary();
  SPOT_RETURN_IF_ERROR(ExportStateDict(*model, summary.model_path));
  nlohmann::json rollbacks = nlohmann::json::array();
  for (const RollbackEvent& e : summary.rollbacks) {
    rollbacks.push_back({{"at_step", e.at_step},
                         {"batch", e.batch},
                         {"reason", e.reason},
                         {"restored_version", e.restored_version},
                         {"restored_step", e.restored_step},
                         {"lr_scale", e.lr_scale}});
  }
  nlohmann::json epochs = nlohmann::json::array();
  for (const EpochResult& e : summary.epochs) {
    epochs.push_back({{"epoch", e.epoch},
                      {"step", e.step},
                      {"test_accuracy", e.test_accuracy},
                      {"test_loss", e.test_loss}});
  }
  nlohmann::json j = {{"job", spec.name},
                      {"model", spec.model},
                      {"steps", summary.steps},
                      {"steps_this_run", summary.steps_this_run},
                      {"resumed_from_step", summary.resumed_from_step},
                      {"resumed_from_version", summary.resumed_from_version},
                      {"test_accuracy", summary.test_accuracy},
                      {"test_loss", summary.test_loss},
                      {"train_samples_per_s", summary.train_samples_per_s},
                      {"checkpoints_saved", summary.checkpoints_saved},
                      {"checkpoint_seconds", summary.checkpoint_seconds},
                      {"checkpoint_write_seconds", summary.checkpoint_write_seconds},
                      {"checkpoint_bytes", summary.checkpoint_bytes},
                      {"checkpoint_payload_bytes", summary.checkpoint_payload_bytes},
                      {"delta_checkpoints", summary.delta_checkpoints},
                      {"checkpoint_overhead", summary.checkpoint_overhead},
                      {"checkpoint_interval_s", summary.checkpoint_interval_s},
                      {"last_checkpoint_version", summary.last_checkpoint_version},
                      {"rollbacks", rollbacks},
                      {"wall_seconds", summary.wall_seconds},
                      {"threads", counters.threads},
                      {"blas", counters.blas},
                      {"evaluations", epochs},
                      {"model_path", summary.model_path}};
  return WriteFileAtomically(summary.summary_path, j.dump(2) + "\n");
}

std::string BlasLibrary() {
  std::error_code ec;
  auto p = std::filesystem::canonical("/usr/lib/x86_64-linux-gnu/libblas.so.3", ec);
  return ec ? "unknown" : p.parent_path().filename().string();
}

Trainer::Trainer(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Trainer::~Trainer() = default;

Result<std::unique_ptr<Trainer>> Trainer::Create(const TrainSpec& spec, TrainOptions options) {
  auto impl = std::make_unique<Impl>();
  impl->spec = spec;
  impl->opt = std::move(options);
  try {
    SPOT_ASSIGN_OR_RETURN(impl->train, LoadSplit(spec, Split::kTrain, spec.train_limit));
    SPOT_ASSIGN_OR_RETURN(impl->test, LoadSplit(spec, Split::kTest, spec.test_limit));
    SPOT_RETURN_IF_ERROR(impl->Setup());
  } catch (const c10::Error& e) {
    return InternalError(std::string("setting up training: ") + e.what_without_backtrace());
  }
  return std::unique_ptr<Trainer>(new Trainer(std::move(impl)));
}

Result<TrainSummary> Trainer::Run() {
  Impl& m = *impl_;
  auto t0 = Clock::now();
  try {
    SignalScope signals(m.opt.handle_signals);
    SPOT_RETURN_IF_ERROR(m.MaybeResume());
    int64_t start = m.counters.step;
    spdlog::info("training {} on {} ({} samples, batch {}): {} steps, {} per epoch, {} threads",
                 m.spec.model, m.spec.dataset, m.train.size(), m.spec.batch_size, m.total_steps,
                 m.steps_per_epoch, m.counters.threads);
    SPOT_RETURN_IF_ERROR(m.TrainLoop());
    m.summary.steps_this_run = m.counters.step - start;
    m.summary.steps = m.counters.step;
    m.summary.wall_seconds = Seconds(t0, Clock::now());
    // Stopped by a signal: the checkpoint is what matters; skip evaluation and export.
    if (m.summary.stopped_by_signal == 0) SPOT_RETURN_IF_ERROR(m.WriteOutputs());
  } catch (const c10::Error& e) {
    return InternalError(std::string("training: ") + e.what_without_backtrace());
  }
  return m.summary;
}

}  // namespace spot::train
