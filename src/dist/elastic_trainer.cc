#include "dist/elastic_trainer.h"

#include <ATen/ATen.h>
#include <fmt/format.h>
#include <signal.h>
#include <spdlog/spdlog.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <nlohmann/json.hpp>
#include <optional>
#include <random>
#include <torch/csrc/distributed/c10d/PrefixStore.hpp>
#include <torch/csrc/distributed/c10d/ProcessGroupGloo.hpp>

#include "core/clock.h"
#include "core/file_io.h"
#include "core/job_files.h"
#include "core/logging.h"
#include "core/progress.h"
#include "dist/c10d_stores.h"
#include "dist/compression.h"
#include "dist/gloo_group.h"
#include "dist/gloo_sync.h"
#include "dist/rendezvous.h"
#include "dist/state_sync.h"
#include "dist/straggler.h"
#include "train/checkpointer.h"
#include "train/folder_data.h"
#include "train/partition.h"
#include "train/pretrained.h"
#include "train/state_dict_export.h"
#include "train/step_runner.h"
#include "train/train_setup.h"
#include "train/train_state.h"
#include "train/trainer.h"

namespace spot::dist {

using train::Slice;
using train::SplitBatch;
using train::WeightsFromThroughput;

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
std::string DefaultId() {
  char host[256] = {};
  ::gethostname(host, sizeof(host) - 1);
  std::random_device rd;
  return fmt::format("{}-{}-{:04x}", host, ::getpid(), rd() & 0xffff);
}

// Steps between re-balancing the batch split by measured throughput.
constexpr int64_t kBalanceEvery = 20;

}  // namespace

struct StepResult {
  bool committed = false;  // false: rolled back instead
  bool reform = false;     // a member asked to re-form (joiners waiting, someone leaving)
  bool stop = false;       // some member is stopping
  double loss = 0;         // mean over the global batch
};

class Worker {
 public:
  Worker(const train::TrainSpec& spec, const WorkerOptions& opt) : spec_(spec), opt_(opt) {}
  Status Init();
  Result<WorkerSummary> Run();

 private:
  enum class Outcome { kDone, kReform, kStopped };
  Status FormGroup(const Generation& g);
  Status SyncState(const Generation& g, Clock::time_point t0);
  Status HoldShards(const Generation& g);
  Status BecomeWriter(bool writer);
  Status ResumeFromCheckpoint();
  Result<Outcome> TrainGeneration(const Generation& g);
  Result<StepResult> Step(const Generation& g, Slice batch);
  Status RollBack(const Generation& g, const train::StepOutcome& step);
  void LogStep(const Generation& g, const train::StepOutcome& o, Slice batch, Slice mine,
               double step_s);
  Status AfterBatch(const Generation& g, const train::BatchEnd& end);
  Status Evaluate(const Generation& g, int64_t epoch, bool partial);
  Status MaybeSave(bool force);
  Status FinishStop(const Generation& g);
  Status WriteOutputs(const Generation& g);
  // Rank 0: the progress file (at most twice a second unless `force`).
  void WriteProgress(const Generation& g, double loss, bool done, bool force = false);
  TrainRefs Refs() {
    return {model_.get(), optimizer_.get(), spec_.optimizer.type, &counters_, train_.SampleShape()};
  }

  train::TrainSpec spec_;
  WorkerOptions opt_;
  train::TensorSet train_, test_;
  std::shared_ptr<train::Net> model_;
  std::unique_ptr<torch::optim::Optimizer> optimizer_;
  train::TrainerCounters counters_;
  std::optional<train::StepRunner> runner_;
  bool have_state_ = false;
  std::optional<StragglerWatch> stragglers_;  // rank 0's watch over its group
  int64_t evaluated_step_ = -1;

  RendezvousBackend backend_;
  std::unique_ptr<Rendezvous> rdzv_;
  GlooGroupBuilder groups_;  // joins abandoned builds when the worker ends
  c10::intrusive_ptr<c10d::ProcessGroupGloo> pg_;
  std::unique_ptr<GlooSync> sync_;
  std::vector<double> weights_;
  Clock::time_point last_reform_check_;
  Clock::time_point last_progress_ = Clock::now();
  int64_t progress_step_ = 0;
  int64_t steps_in_generation_ = 0;
  uint64_t last_step_bytes_ = 0;

  std::unique_ptr<train::Checkpointer> ckpt_;  // rank 0 of a generation only
  int64_t restored_step_ = -1;
  double last_loss_ = 0;
  Clock::time_point last_progress_write_{};

  double rate_ = 0;           // samples/s of this worker's compute, moving average
  double train_seconds_ = 0;  // time in generations' training loops
  WorkerSummary summary_;
  AppendLog step_log_, sample_log_, event_log_;
};

Status Worker::Init() {
  SPOT_RETURN_IF_ERROR(train::CheckDevice(spec_));  // before loading (and caching) any data
  counters_ = train::FreshCounters(spec_, train::PrepareProcess(spec_));
  SPOT_ASSIGN_OR_RETURN(train_, train::LoadSplit(spec_, train::Split::kTrain, spec_.train_limit,
                                                 /*sharded=*/spec_.cache.hold == "own"));
  SPOT_ASSIGN_OR_RETURN(test_, train::LoadSplit(spec_, train::Split::kTest, spec_.test_limit));
  SPOT_ASSIGN_OR_RETURN(model_, train::BuildModel(spec_, train_.SampleShape()));
  SPOT_RETURN_IF_ERROR(train::CheckLossTargets(spec_, *model_, train_));
  SPOT_ASSIGN_OR_RETURN(optimizer_, train::MakeOptimizer(spec_, *model_));
  runner_.emplace(spec_, train_, Refs());

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
                                                     .timeout = Ms(d.rendezvous_timeout_s),
                                                     .cancelled = [] { return StopWanted(); }},
                                   opt_.id);
  SPOT_RETURN_IF_ERROR(CreateDirectories(spec_.output_dir));
  SPOT_ASSIGN_OR_RETURN(step_log_, AppendLog::Open(opt_.step_log_path));
  SPOT_ASSIGN_OR_RETURN(sample_log_, AppendLog::Open(opt_.sample_log_path));
  SPOT_ASSIGN_OR_RETURN(event_log_, AppendLog::Open(opt_.event_log_path));
  return Status::Ok();
}

Status Worker::FormGroup(const Generation& g) {
  sync_.reset();
  pg_.reset();
  const train::DistributedSpec& d = spec_.distributed;
  // A member whose liveness lapsed while the group is built (SIGKILLed after
  // the rendezvous formed it) would hold the others for Gloo's connect
  // timeout, five times the group's: the build is abandoned instead.
  auto gone = [&] { return FirstMemberGone(backend_.kv.get(), g, opt_.id); };
  auto store =
      c10::make_intrusive<c10d::PrefixStore>(g.store_prefix(spec_.name), backend_.group_store);
  auto pg = groups_.Build(std::move(store), g.rank, g.world_size(),
                          {.host = opt_.host,
                           .timeout = Ms(d.collective_timeout_s),
                           .poll = std::max(Ms(d.liveness_ttl_s) / 12, Ms(0.05))},
                          gone);
  if (!pg.ok()) {
    return AbortedError(fmt::format("forming generation {}: {}", g.number, pg.status().message()));
  }
  pg_ = std::move(pg).value();
  SPOT_ASSIGN_OR_RETURN(Compression kind, ParseCompression(d.compression));
  CompressionOptions co{.kind = kind,
                        .powersgd_rank = static_cast<int>(d.powersgd_rank),
                        .topk_ratio = d.topk_ratio,
                        .warmup_steps = d.compression_warmup_steps};
  SPOT_ASSIGN_OR_RETURN(sync_, GlooSync::Create(*pg_, *model_,
                                                {.compression = co,
                                                 .timeout = Ms(d.collective_timeout_s),
                                                 .slowdown = opt_.slowdown}));
  std::vector<double> rates;
  for (const MemberInfo& m : g.members) rates.push_back(m.samples_per_s);
  weights_ = d.balance ? WeightsFromThroughput(rates) : std::vector<double>(rates.size(), 1.0);
  return Status::Ok();
}

// Rank 0 of a generation is the one checkpoint writer. A worker that becomes
// it reopens the store (another writer may have added versions meanwhile).
Status Worker::BecomeWriter(bool writer) {
  if (!writer) {
    if (ckpt_) SPOT_RETURN_IF_ERROR(ckpt_->Flush());
    ckpt_.reset();
    return Status::Ok();
  }
  if (ckpt_) return Status::Ok();
  SPOT_ASSIGN_OR_RETURN(ckpt_, train::Checkpointer::Open(spec_));
  return Status::Ok();
}

// Rank 0 when no worker holds the state: the newest checkpoint, or a fresh
// start (from the job's pretrained weights, if any); broadcast to the rest.
Status Worker::ResumeFromCheckpoint() {
  if (spec_.resume != "never") {
    spdlog::info("no worker holds the state: looking for a checkpoint");
    SPOT_ASSIGN_OR_RETURN(train::ResumeInfo r, ckpt_->Resume(Refs()));
    if (r.version >= 0) {
      restored_step_ = r.step;
      return Status::Ok();
    }
  }
  return train::StartFromPretrained(spec_, *model_);
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
  runner_->Reset();
  if (train_.shards) SPOT_RETURN_IF_ERROR(HoldShards(g));
  // Rank 0 reports the layer groups (the gradients are global: one is enough).
  runner_->set_layer_stats_every(g.rank == 0 && opt_.observer.on_step ? 10 : 0);
  stragglers_.emplace(StragglerOptions{.factor = spec_.distributed.straggler_factor,
                                       .seconds = spec_.distributed.straggler_seconds});
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
  if (event_log_.on()) {
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
                        {"unix_ms", RealClock()->NowUnixMs()}};
    event_log_.Append(e.dump() + "\n");
  }
  return Status::Ok();
}

// An image folder held in shards: every rank computes the generation's owners
// from the members' ids, loads its own shards (the nearest cache tier first:
// a survivor takes over a lost member's shards from the durable copy) and
// trains, in every batch, on the samples of its own shards.
Status Worker::HoldShards(const Generation& g) {
  train::ImageShards& shards = *train_.shards;
  std::vector<std::string> ids;
  for (const MemberInfo& m : g.members) ids.push_back(m.id);
  // The shards of the samples trained on (train_limit may leave some out).
  const int64_t count = (train_.size() + shards.shard_size() - 1) / shards.shard_size();
  const int64_t slots = runner_->shard_slots();
  std::vector<int32_t> owners = train::ShardOwners(count, slots, ids);
  const auto my_slots = std::count(owners.begin(), owners.begin() + slots, g.rank);
  std::vector<int64_t> mine;
  int64_t held = 0;
  for (int64_t s = 0; s < count; ++s) {
    if (owners[static_cast<size_t>(s)] != g.rank) continue;
    mine.push_back(s);
    held += shards.Holds(s);
  }
  const int64_t before = shards.held();
  const train::DataCacheStats was = shards.stats();
  const auto t0 = Clock::now();
  Status st = shards.Load(mine);
  if (!st.ok()) {
    return st.code() == StatusCode::kInvalidArgument
               ? st.WithContext(spec_.source + ": dataset.path")
               : st;
  }
  const train::DataCacheStats now = shards.stats();
  const int64_t loaded = shards.held() - before;
  summary_.shards_loaded += loaded;
  std::string from;
  for (int t = 0; t < train::kCacheTiers; ++t) {
    const int64_t n = now.shards[t] - was.shards[t];
    if (n > 0) {
      from +=
          fmt::format("{}{} {}", from.empty() ? "" : ", ", n,
                      t == 3 ? "decoded" : train::CacheTierName(static_cast<train::CacheTier>(t)));
    }
  }
  spdlog::info(
      "generation {}: data shards: {} of {} ({} of {} slots) are rank {} of {}'s; {} held "
      "already, {} loaded{} ({:.2f} s)",
      g.number, mine.size(), count, my_slots, slots, g.rank, g.world_size(), held, loaded,
      from.empty() ? "" : " (" + from + ")", Seconds(t0, Clock::now()));
  // With distributed.balance the parts follow the workers' speeds instead,
  // and a part takes what it lacks from other ranks' shards.
  runner_->SetShardOwners(shards.shard_size(), std::move(owners),
                          spec_.distributed.balance ? -1 : g.rank);
  return Status::Ok();
}

Result<StepResult> Worker::Step(const Generation& g, Slice batch) {
  const auto t0 = Clock::now();
  const Slice mine =
      runner_->PartsByOwner() ? runner_->OwnPart(batch) : SplitBatch(batch, weights_)[g.rank];
  GlooSync::Control control{.stop = StopWanted(), .samples_per_s = rate_};
  if (g.rank == 0 && Seconds(last_reform_check_, Clock::now()) >= 0.1) {
    last_reform_check_ = Clock::now();
    auto reform = rdzv_->ShouldReform(g.number);
    control.reform = reform.ok() && *reform;
  }
  sync_->SetControl(control);
  SPOT_ASSIGN_OR_RETURN(train::StepOutcome o,
                        runner_->Run(batch, mine, *sync_, bool(opt_.observer.on_step)));
  if (o.overflow && g.rank == 0) spdlog::info("{}", train::OverflowText(o, counters_));
  if (mine.size() > 0 && sync_->busy_seconds() > 0) {
    double r = static_cast<double>(mine.size()) / sync_->busy_seconds();
    rate_ = rate_ == 0 ? r : 0.8 * rate_ + 0.2 * r;
  }
  const StepResult result{
      .committed = o.committed, .reform = sync_->reform(), .stop = sync_->stop(), .loss = o.loss};
  if (!o.committed) {
    SPOT_RETURN_IF_ERROR(RollBack(g, o));
    return result;
  }
  if (g.rank == 0 && stragglers_) {
    const double now = std::chrono::duration<double>(Clock::now().time_since_epoch()).count();
    for (int r : stragglers_->Observe(now, sync_->rates())) {
      ++summary_.stragglers;
      spdlog::warn(
          "straggler: rank {} ({}) computes {:.0f} samples/s against the group's median {:.0f}, "
          "more than {:g}x slower for {:g} s",
          r, g.members[r].id, sync_->rates()[r], stragglers_->median(),
          spec_.distributed.straggler_factor, spec_.distributed.straggler_seconds);
    }
  }
  // Every rank sees the same throughputs: re-balance the split now and then.
  if (spec_.distributed.balance && ++steps_in_generation_ % kBalanceEvery == 0) {
    weights_ = WeightsFromThroughput(sync_->rates());
  }
  summary_.bytes_sent += sync_->comm().bytes_sent;
  last_step_bytes_ = sync_->comm().bytes_sent;
  ++summary_.steps_here;
  LogStep(g, o, batch, mine, Seconds(t0, Clock::now()));
  return result;
}

// Every rank judged the same global loss: rank 0 restores an earlier version
// and broadcasts it, skip list and learning-rate scale included.
Status Worker::RollBack(const Generation& g, const train::StepOutcome& o) {
  SPOT_RETURN_IF_ERROR(
      train::RollbackAllowed(spec_.rollback, counters_.rollbacks, o.anomaly, counters_.step + 1));
  if (g.rank == 0) SPOT_RETURN_IF_ERROR(ckpt_->Rollback(Refs(), o.batch, o.anomaly).status());
  if (g.world_size() > 1) SPOT_RETURN_IF_ERROR(BroadcastState(*pg_, 0, Refs()).status());
  runner_->Reset();
  return Status::Ok();
}

void Worker::LogStep(const Generation& g, const train::StepOutcome& o, Slice batch, Slice mine,
                     double step_s) {
  sample_log_.Append(fmt::format("{},{},{},{},{},{},{},{},{}\n", counters_.step, counters_.epoch,
                                 g.number, g.world_size(), g.rank, batch.begin, batch.end,
                                 mine.begin, mine.end));
  if (g.rank == 0) step_log_.Append(StepLogLine({counters_.step, counters_.epoch, o.loss, o.lr}));
  if (opt_.observer.on_step) {
    std::vector<PhaseTime> phases;
    phases.reserve(o.spans.size());
    for (const train::PhaseSpan& p : o.spans) {
      phases.push_back({train::StepPhaseName(p.phase), p.start, p.seconds});
    }
    std::vector<LayerStats> layers;
    for (const train::LayerGroupStats& l : o.layers) {
      layers.push_back({l.group, l.grad_norm, l.update_ratio});
    }
    opt_.observer.on_step({.step = counters_.step,
                           .epoch = counters_.epoch,
                           .generation = g.number,
                           .world = static_cast<int>(g.world_size()),
                           .rank = g.rank,
                           .loss = o.loss,
                           .lr = o.lr,
                           .grad_norm = o.grad_norm,
                           .step_seconds = step_s,
                           .compute_seconds = o.compute_seconds,
                           .collective_seconds = sync_->collective_seconds(),
                           .samples = mine.size(),
                           .batch = batch.size(),
                           .phases = std::move(phases),
                           .layers = std::move(layers),
                           .stragglers = stragglers_ && g.rank == 0
                                             ? static_cast<int>(stragglers_->stragglers().size())
                                             : 0});
  }
}

Status Worker::Evaluate(const Generation& g, int64_t epoch, bool partial) {
  Slice all{0, test_.size()};
  Slice mine = SplitBatch(all, std::vector<double>(g.world_size(), 1.0))[g.rank];
  train::EvalSums e = train::EvaluateRange(*model_, test_, mine.begin, mine.end, spec_);
  at::Tensor sums = at::tensor({e.correct, e.loss_sum, e.count}, at::kDouble);
  SPOT_RETURN_IF_ERROR(AllReduceOrAbort(*pg_, sums, "evaluation all-reduce"));
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
    spdlog::info("epoch {}{} step {}: {} ({} workers)", epoch + 1, partial ? " (partial)" : "",
                 counters_.step,
                 train::EvalText(spec_.loss, summary_.test_accuracy, summary_.test_loss),
                 g.world_size());
  }
  return Status::Ok();
}

Status Worker::MaybeSave(bool force) {
  if (!ckpt_ || ckpt_->last_saved_step() == counters_.step) return Status::Ok();
  // The same rule as `spot train`: Young/Daly capped by measured overhead, or every N steps.
  if (!force && !ckpt_->Due(counters_.step)) return Status::Ok();
  const auto save_start = Clock::now();
  SPOT_ASSIGN_OR_RETURN(double stall, ckpt_->Save(Refs()));
  if (opt_.observer.on_checkpoint) {
    opt_.observer.on_checkpoint(
        {.step = counters_.step, .stall_seconds = stall, .start = save_start});
  }
  for (const ckpt::SaveReport& r : ckpt_->TakeCompleted()) {
    if (opt_.observer.on_checkpoint_written) {
      opt_.observer.on_checkpoint_written(
          {.version = r.info.id, .file_bytes = r.info.file_bytes, .write_seconds = r.write_s});
    }
  }
  return Status::Ok();
}

// After a committed or skipped batch: evaluation at an epoch's end, at the
// last step and every eval_every steps.
Status Worker::AfterBatch(const Generation& g, const train::BatchEnd& end) {
  if (!train::EvaluationDue(spec_, end, counters_.step, evaluated_step_)) return Status::Ok();
  return Evaluate(g, end.epoch, !end.epoch_done);
}

Result<Worker::Outcome> Worker::TrainGeneration(const Generation& g) {
  // Unlike `spot train`, no save of the initial state: on a spot instance the
  // first seconds may already be a notice's, and that save would compete with
  // the one the notice needs. A rollback goes back to the newest checkpoint.
  while (!runner_->Finished()) {
    const Slice batch = runner_->NextBatch();
    if (runner_->NextIsSkipped()) {
      SPOT_RETURN_IF_ERROR(AfterBatch(g, runner_->Advance(batch)));
      continue;
    }
    const auto step_start = Clock::now();
    const bool saving_at_start = ckpt_ && ckpt_->busy();
    SPOT_ASSIGN_OR_RETURN(StepResult r, Step(g, batch));
    if (r.committed) {
      if (ckpt_)
        ckpt_->RecordStep(Seconds(step_start, Clock::now()), saving_at_start || ckpt_->busy());
      SPOT_RETURN_IF_ERROR(AfterBatch(g, runner_->Advance(batch)));
      SPOT_RETURN_IF_ERROR(MaybeSave(false));
    }
    if (g.rank == 0 && Seconds(last_progress_, Clock::now()) >= opt_.log_interval_s) {
      double rate = static_cast<double>((counters_.step - progress_step_) * spec_.batch_size) /
                    Seconds(last_progress_, Clock::now());
      spdlog::info("step {}/{} epoch {} loss {:.4f}: {} workers, {:.0f} samples/s", counters_.step,
                   runner_->total_steps(), counters_.epoch + 1, r.loss, g.world_size(), rate);
      last_progress_ = Clock::now();
      progress_step_ = counters_.step;
    }
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
  std::vector<std::string> stragglers;
  if (stragglers_ && g.rank == 0) {
    for (int rank : stragglers_->stragglers()) {
      if (rank < g.world_size()) stragglers.push_back(g.members[rank].id);
    }
  }
  const ProgressReport r{.job = spec_.name,
                         .step = counters_.step,
                         .total_steps = runner_->total_steps(),
                         .epoch = counters_.epoch,
                         .loss = last_loss_,
                         .test_accuracy = counters_.last_test_accuracy,
                         .world = g.world_size(),
                         .generation = g.number,
                         .restored_step = restored_step_,
                         .done = done,
                         .stragglers = std::move(stragglers)};
  Status st = WriteFileAtomically(opt_.progress_path, ProgressReportJson(r) + "\n");
  if (!st.ok()) spdlog::warn("progress file: {}", st.message());
}

Status Worker::WriteOutputs(const Generation& g) {
  SPOT_RETURN_IF_ERROR(MaybeSave(true));
  if (ckpt_) SPOT_RETURN_IF_ERROR(ckpt_->Flush());
  if (g.rank != 0) return Status::Ok();
  std::string model_path = (std::filesystem::path(spec_.output_dir) / "model.pt").string();
  SPOT_RETURN_IF_ERROR(train::ExportStateDict(*model_, model_path));
  nlohmann::json j = {
      {"job", spec_.name},
      {"model", train::ModelName(spec_)},
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
      {"stragglers", summary_.stragglers},
      {"model_path", model_path}};
  SPOT_RETURN_IF_ERROR(WriteFileAtomically(JobFiles{spec_.output_dir}.summary(), j.dump(2) + "\n"));
  WriteProgress(g, 0, /*done=*/true);
  return Status::Ok();
}

// Stopped by a signal or a notice: the checkpoint of this step, flushed in time.
Status Worker::FinishStop(const Generation& g) {
  summary_.stopped_by_signal = g_stop_signal.load();
  summary_.stopped_by_request = g_stop_requested.load();
  SPOT_RETURN_IF_ERROR(MaybeSave(true));
  if (ckpt_) {
    // A notice's deadline, less a margin for leaving; else the job's flush budget.
    auto deadline = Clock::now() + Ms(spec_.checkpoint.flush_deadline_s);
    if (summary_.stopped_by_request && g_stop_deadline_unix_s.load() > 0) {
      deadline = Clock::now() +
                 Ms(std::max(0.05, g_stop_deadline_unix_s.load() - RealClock()->NowUnixS() - 0.2));
    }
    Status flushed = ckpt_->Flush(deadline);
    if (!flushed.ok() && summary_.stopped_by_request &&
        flushed.code() == StatusCode::kDeadlineExceeded) {
      // The notice's time has whole seconds: the reclaim may still be up
      // to a second away. Keep going until done or killed.
      spdlog::warn("{}; still flushing until the reclaim", flushed.message());
      flushed = ckpt_->Flush();
    }
    SPOT_RETURN_IF_ERROR(flushed);
    if (summary_.stopped_by_request) {
      summary_.stop_flush_seconds = RealClock()->NowUnixS() - g_stop_request_wall.load();
      spdlog::info("notice: checkpoint of step {} flushed {:.3f} s after the notice",
                   counters_.step, summary_.stop_flush_seconds);
    }
  }
  if (g.rank == 0) WriteProgress(g, 0, false, /*force=*/true);
  return Status::Ok();
}

Result<WorkerSummary> Worker::Run() {
  const auto start = Clock::now();
  std::optional<Generation> last;  // the newest generation this worker trained in
  while (true) {
    MemberInfo me{.id = opt_.id, .samples_per_s = rate_, .step = have_state_ ? counters_.step : -1};
    const auto t0 = Clock::now();
    Result<Generation> joined = rdzv_->Join(me);
    if (!joined.ok() && joined.status().code() == StatusCode::kAborted && StopWanted()) {
      // Told to stop while waiting for a generation: the state held is the
      // last committed step's; the writer of the last generation saves it.
      if (last) {
        SPOT_RETURN_IF_ERROR(FinishStop(*last));
      } else {
        summary_.stopped_by_signal = g_stop_signal.load();
        summary_.stopped_by_request = g_stop_requested.load();
      }
      break;
    }
    SPOT_RETURN_IF_ERROR(joined.status());
    Generation g = std::move(joined).value();
    SetLogContext({{"rank", g.rank}, {"generation", g.number}});
    ++summary_.generations;
    Status st = FormGroup(g);
    if (st.ok()) st = SyncState(g, t0);
    // A failed state broadcast may have left the state half-received: no
    // stop may save it.
    last.reset();
    if (st.ok()) last = g;
    const auto train_start = Clock::now();
    Result<Outcome> out = st.ok() ? TrainGeneration(g) : Result<Outcome>(st);
    train_seconds_ += Seconds(train_start, Clock::now());
    if (!out.ok()) {
      if (out.status().code() != StatusCode::kAborted) return out.status();
      // Close this group's connections now: peers still blocked in a
      // collective with us fail at once instead of at their timeout.
      sync_.reset();
      pg_.reset();
      ++summary_.abandoned_steps;
      spdlog::warn("generation {}: {}; re-forming", g.number, out.status().message());
      continue;
    }
    summary_.final_rank = g.rank;
    summary_.final_world = g.world_size();
    // A notice that came while peers were leaving: this rank's state is that
    // of the last committed step, the same as every member's, so the writer
    // saves it now instead of re-forming first (a new generation, under a
    // starved CPU, can take the notice's whole time).
    if (*out == Outcome::kReform && StopWanted()) *out = Outcome::kStopped;
    if (*out == Outcome::kReform) continue;
    if (*out == Outcome::kStopped) {
      SPOT_RETURN_IF_ERROR(FinishStop(g));
      break;
    }
    SPOT_RETURN_IF_ERROR(WriteOutputs(g));
    break;
  }
  sync_.reset();
  pg_.reset();
  (void)rdzv_->Leave();
  summary_.steps = counters_.step;
  summary_.samples_per_s = rate_;
  if (train_.shards) {
    summary_.shards =
        (train_.size() + train_.shards->shard_size() - 1) / train_.shards->shard_size();
    summary_.shards_held = train_.shards->held();
    // Held shards are never dropped: what the generations did not load, a batch did.
    summary_.shards_on_demand = summary_.shards_held - summary_.shards_loaded;
  }
  summary_.wall_seconds = Seconds(start, Clock::now());
  return summary_;
}

void RequestWorkerStop(double flush_deadline_unix_s) {
  g_stop_deadline_unix_s.store(flush_deadline_unix_s);
  g_stop_request_wall.store(RealClock()->NowUnixS());
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
    } catch (const std::invalid_argument& e) {  // a shard a batch needed failed to load
      return InvalidArgumentError(e.what());
    }
  }();
  if (options.handle_signals) {
    sigaction(SIGTERM, &old_term, nullptr);
    sigaction(SIGINT, &old_int, nullptr);
  }
  return r;
}

}  // namespace spot::dist
