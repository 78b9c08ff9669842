#include "dist/elastic_trainer.h"

#include <ATen/ATen.h>
#include <fmt/format.h>
#include <signal.h>
#include <spdlog/spdlog.h>
#include <torch/nn/functional/loss.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <optional>
#include <random>
#include <thread>
#include <torch/csrc/distributed/c10d/PrefixStore.hpp>
#include <torch/csrc/distributed/c10d/ProcessGroupGloo.hpp>

#include "ckpt/async_saver.h"
#include "ckpt/interval.h"
#include "ckpt/store.h"
#include "core/file_io.h"
#include "core/job_files.h"
#include "core/progress.h"
#include "dist/c10d_stores.h"
#include "dist/compression.h"
#include "dist/partition.h"
#include "dist/rendezvous.h"
#include "dist/state_sync.h"
#include "train/lr_schedule.h"
#include "train/sampler.h"
#include "train/state_dict_export.h"
#include "train/train_setup.h"
#include "train/train_state.h"
#include "train/trainer.h"

namespace spot::dist {
namespace {

using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

double Seconds(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double>(b - a).count();
}
milliseconds Ms(double seconds) { return milliseconds(static_cast<int64_t>(seconds * 1000)); }

std::atomic<int> g_stop_signal{0};
extern "C" void OnWorkerStop(int sig) { g_stop_signal.store(sig); }
// A stop asked for by a termination watcher, and by when the checkpoint must be safe.
std::atomic<bool> g_stop_requested{false};
std::atomic<double> g_stop_deadline_unix_s{0};
std::atomic<double> g_stop_request_wall{0};
bool StopWanted() { return g_stop_signal.load() != 0 || g_stop_requested.load(); }
double UnixNow() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

int64_t WallMs() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

std::string DefaultId() {
  char host[256] = {};
  ::gethostname(host, sizeof(host) - 1);
  std::random_device rd;
  return fmt::format("{}-{}-{:04x}", host, ::getpid(), rd() & 0xffff);
}

// Control values summed across the group after every step.
enum Control { kReform, kStop, kLossSum, kCount, kControlSize };
// Steps between re-balancing the batch split by measured throughput.
constexpr int64_t kBalanceEvery = 20;

}  // namespace

struct StepResult {
  bool reform = false;  // a member asked to re-form (joiners waiting, someone leaving)
  bool stop = false;    // some member is stopping
  double loss = 0;      // mean over the global batch
};

class Worker {
 public:
  Worker(const train::TrainSpec& spec, const WorkerOptions& opt) : spec_(spec), opt_(opt) {}
  ~Worker();
  Status Init();
  Result<WorkerSummary> Run();

 private:
  enum class Outcome { kDone, kReform, kStopped };
  Status FormGroup(const Generation& g);
  Status SyncState(const Generation& g, Clock::time_point t0);
  Status BecomeWriter(bool writer);
  Status ResumeFromCheckpoint();
  Result<Outcome> TrainGeneration(const Generation& g);
  Result<StepResult> Step(const Generation& g, Slice batch);
  void Flatten();
  void Unflatten();
  Status Evaluate(const Generation& g, int64_t epoch, bool partial);
  Status MaybeSave(bool force);
  Status WriteOutputs(const Generation& g);
  // Rank 0: the progress file (at most twice a second unless `force`).
  void WriteProgress(const Generation& g, double loss, bool done, bool force = false);
  Status AllReduce(at::Tensor& t, const char* what);
  TrainRefs Refs() { return {model_.get(), optimizer_.get(), spec_.optimizer.type, &counters_}; }
  std::vector<at::Tensor> FloatBuffers();

  train::TrainSpec spec_;
  WorkerOptions opt_;
  train::TensorSet train_, test_;
  std::shared_ptr<train::Net> model_;
  std::unique_ptr<torch::optim::Optimizer> optimizer_;
  train::TrainerCounters counters_;
  int64_t steps_per_epoch_ = 0, total_steps_ = 0;
  at::Tensor order_;
  int64_t order_epoch_ = -1;
  bool have_state_ = false;
  int64_t evaluated_step_ = -1;

  RendezvousBackend backend_;
  std::unique_ptr<Rendezvous> rdzv_;
  c10::intrusive_ptr<c10d::ProcessGroupGloo> pg_;
  std::unique_ptr<GradientReducer> reducer_;
  std::vector<at::Tensor> params_;
  std::vector<TensorSpan> layout_;
  at::Tensor flat_;
  std::vector<double> weights_;
  Clock::time_point last_reform_check_;
  Clock::time_point last_progress_ = Clock::now();
  int64_t progress_step_ = 0;
  int64_t steps_in_generation_ = 0;
  uint64_t last_step_bytes_ = 0;

  std::unique_ptr<ckpt::CheckpointStore> store_;
  std::unique_ptr<ckpt::AsyncSaver> saver_;
  int64_t parent_version_ = -1;
  int64_t last_saved_step_ = -1;
  int64_t restored_step_ = -1;
  double last_loss_ = 0;
  Clock::time_point last_progress_write_{};
  Clock::time_point last_save_time_;
  std::optional<ckpt::IntervalPolicy> interval_;  // checkpoint.interval: auto (rank 0)

  double rate_ = 0;           // samples/s of this worker's compute, moving average
  double train_seconds_ = 0;  // time in generations' training loops
  WorkerSummary summary_;
  std::FILE* step_log_ = nullptr;
  std::FILE* sample_log_ = nullptr;
  std::FILE* event_log_ = nullptr;
};

Worker::~Worker() {
  for (std::FILE* f : {step_log_, sample_log_, event_log_}) {
    if (f) std::fclose(f);
  }
}

Status Worker::Init() {
  counters_.threads = train::PrepareProcess(spec_);
  model_ = train::MakeModel(spec_.model);
  if (!model_) return InvalidArgumentError("unknown model " + spec_.model);
  optimizer_ = train::MakeOptimizer(spec_.optimizer, *model_);
  counters_.seed = spec_.seed;
  counters_.batch_size = spec_.batch_size;
  counters_.model = spec_.model;
  counters_.optimizer = spec_.optimizer.type;
  counters_.blas = train::BlasLibrary();
  SPOT_ASSIGN_OR_RETURN(train_, train::LoadSplit(spec_, train::Split::kTrain, spec_.train_limit));
  SPOT_ASSIGN_OR_RETURN(test_, train::LoadSplit(spec_, train::Split::kTest, spec_.test_limit));
  steps_per_epoch_ = (train_.size() + spec_.batch_size - 1) / spec_.batch_size;
  total_steps_ = spec_.epochs > 0 ? spec_.epochs * steps_per_epoch_ : spec_.steps;
  if (spec_.steps > 0) total_steps_ = std::min(total_steps_, spec_.steps);

  int64_t numel = 0;
  for (const at::Tensor& p : model_->parameters()) {
    params_.push_back(p);
    layout_.push_back({.offset = numel, .shape = p.sizes().vec()});
    numel += p.numel();
  }
  flat_ = at::zeros({numel}, at::kFloat);

  const train::DistributedSpec& d = spec_.distributed;
  if (opt_.id.empty()) opt_.id = DefaultId();
  SPOT_ASSIGN_OR_RETURN(backend_, OpenRendezvous(opt_.rendezvous, spec_.name, Ms(d.liveness_ttl_s),
                                                 Ms(d.rendezvous_timeout_s)));
  rdzv_ =
      std::make_unique<Rendezvous>(backend_.kv.get(),
                                   RendezvousOptions{.job = spec_.name,
                                                     .min_workers = static_cast<int>(d.min_workers),
                                                     .max_workers = static_cast<int>(d.max_workers),
                                                     .join_window = Ms(d.join_window_s),
                                                     .last_call = Ms(d.last_call_s),
                                                     .timeout = Ms(d.rendezvous_timeout_s)},
                                   opt_.id);
  SPOT_RETURN_IF_ERROR(CreateDirectories(spec_.output_dir));
  auto open = [](const std::string& path, std::FILE** f) -> Status {
    if (path.empty()) return Status::Ok();
    *f = std::fopen(path.c_str(), "a");
    if (!*f) return UnavailableError("cannot open " + path);
    std::setvbuf(*f, nullptr, _IOLBF, 1 << 12);
    return Status::Ok();
  };
  SPOT_RETURN_IF_ERROR(open(opt_.step_log_path, &step_log_));
  SPOT_RETURN_IF_ERROR(open(opt_.sample_log_path, &sample_log_));
  return open(opt_.event_log_path, &event_log_);
}

Status Worker::FormGroup(const Generation& g) {
  pg_.reset();
  const train::DistributedSpec& d = spec_.distributed;
  try {
    auto o = c10d::ProcessGroupGloo::Options::create(Ms(d.collective_timeout_s));
    o->devices.push_back(c10d::ProcessGroupGloo::createDeviceForHostname(opt_.host));
    auto store =
        c10::make_intrusive<c10d::PrefixStore>(g.store_prefix(spec_.name), backend_.group_store);
    pg_ = c10::make_intrusive<c10d::ProcessGroupGloo>(store, g.rank, g.world_size(), o);
  } catch (const std::exception& e) {
    return AbortedError(fmt::format("forming generation {}: {}", g.number, e.what()));
  }
  SPOT_ASSIGN_OR_RETURN(Compression kind, ParseCompression(d.compression));
  CompressionOptions co{.kind = kind,
                        .powersgd_rank = static_cast<int>(d.powersgd_rank),
                        .topk_ratio = d.topk_ratio,
                        .warmup_steps = d.compression_warmup_steps};
  SPOT_ASSIGN_OR_RETURN(reducer_, GradientReducer::Create(co, layout_, flat_.numel()));
  std::vector<double> rates;
  for (const MemberInfo& m : g.members) rates.push_back(m.samples_per_s);
  weights_ = d.balance ? WeightsFromThroughput(rates) : std::vector<double>(rates.size(), 1.0);
  return Status::Ok();
}

// Rank 0 of a generation is the one checkpoint writer. A worker that becomes
// it reopens the store (another writer may have added versions meanwhile).
Status Worker::BecomeWriter(bool writer) {
  if (!writer) {
    if (saver_) SPOT_RETURN_IF_ERROR(saver_->Flush());
    saver_.reset();
    store_.reset();
    return Status::Ok();
  }
  if (saver_) return Status::Ok();
  const train::CheckpointSpec& ck = spec_.checkpoint;
  SPOT_ASSIGN_OR_RETURN(
      store_,
      ckpt::CheckpointStore::Open(
          {.dir = ck.dir, .durable_dir = ck.durable_dir, .retention = train::RetentionFor(ck)}));
  saver_ = std::make_unique<ckpt::AsyncSaver>(
      store_.get(), ckpt::AsyncSaverOptions{.delta = ck.delta != "none",
                                            .full_every = static_cast<int>(ck.full_every)});
  parent_version_ = -1;
  last_save_time_ = Clock::now();
  interval_.reset();
  if (ck.interval == "auto") {
    interval_.emplace(
        ckpt::IntervalOptions{.mtbf_s = ck.mtbf_hours * 3600, .max_overhead = ck.max_overhead});
  }
  return Status::Ok();
}

Status Worker::ResumeFromCheckpoint() {
  if (spec_.resume == "never") return Status::Ok();
  auto loaded = store_->LoadNewestValid();
  if (!loaded.ok()) {
    if (loaded.status().code() != StatusCode::kNotFound) return loaded.status();
    spdlog::info("no valid checkpoint in {}; starting fresh", store_->dir());
    return Status::Ok();
  }
  SPOT_ASSIGN_OR_RETURN(
      train::TrainerCounters c,
      train::RestoreTrainState(loaded->container, *model_, *optimizer_, spec_.optimizer.type));
  if (c.model != spec_.model || c.batch_size != spec_.batch_size || c.seed != spec_.seed) {
    return FailedPreconditionError(fmt::format(
        "{}: checkpoint {} was made by a different job (model {}, batch_size {}, seed {})",
        store_->dir(), loaded->info.id, c.model, c.batch_size, c.seed));
  }
  c.threads = counters_.threads;
  c.blas = counters_.blas;
  counters_ = c;
  parent_version_ = loaded->info.id;
  last_saved_step_ = c.step;
  restored_step_ = c.step;
  spdlog::info("no worker holds the state: resuming from checkpoint {} (step {})", loaded->info.id,
               c.step);
  return Status::Ok();
}

Status Worker::SyncState(const Generation& g, Clock::time_point t0) {
  int64_t max_step = -1;
  for (const MemberInfo& m : g.members) max_step = std::max(max_step, m.step);
  int source = -1;
  for (int r = 0; r < g.world_size(); ++r) {
    if (g.members[r].step != max_step) source = 0;  // members disagree
  }
  if (source >= 0 || max_step < 0) {
    source = 0;
    while (g.members[source].step != max_step) ++source;
  }
  SPOT_RETURN_IF_ERROR(BecomeWriter(g.rank == 0));
  if (max_step < 0 && g.rank == 0) SPOT_RETURN_IF_ERROR(ResumeFromCheckpoint());
  uint64_t bytes = 0;
  if (source >= 0 && g.world_size() > 1) {
    SPOT_ASSIGN_OR_RETURN(bytes, BroadcastState(*pg_, source, Refs()));
    if (g.rank != source) summary_.state_bytes_received += bytes;
  }
  have_state_ = true;
  order_epoch_ = -1;
  progress_step_ = counters_.step;
  last_progress_ = Clock::now();
  steps_in_generation_ = 0;
  uint64_t hash = StateHash(Refs());
  double formed_s = Seconds(t0, Clock::now());
  spdlog::info("generation {}: rank {} of {}, step {}{}, formed in {:.3f} s", g.number, g.rank,
               g.world_size(), counters_.step,
               source >= 0 && g.world_size() > 1
                   ? fmt::format(", state broadcast from rank {} ({} bytes)", source, bytes)
                   : "",
               formed_s);
  if (event_log_) {
    nlohmann::json e = {{"generation", g.number},
                        {"rank", g.rank},
                        {"world", g.world_size()},
                        {"step", counters_.step},
                        {"state_hash", fmt::format("{:016x}", hash)},
                        {"source", source},
                        {"bytes", bytes},
                        {"formed_s", formed_s},
                        {"id", opt_.id},
                        {"pid", ::getpid()},
                        {"unix_ms", WallMs()}};
    fmt::print(event_log_, "{}\n", e.dump());
  }
  return Status::Ok();
}

Status Worker::AllReduce(at::Tensor& t, const char* what) {
  try {
    std::vector<at::Tensor> v{t};
    pg_->allreduce(v)->wait();
  } catch (const std::exception& e) {
    return AbortedError(fmt::format("{}: {}", what, e.what()));
  }
  return Status::Ok();
}

std::vector<at::Tensor> Worker::FloatBuffers() {
  std::vector<at::Tensor> out;
  for (const at::Tensor& b : model_->buffers()) {
    if (b.is_floating_point()) out.push_back(b);
  }
  return out;
}

void Worker::Flatten() {
  for (size_t i = 0; i < params_.size(); ++i) {
    at::Tensor dst = flat_.slice(0, layout_[i].offset, layout_[i].offset + params_[i].numel());
    const at::Tensor& g = params_[i].grad();
    if (g.defined()) {
      dst.copy_(g.reshape({-1}));
    } else {
      dst.zero_();
    }
  }
}

void Worker::Unflatten() {
  for (size_t i = 0; i < params_.size(); ++i) {
    at::Tensor src = flat_.slice(0, layout_[i].offset, layout_[i].offset + params_[i].numel());
    if (!params_[i].grad().defined()) params_[i].mutable_grad() = at::zeros_like(params_[i]);
    params_[i].mutable_grad().copy_(src.view(params_[i].sizes()));
  }
}

Result<StepResult> Worker::Step(const Generation& g, Slice batch) {
  const auto t0 = Clock::now();
  const Slice mine = SplitBatch(batch, weights_)[g.rank];
  const double lr =
      train::LearningRate(spec_.schedule, spec_.optimizer.lr, counters_.step, total_steps_) *
      counters_.lr_scale;
  for (auto& group : optimizer_->param_groups()) group.options().set_lr(lr);
  optimizer_->zero_grad();
  double loss_sum = 0;
  // Gradient accumulation: this worker's part in micro-batches, gradients
  // summed before the one all-reduce of the step.
  const int64_t micro =
      std::min<int64_t>(spec_.distributed.accumulation_steps, std::max<int64_t>(1, mine.size()));
  for (const Slice& part : SplitBatch(mine, std::vector<double>(micro, 1.0))) {
    if (part.size() == 0) continue;
    // Dropout draws depend on the step and the samples, not on history.
    at::manual_seed(static_cast<uint64_t>(spec_.seed) * 1000003u +
                    static_cast<uint64_t>(counters_.step) * 8191u +
                    static_cast<uint64_t>(part.begin));
    at::Tensor idx = order_.slice(0, part.begin, part.end);
    at::Tensor x = train_.images.index_select(0, idx);
    at::Tensor y = train_.labels.index_select(0, idx);
    at::Tensor loss = at::cross_entropy_loss(model_->forward(x), y, {}, at::Reduction::Sum);
    loss_sum += loss.item<double>();
    (loss / static_cast<double>(batch.size())).backward();
  }
  double compute_s = Seconds(t0, Clock::now());
  if (opt_.slowdown > 0) {
    std::this_thread::sleep_for(std::chrono::duration<double>(compute_s * opt_.slowdown));
  }
  if (mine.size() > 0) {
    double r = static_cast<double>(mine.size()) / Seconds(t0, Clock::now());
    rate_ = rate_ == 0 ? r : 0.8 * rate_ + 0.2 * r;
  }
  Flatten();
  SPOT_ASSIGN_OR_RETURN(CommStats cs, reducer_->AllReduceSum(
                                          *pg_, flat_, Ms(spec_.distributed.collective_timeout_s)));
  const double grad_norm = opt_.observer.on_step ? flat_.norm().item<double>() : 0;
  // Control values, then the floating-point buffers (batch-norm statistics)
  // as the share-weighted mean, so every replica keeps the same ones.
  std::vector<at::Tensor> buffers = FloatBuffers();
  int64_t nbuf = 0;
  for (const at::Tensor& b : buffers) nbuf += b.numel();
  // Layout: control values, each rank's throughput, the buffers.
  const int64_t world = g.world_size();
  at::Tensor control = at::zeros({kControlSize + world + nbuf}, at::kDouble);
  double* c = control.data_ptr<double>();
  if (g.rank == 0 && Seconds(last_reform_check_, Clock::now()) >= 0.1) {
    last_reform_check_ = Clock::now();
    auto reform = rdzv_->ShouldReform(g.number);
    c[kReform] = reform.ok() && *reform ? 1 : 0;
  }
  c[kStop] = StopWanted() ? 1 : 0;
  c[kLossSum] = loss_sum;
  c[kCount] = static_cast<double>(mine.size());
  c[kControlSize + g.rank] = rate_;
  const double share = static_cast<double>(mine.size()) / static_cast<double>(batch.size());
  int64_t at_off = kControlSize + world;
  for (const at::Tensor& b : buffers) {
    control.slice(0, at_off, at_off + b.numel()).copy_(b.reshape({-1}).to(at::kDouble) * share);
    at_off += b.numel();
  }
  const auto control_start = Clock::now();
  SPOT_RETURN_IF_ERROR(AllReduce(control, "step control all-reduce"));
  const double control_s = Seconds(control_start, Clock::now());
  // Committed from here on: every collective of the step succeeded.
  Unflatten();
  optimizer_->step();
  at_off = kControlSize + world;
  for (at::Tensor& b : buffers) {
    b.copy_(control.slice(0, at_off, at_off + b.numel()).view(b.sizes()).to(b.scalar_type()));
    at_off += b.numel();
  }
  // Every rank sees the same throughputs: re-balance the split now and then.
  if (spec_.distributed.balance && ++steps_in_generation_ % kBalanceEvery == 0) {
    weights_ =
        WeightsFromThroughput(std::vector<double>(c + kControlSize, c + kControlSize + world));
  }
  summary_.bytes_sent += cs.bytes_sent;
  last_step_bytes_ = cs.bytes_sent;
  ++counters_.step;
  ++summary_.steps_here;
  counters_.index_in_epoch = batch.end;
  if (sample_log_) {
    fmt::print(sample_log_, "{},{},{},{},{},{},{},{},{}\n", counters_.step, counters_.epoch,
               g.number, g.world_size(), g.rank, batch.begin, batch.end, mine.begin, mine.end);
  }
  if (step_log_ && g.rank == 0) {
    std::fputs(StepLogLine({counters_.step, counters_.epoch, c[kLossSum] / c[kCount], lr}).c_str(),
               step_log_);
  }
  if (opt_.observer.on_step) {
    opt_.observer.on_step({.step = counters_.step,
                           .epoch = counters_.epoch,
                           .generation = g.number,
                           .world = static_cast<int>(g.world_size()),
                           .rank = g.rank,
                           .loss = c[kLossSum] / c[kCount],
                           .lr = lr,
                           .grad_norm = grad_norm,
                           .step_seconds = Seconds(t0, Clock::now()),
                           .compute_seconds = compute_s,
                           .collective_seconds = cs.seconds + control_s,
                           .samples = mine.size(),
                           .batch = batch.size()});
  }
  return StepResult{
      .reform = c[kReform] > 0, .stop = c[kStop] > 0, .loss = c[kLossSum] / c[kCount]};
}

Status Worker::Evaluate(const Generation& g, int64_t epoch, bool partial) {
  Slice all{0, test_.size()};
  Slice mine = SplitBatch(all, std::vector<double>(g.world_size(), 1.0))[g.rank];
  train::EvalSums e =
      train::EvaluateRange(*model_, test_, mine.begin, mine.end, spec_.eval_batch_size);
  at::Tensor sums = at::tensor({e.correct, e.loss_sum, e.count}, at::kDouble);
  SPOT_RETURN_IF_ERROR(AllReduce(sums, "evaluation all-reduce"));
  summary_.test_accuracy = sums[0].item<double>() / sums[2].item<double>();
  summary_.test_loss = sums[1].item<double>() / sums[2].item<double>();
  counters_.last_test_accuracy = summary_.test_accuracy;
  evaluated_step_ = counters_.step;
  if (opt_.observer.on_eval) {
    opt_.observer.on_eval({.step = counters_.step,
                           .epoch = epoch,
                           .partial = partial,
                           .test_accuracy = summary_.test_accuracy,
                           .test_loss = summary_.test_loss,
                           .rank = g.rank});
  }
  if (g.rank == 0) {
    spdlog::info("epoch {}{} step {}: test accuracy {:.2f}%, test loss {:.4f} ({} workers)",
                 epoch + 1, partial ? " (partial)" : "", counters_.step,
                 summary_.test_accuracy * 100, summary_.test_loss, g.world_size());
  }
  return Status::Ok();
}

Status Worker::MaybeSave(bool force) {
  if (!saver_ || last_saved_step_ == counters_.step) return Status::Ok();
  const train::CheckpointSpec& ck = spec_.checkpoint;
  // The same rule as `spot train`: Young/Daly capped by measured overhead, or every N steps.
  const bool due = ckpt::SaveDue(interval_ ? &*interval_ : nullptr, ck.interval_steps,
                                 counters_.step, Seconds(last_save_time_, Clock::now()));
  if (!due && !force) return Status::Ok();
  const auto t0 = Clock::now();
  SPOT_ASSIGN_OR_RETURN(ckpt::Container * c, saver_->Acquire());
  c->Recycle();
  SPOT_RETURN_IF_ERROR(
      train::CaptureTrainState(*model_, *optimizer_, spec_.optimizer.type, counters_, c));
  nlohmann::json meta = {{"epoch", counters_.epoch},
                         {"index_in_epoch", counters_.index_in_epoch},
                         {"test_accuracy", counters_.last_test_accuracy}};
  parent_version_ = saver_->Submit(c, {.step = counters_.step,
                                       .parent = parent_version_,
                                       .meta_json = meta.dump(),
                                       .plan = train::CodecPlanFor(ck)});
  last_saved_step_ = counters_.step;
  last_save_time_ = Clock::now();
  if (interval_) interval_->RecordSave(Seconds(t0, last_save_time_));
  if (opt_.observer.on_checkpoint) {
    opt_.observer.on_checkpoint(
        {.step = counters_.step, .stall_seconds = Seconds(t0, last_save_time_)});
  }
  for (const ckpt::SaveReport& r : saver_->TakeCompleted()) {
    if (opt_.observer.on_checkpoint_written) {
      opt_.observer.on_checkpoint_written(
          {.version = r.info.id, .file_bytes = r.info.file_bytes, .write_seconds = r.write_s});
    }
  }
  return Status::Ok();
}

Result<Worker::Outcome> Worker::TrainGeneration(const Generation& g) {
  const int64_t n = train_.size();
  while (counters_.step < total_steps_ && (spec_.epochs == 0 || counters_.epoch < spec_.epochs)) {
    if (order_epoch_ != counters_.epoch) {
      std::vector<int64_t> o =
          train::EpochOrder(static_cast<uint64_t>(spec_.seed), counters_.epoch, n);
      order_ = at::from_blob(o.data(), {n}, at::kLong).clone();
      order_epoch_ = counters_.epoch;
    }
    Slice batch = GlobalBatch(counters_.index_in_epoch / spec_.batch_size, spec_.batch_size, n);
    const auto step_start = Clock::now();
    const bool saving_at_start = saver_ && saver_->busy();
    SPOT_ASSIGN_OR_RETURN(StepResult r, Step(g, batch));
    if (interval_) {
      interval_->RecordStep(Seconds(step_start, Clock::now()), saving_at_start || saver_->busy());
    }
    if (g.rank == 0 && Seconds(last_progress_, Clock::now()) >= opt_.log_interval_s) {
      double rate = static_cast<double>((counters_.step - progress_step_) * spec_.batch_size) /
                    Seconds(last_progress_, Clock::now());
      spdlog::info("step {}/{} epoch {} loss {:.4f}: {} workers, {:.0f} samples/s", counters_.step,
                   total_steps_, counters_.epoch + 1, r.loss, g.world_size(), rate);
      last_progress_ = Clock::now();
      progress_step_ = counters_.step;
    }
    bool epoch_done = batch.end == n;
    if (epoch_done) {
      ++counters_.epoch;
      counters_.index_in_epoch = 0;
    }
    bool last =
        counters_.step == total_steps_ || (spec_.epochs > 0 && counters_.epoch == spec_.epochs);
    if (epoch_done || last) {
      SPOT_RETURN_IF_ERROR(
          Evaluate(g, epoch_done ? counters_.epoch - 1 : counters_.epoch, !epoch_done));
    }
    SPOT_RETURN_IF_ERROR(MaybeSave(false));
    if (g.rank == 0) WriteProgress(g, r.loss, false);
    if (r.stop && StopWanted()) return Outcome::kStopped;
    if (r.reform || r.stop) return Outcome::kReform;
  }
  if (evaluated_step_ != counters_.step) {
    SPOT_RETURN_IF_ERROR(Evaluate(g, counters_.epoch, true));
  }
  return Outcome::kDone;
}

void Worker::WriteProgress(const Generation& g, double loss, bool done, bool force) {
  if (opt_.progress_path.empty()) return;
  if (loss != 0) last_loss_ = loss;
  const auto now = Clock::now();
  if (!done && !force && Seconds(last_progress_write_, now) < 0.5) return;
  last_progress_write_ = now;
  const ProgressReport r{.job = spec_.name,
                         .step = counters_.step,
                         .total_steps = total_steps_,
                         .epoch = counters_.epoch,
                         .loss = last_loss_,
                         .test_accuracy = counters_.last_test_accuracy,
                         .world = g.world_size(),
                         .generation = g.number,
                         .restored_step = restored_step_,
                         .done = done};
  Status st = WriteFileAtomically(opt_.progress_path, ProgressReportJson(r) + "\n");
  if (!st.ok()) spdlog::warn("progress file: {}", st.message());
}

Status Worker::WriteOutputs(const Generation& g) {
  SPOT_RETURN_IF_ERROR(MaybeSave(true));
  if (saver_) SPOT_RETURN_IF_ERROR(saver_->Flush());
  if (g.rank != 0) return Status::Ok();
  std::string model_path = (std::filesystem::path(spec_.output_dir) / "model.pt").string();
  SPOT_RETURN_IF_ERROR(train::ExportStateDict(*model_, model_path));
  nlohmann::json j = {
      {"job", spec_.name},
      {"model", spec_.model},
      {"steps", counters_.step},
      {"test_accuracy", summary_.test_accuracy},
      {"test_loss", summary_.test_loss},
      {"world", g.world_size()},
      {"generation", g.number},
      {"compression", spec_.distributed.compression},
      {"steps_here", summary_.steps_here},
      {"train_seconds", train_seconds_},
      {"steps_per_s", train_seconds_ > 0 ? summary_.steps_here / train_seconds_ : 0},
      // The last step's: after any compression warm-up.
      {"bytes_sent_per_step", last_step_bytes_},
      {"bytes_sent", summary_.bytes_sent},
      {"generations", summary_.generations},
      {"model_path", model_path}};
  SPOT_RETURN_IF_ERROR(WriteFileAtomically(JobFiles{spec_.output_dir}.summary(), j.dump(2) + "\n"));
  WriteProgress(g, 0, /*done=*/true);
  return Status::Ok();
}

Result<WorkerSummary> Worker::Run() {
  const auto start = Clock::now();
  while (true) {
    MemberInfo me{.id = opt_.id, .samples_per_s = rate_, .step = have_state_ ? counters_.step : -1};
    const auto t0 = Clock::now();
    SPOT_ASSIGN_OR_RETURN(Generation g, rdzv_->Join(me));
    ++summary_.generations;
    Status st = FormGroup(g);
    if (st.ok()) st = SyncState(g, t0);
    const auto train_start = Clock::now();
    Result<Outcome> out = st.ok() ? TrainGeneration(g) : Result<Outcome>(st);
    train_seconds_ += Seconds(train_start, Clock::now());
    if (!out.ok()) {
      if (out.status().code() != StatusCode::kAborted) return out.status();
      // Close this group's connections now: peers still blocked in a
      // collective with us fail at once instead of at their timeout.
      pg_.reset();
      ++summary_.abandoned_steps;
      spdlog::warn("generation {}: {}; re-forming", g.number, out.status().message());
      continue;
    }
    summary_.final_rank = g.rank;
    summary_.final_world = g.world_size();
    if (*out == Outcome::kReform) continue;
    if (*out == Outcome::kStopped) {
      summary_.stopped_by_signal = g_stop_signal.load();
      summary_.stopped_by_request = g_stop_requested.load();
      SPOT_RETURN_IF_ERROR(MaybeSave(true));
      if (saver_) {
        // A notice's deadline, less a margin for leaving; else the job's flush budget.
        auto deadline = Clock::now() + Ms(spec_.checkpoint.flush_deadline_s);
        if (summary_.stopped_by_request && g_stop_deadline_unix_s.load() > 0) {
          deadline =
              Clock::now() + Ms(std::max(0.05, g_stop_deadline_unix_s.load() - UnixNow() - 0.2));
        }
        Status flushed = saver_->Flush(deadline);
        if (!flushed.ok() && summary_.stopped_by_request &&
            flushed.code() == StatusCode::kDeadlineExceeded) {
          // The notice's time has whole seconds: the reclaim may still be up
          // to a second away. Keep going until done or killed.
          spdlog::warn("{}; still flushing until the reclaim", flushed.message());
          flushed = saver_->Flush();
        }
        SPOT_RETURN_IF_ERROR(flushed);
        if (summary_.stopped_by_request) {
          summary_.stop_flush_seconds = UnixNow() - g_stop_request_wall.load();
          spdlog::info("notice: checkpoint of step {} flushed {:.3f} s after the notice",
                       counters_.step, summary_.stop_flush_seconds);
        }
      }
      if (g.rank == 0) WriteProgress(g, 0, false, /*force=*/true);
      break;
    }
    SPOT_RETURN_IF_ERROR(WriteOutputs(g));
    break;
  }
  pg_.reset();
  (void)rdzv_->Leave();
  summary_.steps = counters_.step;
  summary_.samples_per_s = rate_;
  summary_.wall_seconds = Seconds(start, Clock::now());
  return summary_;
}

void RequestWorkerStop(double flush_deadline_unix_s) {
  g_stop_deadline_unix_s.store(flush_deadline_unix_s);
  g_stop_request_wall.store(UnixNow());
  g_stop_requested.store(true);
}

Result<WorkerSummary> RunWorker(const train::TrainSpec& spec, const WorkerOptions& options) {
  if (options.rendezvous.empty()) return InvalidArgumentError("a worker needs --rendezvous");
  struct sigaction sa {
  }, old_term{}, old_int{};
  if (options.handle_signals) {
    g_stop_signal = 0;
    sa.sa_handler = OnWorkerStop;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGTERM, &sa, &old_term);
    sigaction(SIGINT, &sa, &old_int);
  }
  Result<WorkerSummary> r = [&]() -> Result<WorkerSummary> {
    try {
      Worker w(spec, options);
      SPOT_RETURN_IF_ERROR(w.Init());
      return w.Run();
    } catch (const c10::Error& e) {
      return InternalError(std::string("elastic worker: ") + e.what_without_backtrace());
    }
  }();
  if (options.handle_signals) {
    sigaction(SIGTERM, &old_term, nullptr);
    sigaction(SIGINT, &old_int, nullptr);
  }
  return r;
}

}  // namespace spot::dist
