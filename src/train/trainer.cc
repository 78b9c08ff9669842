#include "train/trainer.h"

#include <ATen/Parallel.h>
#include <fmt/format.h>
#include <signal.h>
#include <spdlog/spdlog.h>
#include <torch/optim/adam.h>
#include <torch/optim/sgd.h>
#include <torch/utils.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "ckpt/store.h"
#include "core/file_io.h"
#include "core/job_files.h"
#include "core/progress.h"
#include "train/checkpointer.h"
#include "train/fashion_mnist.h"
#include "train/model.h"
#include "train/pretrained.h"
#include "train/state_dict_export.h"
#include "train/step_runner.h"
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
  std::unique_ptr<Checkpointer> ckpt;
  std::optional<StepRunner> runner;
  LocalSync sync;
  TrainerCounters counters;
  AppendLog step_log;
  TrainSummary summary;
  // Training time and samples of this run (steps only: no eval, no saves).
  double train_seconds = 0;
  int64_t train_samples = 0;
  double last_loss = 0;

  TrainRefs Refs() {
    return {model.get(), optimizer.get(), spec.optimizer.type, &counters, train.SampleShape()};
  }
  Status Setup();
  Status MaybeResume();
  Status SaveCheckpoint();
  void CollectSaveReports();
  EpochResult Evaluate();
  void AfterBatch(const BatchEnd& end, bool terminal);
  Status TrainStep(Progress& progress);
  Status TrainLoop();
  Status Stop(int sig);
  Status WriteOutputs();
};

Status Trainer::Impl::Setup() {
  int threads = PrepareProcess(spec);
  SPOT_ASSIGN_OR_RETURN(model, BuildModel(spec, train.SampleShape()));
  SPOT_RETURN_IF_ERROR(CheckLossTargets(spec, *model, train));
  SPOT_ASSIGN_OR_RETURN(optimizer, MakeOptimizer(spec, *model));

  counters = FreshCounters(spec, threads);
  runner.emplace(spec, train, Refs());

  SPOT_RETURN_IF_ERROR(CreateDirectories(spec.output_dir));
  SPOT_ASSIGN_OR_RETURN(ckpt, Checkpointer::Open(spec));
  SPOT_ASSIGN_OR_RETURN(step_log, AppendLog::Open(opt.step_log_path));
  return Status::Ok();
}

Status Trainer::Impl::MaybeResume() {
  if (spec.resume == "never") {
    spdlog::info("resume: never; starting fresh");
    SPOT_RETURN_IF_ERROR(StartFromPretrained(spec, *model));
    runner->PreparePrecision();  // measured on the weights training starts from
    return Status::Ok();
  }
  SPOT_ASSIGN_OR_RETURN(ResumeInfo r, ckpt->Resume(Refs()));
  runner->Reset();
  if (r.version < 0) SPOT_RETURN_IF_ERROR(StartFromPretrained(spec, *model));
  runner->PreparePrecision();  // a resume applies the checkpoint's choice
  summary.resumed_from_step = r.step;
  summary.resumed_from_version = r.version;
  return Status::Ok();
}

void Trainer::Impl::CollectSaveReports() {
  for (const ckpt::SaveReport& r : ckpt->TakeCompleted()) {
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
  std::optional<double> test_loss;
  if (!summary.epochs.empty() && summary.epochs.back().step == counters.step) {
    test_loss = summary.epochs.back().test_loss;
  }
  SPOT_ASSIGN_OR_RETURN(double blocking, ckpt->Save(Refs(), test_loss));
  summary.checkpoint_seconds += blocking;
  CollectSaveReports();
  return Status::Ok();
}

EpochResult Trainer::Impl::Evaluate() {
  EvalSums e = EvaluateRange(*model, test, 0, test.size(), spec);
  EpochResult r;  // the caller sets r.epoch: it knows whether the epoch ended
  r.step = counters.step;
  r.test_accuracy = e.correct / e.count;
  r.test_loss = e.loss_sum / e.count;
  return r;
}

Status Trainer::Impl::Stop(int sig) {
  summary.stopped_by_signal = sig;
  spdlog::warn("{}: saving a checkpoint at step {} and stopping", strsignal(sig), counters.step);
  if (ckpt->last_saved_step() != counters.step) SPOT_RETURN_IF_ERROR(SaveCheckpoint());
  auto deadline =
      Clock::now() + std::chrono::duration_cast<Clock::duration>(
                         std::chrono::duration<double>(spec.checkpoint.flush_deadline_s));
  Status st = ckpt->Flush(deadline);
  CollectSaveReports();
  return st;
}

// After a committed or skipped batch: evaluation at an epoch's end, at the
// last step and every eval_every steps.
void Trainer::Impl::AfterBatch(const BatchEnd& end, bool terminal) {
  const int64_t evaluated = summary.epochs.empty() ? -1 : summary.epochs.back().step;
  if (!EvaluationDue(spec, end, counters.step, evaluated)) return;
  EpochResult r = Evaluate();
  r.epoch = end.epoch;
  counters.last_test_accuracy = r.test_accuracy;
  summary.epochs.push_back(r);
  if (terminal) std::fputs("\r\033[K", stderr);
  spdlog::info("epoch {}{} step {}: {}", r.epoch + 1, end.epoch_done ? "" : " (partial)", r.step,
               EvalText(spec.loss, r.test_accuracy, r.test_loss));
}

// One batch: skipped for good, rolled back past, or trained and logged.
Status Trainer::Impl::TrainStep(Progress& progress) {
  const Slice batch = runner->NextBatch();
  if (runner->NextIsSkipped()) {
    AfterBatch(runner->Advance(batch), progress.terminal());
    return Status::Ok();
  }
  const auto t0 = Clock::now();
  // A step is "during a save" when a write is pending at its start or end.
  const bool saving_at_start = ckpt->busy();
  SPOT_ASSIGN_OR_RETURN(StepOutcome step, runner->Run(batch, batch, sync));
  if (step.overflow) spdlog::info("{}", OverflowText(step, counters));
  if (!step.committed) {
    SPOT_ASSIGN_OR_RETURN(RollbackEvent e, ckpt->Rollback(Refs(), step.batch, step.anomaly));
    CollectSaveReports();
    summary.rollbacks.push_back(e);
    runner->Reset();
    return Status::Ok();
  }
  const double step_s = Seconds(t0, Clock::now());
  train_seconds += step_s;
  train_samples += batch.size();
  last_loss = step.loss;
  ckpt->RecordStep(step_s, saving_at_start || ckpt->busy());
  step_log.Append(StepLogLine({counters.step, counters.epoch, step.loss, step.lr}));
  const BatchEnd end = runner->Advance(batch);
  AfterBatch(end, progress.terminal());
  if (ckpt->Due(counters.step)) SPOT_RETURN_IF_ERROR(SaveCheckpoint());
  const double rate = train_seconds > 0 ? static_cast<double>(train_samples) / train_seconds : 0;
  progress.Update(counters.step,
                  fmt::format("epoch {} loss {:.4f} lr {:.2e} {:.0f} samples/s",
                              counters.epoch + (end.epoch_done ? 0 : 1), step.loss, step.lr, rate));
  return Status::Ok();
}

Status Trainer::Impl::TrainLoop() {
  model->train();
  Progress progress({.label = "train",
                     .total = runner->total_steps(),
                     .start = counters.step,
                     .log_interval_s = opt.log_interval_s,
                     .force_plain = opt.plain_progress});
  // A fresh run with rollback on saves its initial state: something to roll back to.
  if (spec.rollback.enabled && ckpt->last_saved_step() < 0) SPOT_RETURN_IF_ERROR(SaveCheckpoint());
  while (!runner->Finished()) {
    if (int sig = g_stop_signal.load(); sig != 0) return Stop(sig);
    if (g_checkpoint_request.exchange(false) && ckpt->last_saved_step() != counters.step) {
      spdlog::info("checkpoint requested (SIGUSR1) at step {}", counters.step);
      SPOT_RETURN_IF_ERROR(SaveCheckpoint());
    }
    SPOT_RETURN_IF_ERROR(TrainStep(progress));
  }
  if (ckpt->last_saved_step() != counters.step) SPOT_RETURN_IF_ERROR(SaveCheckpoint());
  SPOT_RETURN_IF_ERROR(ckpt->Flush());
  CollectSaveReports();
  summary.train_samples_per_s =
      train_seconds > 0 ? static_cast<double>(train_samples) / train_seconds : 0;
  if (ckpt->has_interval()) {
    summary.checkpoint_overhead = ckpt->MeasuredOverhead();
    summary.checkpoint_interval_s = ckpt->IntervalSeconds();
  } else if (train_seconds > 0) {
    summary.checkpoint_overhead =
        summary.checkpoint_seconds / (train_seconds + summary.checkpoint_seconds);
  }
  progress.Finish(
      fmt::format("loss {:.4f} {:.0f} samples/s", last_loss, summary.train_samples_per_s));
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
  const bool regression = spec.loss == "mse";  // no accuracy to report
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
  // loss mse has no accuracy: null.
  auto accuracy = [&](double a) { return regression ? nlohmann::json() : nlohmann::json(a); };
  nlohmann::json epochs = nlohmann::json::array();
  for (const EpochResult& e : summary.epochs) {
    epochs.push_back({{"epoch", e.epoch},
                      {"step", e.step},
                      {"test_accuracy", accuracy(e.test_accuracy)},
                      {"test_loss", e.test_loss}});
  }
  nlohmann::json j = {{"job", spec.name},
                      {"model", ModelName(spec)},
                      {"steps", summary.steps},
                      {"steps_this_run", summary.steps_this_run},
                      {"resumed_from_step", summary.resumed_from_step},
                      {"resumed_from_version", summary.resumed_from_version},
                      {"test_accuracy", accuracy(summary.test_accuracy)},
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
  SPOT_RETURN_IF_ERROR(CheckDevice(spec));  // before loading anything
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
                 ModelName(m.spec), m.spec.dataset, m.train.size(), m.spec.batch_size,
                 m.runner->total_steps(), m.runner->steps_per_epoch(), m.counters.threads);
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
