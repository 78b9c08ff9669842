#include "train/trainer.h"

#include <ATen/Parallel.h>
#include <torch/nn/functional/loss.h>
#include <torch/optim/adam.h>
#include <torch/optim/sgd.h>
#include <torch/utils.h>

#include <malloc.h>

#include <chrono>
#include <cstdio>
#include <filesystem>

#include <fmt/format.h>
#include <nlohmann/json.hpp>
#include <spdlog/spdlog.h>

#include "ckpt/store.h"
#include "core/file_io.h"
#include "core/progress.h"
#include "train/fashion_mnist.h"
#include "train/lr_schedule.h"
#include "train/model.h"
#include "train/sampler.h"
#include "train/state_dict_export.h"
#include "train/train_state.h"

namespace spot::train {
namespace {

using Clock = std::chrono::steady_clock;

double Seconds(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double>(b - a).count();
}

// Images as normalized float [n, 1, rows, cols] and labels as int64 [n].
struct TensorSet {
  at::Tensor images;
  at::Tensor labels;
  int64_t size() const { return images.size(0); }
};

TensorSet ToTensors(const ImageSet& s) {
  at::Tensor raw = at::from_blob(const_cast<uint8_t*>(s.pixels.data()),
                                 {s.count, 1, s.rows, s.cols}, at::kByte);
  TensorSet t;
  t.images = raw.to(at::kFloat).div_(255).sub_(kFashionMnistMean).div_(kFashionMnistStd);
  t.labels = at::from_blob(const_cast<uint8_t*>(s.labels.data()), {s.count}, at::kByte).to(at::kLong);
  return t;
}

// Training allocates and frees the same large activation buffers every step.
// glibc serves blocks above its mmap threshold with fresh mmaps, so each step
// page-faults and zeroes them again, and it returns freed heap tops to the
// kernel. Raising both thresholds keeps those buffers in the heap for reuse
// (measured: ~20% more samples/s for the CNN at batch 256). Process-wide, set
// once; the trainer is the process's main work.
void KeepActivationBuffersInHeap() {
  static const bool done = [] {
    mallopt(M_MMAP_THRESHOLD, 32 << 20);  // glibc's maximum on 64-bit
    mallopt(M_TRIM_THRESHOLD, 1 << 30);
    return true;
  }();
  (void)done;
}

std::unique_ptr<torch::optim::Optimizer> MakeOptimizer(const OptimizerSpec& o, Net& model) {
  if (o.type == "adam") {
    return std::make_unique<torch::optim::Adam>(
        model.parameters(), torch::optim::AdamOptions(o.lr)
                                .betas({o.beta1, o.beta2})
                                .eps(o.eps)
                                .weight_decay(o.weight_decay));
  }
  return std::make_unique<torch::optim::SGD>(model.parameters(),
                                             torch::optim::SGDOptions(o.lr)
                                                 .momentum(o.momentum)
                                                 .nesterov(o.nesterov)
                                                 .weight_decay(o.weight_decay));
}

}  // namespace

struct Trainer::Impl {
  TrainSpec spec;
  TrainOptions opt;
  TensorSet train, test;
  std::shared_ptr<Net> model;
  std::unique_ptr<torch::optim::Optimizer> optimizer;
  std::optional<ckpt::CheckpointStore> store;
  TrainerCounters counters;
  int64_t parent_version = -1;
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
  EpochResult Evaluate();
  Status TrainLoop();
  Status WriteOutputs();
};

Status Trainer::Impl::Setup() {
  int threads = spec.threads > 0 ? static_cast<int>(spec.threads)
                                 : static_cast<int>(std::thread::hardware_concurrency());
  at::set_num_threads(threads);
  KeepActivationBuffersInHeap();
  torch::manual_seed(static_cast<uint64_t>(spec.seed));
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
  SPOT_ASSIGN_OR_RETURN(store, ckpt::CheckpointStore::Open(
                                   {.dir = spec.checkpoint.dir,
                                    .keep_last = static_cast<int>(spec.checkpoint.keep)}));
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
    return restored.status().WithContext("resuming from " + loaded->info.data_path);
  }
  const TrainerCounters& c = *restored;
  if (c.model != spec.model || c.batch_size != spec.batch_size || c.seed != spec.seed) {
    return FailedPreconditionError(fmt::format(
        "{}: made by a different job (model {}, batch_size {}, seed {}); this job has model {}, "
        "batch_size {}, seed {}: use another checkpoint.dir or resume: never",
        loaded->info.data_path, c.model, c.batch_size, c.seed, spec.model, spec.batch_size,
        spec.seed));
  }
  if (c.threads != counters.threads || c.blas != counters.blas) {
    spdlog::warn("checkpoint was made with {} threads and BLAS {}; this run has {} and {}: "
                 "training continues, but not bit-for-bit", c.threads, c.blas, counters.threads,
                 counters.blas);
  }
  counters.step = c.step;
  counters.epoch = c.epoch;
  counters.index_in_epoch = c.index_in_epoch;
  counters.last_test_accuracy = c.last_test_accuracy;
  parent_version = loaded->info.id;
  summary.resumed_from_step = c.step;
  summary.resumed_from_version = loaded->info.id;
  spdlog::info("resuming from checkpoint {} (step {}, epoch {}, sample {} of the epoch)",
               loaded->info.id, c.step, c.epoch, c.index_in_epoch);
  return Status::Ok();
}

Status Trainer::Impl::SaveCheckpoint() {
  auto t0 = Clock::now();
  ckpt::Container c;
  SPOT_RETURN_IF_ERROR(CaptureTrainState(*model, *optimizer, spec.optimizer.type, counters, &c));
  nlohmann::json meta = {{"epoch", counters.epoch},
                         {"index_in_epoch", counters.index_in_epoch},
                         {"test_accuracy", counters.last_test_accuracy}};
  SPOT_ASSIGN_OR_RETURN(ckpt::VersionInfo v,
                        store->Save(c, counters.step, parent_version, meta.dump()));
  parent_version = v.id;
  double dt = Seconds(t0, Clock::now());
  summary.checkpoint_seconds += dt;
  ++summary.checkpoints_saved;
  spdlog::debug("checkpoint {} at step {}: {} bytes in {:.1f} ms", v.id, v.step, v.file_bytes,
                dt * 1e3);
  return Status::Ok();
}

EpochResult Trainer::Impl::Evaluate() {
  torch::NoGradGuard no_grad;
  model->eval();
  int64_t correct = 0;
  double loss_sum = 0;
  for (int64_t i = 0; i < test.size(); i += spec.eval_batch_size) {
    int64_t end = std::min(test.size(), i + spec.eval_batch_size);
    at::Tensor logits = model->forward(test.images.slice(0, i, end));
    at::Tensor y = test.labels.slice(0, i, end);
    loss_sum += at::cross_entropy_loss(logits, y, {}, at::Reduction::Sum).item<double>();
    correct += logits.argmax(1).eq(y).sum().item<int64_t>();
  }
  model->train();
  EpochResult r;  // the caller sets r.epoch: it knows whether the epoch ended
  r.step = counters.step;
  r.test_accuracy = static_cast<double>(correct) / static_cast<double>(test.size());
  r.test_loss = loss_sum / static_cast<double>(test.size());
  return r;
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
  at::Tensor order;
  int64_t order_epoch = -1;
  at::Tensor x = at::empty({b, 1, train.images.size(2), train.images.size(3)});
  at::Tensor y = at::empty({b}, at::kLong);
  double train_seconds = 0;
  int64_t train_samples = 0;
  float loss_value = 0;
  auto& groups = optimizer->param_groups();

  while (counters.step < total_steps) {
    auto t0 = Clock::now();
    if (order_epoch != counters.epoch) {
      std::vector<int64_t> o = EpochOrder(static_cast<uint64_t>(spec.seed), counters.epoch, n);
      order = at::from_blob(o.data(), {n}, at::kLong).clone();
      order_epoch = counters.epoch;
    }
    int64_t begin = counters.index_in_epoch;
    int64_t end = std::min(n, begin + b);
    at::Tensor idx = order.slice(0, begin, end);
    if (x.size(0) != end - begin) {
      x.resize_({end - begin, x.size(1), x.size(2), x.size(3)});
      y.resize_({end - begin});
    }
    at::index_select_out(x, train.images, 0, idx);
    at::index_select_out(y, train.labels, 0, idx);

    double lr = LearningRate(spec.schedule, spec.optimizer.lr, counters.step, total_steps);
    for (auto& g : groups) g.options().set_lr(lr);
    optimizer->zero_grad();
    at::Tensor loss = at::cross_entropy_loss(model->forward(x), y);
    loss.backward();
    optimizer->step();
    loss_value = loss.item<float>();
    if (!std::isfinite(loss_value)) {
      return AbortedError(fmt::format("loss is {} at step {}", loss_value, counters.step + 1));
    }
    train_seconds += Seconds(t0, Clock::now());
    train_samples += end - begin;

    ++counters.step;
    counters.index_in_epoch = end;
    if (step_log) {
      fmt::print(step_log, "{},{},{:.9g},{:.9g}\n", counters.step, counters.epoch, loss_value, lr);
    }
    bool epoch_done = end == n;
    if (epoch_done) {
      ++counters.epoch;
      counters.index_in_epoch = 0;
    }
    if (epoch_done || counters.step == total_steps) {
      EpochResult r = Evaluate();
      r.epoch = epoch_done ? counters.epoch - 1 : counters.epoch;
      counters.last_test_accuracy = r.test_accuracy;
      summary.epochs.push_back(r);
      if (progress.terminal()) std::fputs("\r\033[K", stderr);
      spdlog::info("epoch {}{} step {}: test accuracy {:.2f}%, test loss {:.4f}", r.epoch + 1,
                   epoch_done ? "" : " (partial)", r.step, r.test_accuracy * 100, r.test_loss);
    }
    if (counters.step % spec.checkpoint.interval_steps == 0 || counters.step == total_steps) {
      SPOT_RETURN_IF_ERROR(SaveCheckpoint());
    }
    double rate = train_seconds > 0 ? static_cast<double>(train_samples) / train_seconds : 0;
    progress.Update(counters.step, fmt::format("epoch {} loss {:.4f} lr {:.2e} {:.0f} samples/s",
                                               counters.epoch + (epoch_done ? 0 : 1), loss_value,
                                               lr, rate));
  }
  summary.train_samples_per_s =
      train_seconds > 0 ? static_cast<double>(train_samples) / train_seconds : 0;
  progress.Finish(fmt::format("loss {:.4f} {:.0f} samples/s", loss_value,
                              summary.train_samples_per_s));
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
  summary.summary_path = (std::filesystem::path(spec.output_dir) / "summary.json").string();
  SPOT_RETURN_IF_ERROR(ExportStateDict(*model, summary.model_path));
  nlohmann::json epochs = nlohmann::json::array();
  for (const EpochResult& e : summary.epochs) {
    epochs.push_back({{"epoch", e.epoch}, {"step", e.step}, {"test_accuracy", e.test_accuracy},
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

namespace {

// Loads one split as tensors, keeping the first `limit` images (0 = all).
Result<TensorSet> LoadSplit(const TrainSpec& spec, Split split, int64_t limit) {
  auto set = LoadFashionMnist(spec.dataset_path, split);
  if (!set.ok()) {
    const Status& s = set.status();
    return s.code() == StatusCode::kInvalidArgument ? s.WithContext(spec.source + ": dataset.path")
                                                    : s;
  }
  TensorSet t = ToTensors(*set);
  if (limit > 0 && limit < t.size()) {
    t.images = t.images.slice(0, 0, limit).clone();
    t.labels = t.labels.slice(0, 0, limit).clone();
  }
  return t;
}

}  // namespace

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
    SPOT_RETURN_IF_ERROR(m.MaybeResume());
    int64_t start = m.counters.step;
    spdlog::info("training {} on {} ({} samples, batch {}): {} steps, {} per epoch, {} threads",
                 m.spec.model, m.spec.dataset, m.train.size(), m.spec.batch_size, m.total_steps,
                 m.steps_per_epoch, m.counters.threads);
    SPOT_RETURN_IF_ERROR(m.TrainLoop());
    m.summary.steps_this_run = m.counters.step - start;
    m.summary.wall_seconds = Seconds(t0, Clock::now());
    SPOT_RETURN_IF_ERROR(m.WriteOutputs());
  } catch (const c10::Error& e) {
    return InternalError(std::string("training: ") + e.what_without_backtrace());
  }
  return m.summary;
}

}  // namespace spot::train
