#include "ckpt_workload.h"

#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <fmt/format.h>
#include <sys/resource.h>
#include <torch/nn/modules/linear.h>
#include <torch/optim/adam.h>
#include <torch/serialize.h>
#include <torch/utils.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <limits>
#include <optional>

#include "ckpt/async_saver.h"
#include "ckpt/blob_store.h"
#include "ckpt/codec.h"
#include "ckpt/format.h"
#include "ckpt/interval.h"
#include "ckpt/store.h"
#include "ckpt/torch_adapter.h"
#include "ckpt_bytes.h"
#include "ckpt_durable.h"
#include "ckpt_figures.h"
#include "ckpt_subject.h"
#include "cpu_load.h"
#include "report.h"
#include "train/fashion_mnist.h"
#include "train/model.h"
#include "train/step_runner.h"
#include "train/train_setup.h"
#include "train/train_state.h"

namespace spot::bench {
namespace {

namespace nn = torch::nn;

// ---------------------------------------------------------------------------
// The two training states.

// ~50M parameters: 784 -> 4096 -> 4096 -> 4096 -> 4096 -> 10 with ReLU
// (53,600,266 parameters; with Adam's two moments ~643 MB of f32 state).
class Mlp50M final : public train::Net {
 public:
  Mlp50M()
      : fc1_(register_module("fc1", nn::Linear(28 * 28, 4096))),
        fc2_(register_module("fc2", nn::Linear(4096, 4096))),
        fc3_(register_module("fc3", nn::Linear(4096, 4096))),
        fc4_(register_module("fc4", nn::Linear(4096, 4096))),
        fc5_(register_module("fc5", nn::Linear(4096, 10))) {}

  at::Tensor forward(const at::Tensor& x) override {
    at::Tensor h = fc1_(x.flatten(1)).relu_();
    h = fc2_(h).relu_();
    h = fc3_(h).relu_();
    h = fc4_(h).relu_();
    return fc5_(h);
  }

 private:
  nn::Linear fc1_, fc2_, fc3_, fc4_, fc5_;
};

// Training images as normalized float [n, 1, 28, 28] and labels as int64 [n].
struct Data {
  train::TensorSet set;
  bool real = true;
  std::string source;  // for the report
};

Data LoadData(const CkptBenchOptions& o) {
  Data d;
  auto set = train::LoadFashionMnist(o.dataset_path, train::Split::kTrain);
  if (set.ok()) {
    at::Tensor raw =
        at::from_blob(set->pixels.data(), {set->count, 1, set->rows, set->cols}, at::kByte);
    // The trainer's normalization (trainer.cc); .to() copies out of `set`.
    d.set.images =
        raw.to(at::kFloat).div_(255).sub_(train::kFashionMnistMean).div_(train::kFashionMnistStd);
    d.set.labels = at::from_blob(set->labels.data(), {set->count}, at::kByte).to(at::kLong);
    d.source =
        fmt::format("the {} Fashion-MNIST training images in {}", set->count, o.dataset_path);
    return d;
  }
  Progress(fmt::format("ckpt: cannot load Fashion-MNIST ({}); training on random inputs instead",
                       set.status().message()));
  d.real = false;
  d.set.images = at::randn({4096, 1, 28, 28});
  d.set.labels = at::randint(10, {4096}, at::kLong);
  d.source =
      fmt::format("RANDOM inputs (Fashion-MNIST could not be loaded: {})", set.status().message());
  return d;
}

std::unique_ptr<Subject> MakeSubject(const std::string& key, const Data& data,
                                     const CkptBenchOptions& o) {
  torch::manual_seed(static_cast<uint64_t>(o.seed));
  auto s = std::make_unique<Subject>();
  s->key = key;
  s->model = key == "cnn" ? train::MakeModel("cnn") : std::make_shared<Mlp50M>();
  s->optimizer =
      std::make_unique<torch::optim::Adam>(s->model->parameters(), torch::optim::AdamOptions(1e-3));
  for (const at::Tensor& p : s->model->parameters()) s->params += p.numel();
  s->title = key == "cnn" ? fmt::format("CNN + Adam ({} params)", s->params)
                          : fmt::format("50M MLP + Adam ({} params)", s->params);
  s->counters = {.seed = o.seed,
                 .batch_size = o.batch,
                 .model = key,
                 .optimizer = "adam",
                 .threads = o.threads,
                 .blas = "bench"};
  s->spec.model = key;
  s->spec.batch_size = o.batch;
  s->spec.seed = o.seed;
  s->spec.steps = std::numeric_limits<int64_t>::max() / 2;  // as long as the benchmark runs
  s->spec.optimizer = {.type = "adam", .lr = 1e-3};
  s->spec.rollback.enabled = false;
  s->runner.emplace(s->spec, data.set,
                    train::TrainRefs{s->model.get(), s->optimizer.get(), "adam", &s->counters});
  return s;
}

// Checkpoint files are kept in memory (ckpt::MemoryBlobStore) for measuring sizes and
// decoding without a disk.
using ckpt::MemoryBlobStore;

// ---------------------------------------------------------------------------
// 1. Blocking time per save.

Result<BlockingFigures> MeasureBlocking(Subject& s, const CkptBenchOptions& o,
                                        const std::string& dir) {
  BlockingFigures f;
  SPOT_ASSIGN_OR_RETURN(std::unique_ptr<ckpt::CheckpointStore> store,
                        ckpt::CheckpointStore::Open({.dir = dir + "/ours"}));
  ckpt::AsyncSaver saver(store.get(), ckpt::AsyncSaverOptions{});
  std::vector<at::Tensor> tensors = s.Tensors();
  std::vector<std::string> buffers;  // the anchor's preallocated (and touched) buffers
  for (const at::Tensor& t : tensors) {
    buffers.emplace_back(t.nbytes(), '\0');
    f.memcpy_bytes += t.nbytes();
  }
  auto copy_all = [&] {
    auto t0 = Clock::now();
    for (size_t k = 0; k < tensors.size(); ++k) {
      std::memcpy(buffers[k].data(), tensors[k].data_ptr(), buffers[k].size());
    }
    return Since(t0);
  };
  int64_t parent = -1;
  ckpt::Container* last = nullptr;
  for (int i = 0; i < kWarmupSaves + o.saves; ++i) {
    // Alternate which side runs first.
    double anchor = i % 2 == 1 ? copy_all() : 0;
    auto t0 = Clock::now();
    SPOT_ASSIGN_OR_RETURN(ckpt::Container * c, saver.Acquire());
    c->Recycle();
    SPOT_RETURN_IF_ERROR(train::CaptureTrainState(*s.model, *s.optimizer, "adam", s.counters, c));
    parent = saver.Submit(c, {.step = s.counters.step, .parent = parent});
    double ours = Since(t0);
    last = c;
    // The background write, untimed: the next save starts with the writer idle,
    // as it does at any interval longer than a write.
    SPOT_RETURN_IF_ERROR(saver.Flush());
    if (i % 2 == 0) anchor = copy_all();
    if (i >= kWarmupSaves) {
      f.ours_s.push_back(ours);
      f.memcpy_s.push_back(anchor);
    }
  }
  f.snapshot_bytes = last->payload_bytes();  // the writer is done with it
  if (saver.TakeCompleted().size() != static_cast<size_t>(kWarmupSaves + o.saves)) {
    return InternalError("blocking: not every save was committed");
  }
  std::filesystem::create_directories(dir + "/torch");
  const std::string model_pt = dir + "/torch/model.pt", optim_pt = dir + "/torch/optimizer.pt";
  for (int i = 0; i < kTorchSaves; ++i) {
    auto t0 = Clock::now();
    torch::save(s.model, model_pt);
    torch::save(*s.optimizer, optim_pt);
    f.torch_save_s.push_back(Since(t0));
  }
  f.torch_bytes = std::filesystem::file_size(model_pt) + std::filesystem::file_size(optim_pt);
  return f;
}

// ---------------------------------------------------------------------------
// 2. Training-time overhead.

// Minor page faults taken by the calling thread so far.
int64_t MainThreadFaults() {
  rusage u{};
  getrusage(RUSAGE_THREAD, &u);
  return u.ru_minflt;
}

// One training run as trainer.cc runs it: with checkpointing, a save before
// the first step (the trainer saves its initial state when rollback is on,
// the default), then a save whenever the interval has passed since the last
// one (IntervalPolicy::IntervalSeconds() for kDefault, `aggressive_s` for
// kAggressive). The policy sees every step and save either way. The run ends
// when the last save is written (Flush), so it accounts for all the work of
// its saves.
Result<RunFigures> TrainRun(Subject& s, Arm arm, int64_t steps, double aggressive_s,
                            const std::string& dir) {
  RunFigures r;
  r.steps = steps;
  std::unique_ptr<ckpt::CheckpointStore> store;
  std::unique_ptr<ckpt::AsyncSaver> saver;
  std::optional<ckpt::IntervalPolicy> policy;
  if (arm != Arm::kPlain) {
    std::filesystem::remove_all(dir);
    SPOT_ASSIGN_OR_RETURN(store, ckpt::CheckpointStore::Open({.dir = dir}));
    saver = std::make_unique<ckpt::AsyncSaver>(
        store.get(), ckpt::AsyncSaverOptions{.delta = true, .full_every = 8});
    policy.emplace(ckpt::IntervalOptions{});
  }
  int64_t parent = -1;
  Clock::time_point last_save;
  auto save = [&]() -> Status {
    auto t0 = Clock::now();
    SPOT_ASSIGN_OR_RETURN(ckpt::Container * c, saver->Acquire());
    c->Recycle();
    SPOT_RETURN_IF_ERROR(train::CaptureTrainState(*s.model, *s.optimizer, "adam", s.counters, c));
    parent = saver->Submit(c, {.step = s.counters.step, .parent = parent, .meta_json = "{}"});
    double blocking = Since(t0);
    policy->RecordSave(blocking);
    r.blocking_s += blocking;
    ++r.saves;
    last_save = Clock::now();
    return Status::Ok();
  };
  CpuLoadMeter meter;
  auto t0 = Clock::now();
  last_save = t0;
  if (saver) SPOT_RETURN_IF_ERROR(save());
  for (int64_t i = 0; i < steps; ++i) {
    bool busy = saver && saver->busy();
    int64_t faults = MainThreadFaults();
    auto st = Clock::now();
    s.Step();
    double step_s = Since(st);
    r.faults += MainThreadFaults() - faults;
    r.step_s.push_back(step_s);
    if (!saver) {
      r.busy.push_back(false);
      continue;
    }
    // Background work (a write, or a replication) under way at the start or
    // at the end of the step overlapped it; the policy sees it as trainer.cc
    // shows it.
    r.busy.push_back(busy || saver->busy());
    policy->RecordStep(step_s, r.busy.back());
    double interval = arm == Arm::kDefault ? policy->IntervalSeconds() : aggressive_s;
    if (Since(last_save) >= interval) SPOT_RETURN_IF_ERROR(save());
  }
  if (saver) {
    auto f0 = Clock::now();
    SPOT_RETURN_IF_ERROR(saver->Flush());
    r.flush_s = Since(f0);
  }
  r.wall_s = Since(t0);
  r.other_cores = meter.OtherCores();
  if (!std::isfinite(s.loss)) return InternalError("training diverged (loss is not finite)");
  if (saver) {
    std::vector<ckpt::SaveReport> done = saver->TakeCompleted();
    if (done.size() != static_cast<size_t>(r.saves)) {
      return InternalError(fmt::format("{} saves submitted, {} committed", r.saves, done.size()));
    }
    for (const ckpt::SaveReport& rep : done) {
      (rep.info.base >= 0 ? r.delta_write_s : r.full_write_s).push_back(rep.write_s);
      if (rep.info.base >= 0) ++r.delta_saves;
    }
    r.policy_cost_s = policy->CostSeconds();
    r.policy_interval_s = policy->IntervalSeconds();
    saver.reset();
    store.reset();
    std::filesystem::remove_all(dir);
  }
  return r;
}

// ---------------------------------------------------------------------------
// 5. Restore time.

Result<RestoreFigures> MeasureRestore(Subject& s, const CkptBenchOptions& o, const std::string& dir,
                                      ckpt::Container* scratch) {
  RestoreFigures f;
  // Versions written the way the trainer writes them (AsyncSaver, sub-delta,
  // full_every 8), one training step apart: a full version, then deltas up to
  // chain depth 3 (kept as deltas whatever they save).
  SPOT_ASSIGN_OR_RETURN(std::unique_ptr<ckpt::CheckpointStore> store,
                        ckpt::CheckpointStore::Open({.dir = dir + "/ours"}));
  // The full state again, its chunks stored as is where they save little.
  SPOT_ASSIGN_OR_RETURN(std::unique_ptr<ckpt::CheckpointStore> raw_store,
                        ckpt::CheckpointStore::Open({.dir = dir + "/raw"}));
  Fingerprint full_print;
  int64_t full_step = 0;
  std::vector<int64_t> ids;
  {
    // Deltas whatever they save: the chain is what is measured.
    ckpt::AsyncSaver saver(store.get(), ckpt::AsyncSaverOptions{.min_delta_saving = 0});
    int64_t parent = -1;
    for (int v = 0; v <= kRestoreChainDepth; ++v) {
      if (v > 0) s.Step();
      SPOT_ASSIGN_OR_RETURN(ckpt::Container * c, saver.Acquire());
      SPOT_RETURN_IF_ERROR(s.Capture(c));
      parent = saver.Submit(c, {.step = s.counters.step, .parent = parent});
      ids.push_back(parent);
      SPOT_RETURN_IF_ERROR(saver.Flush());
      if (v == 0) {
        full_step = s.counters.step;
        SPOT_ASSIGN_OR_RETURN(full_print, TakeFingerprint(s, scratch));
        ckpt::Container raw;
        SPOT_RETURN_IF_ERROR(s.Capture(&raw));
        ckpt::SaveRequest req{.step = full_step};
        req.plan.raw_below_saving = kRawFullBelowSaving;
        SPOT_ASSIGN_OR_RETURN(ckpt::VersionInfo rv, raw_store->Save(raw, req));
        f.raw_full_file_bytes = rv.file_bytes;
        SPOT_ASSIGN_OR_RETURN(
            ckpt::CheckpointFile rf,
            ckpt::CheckpointFile::Open(raw_store->tier(ckpt::Tier::kLocal),
                                       ckpt::CheckpointStore::DataFileName(rv.id)));
        for (const ckpt::RecordEntry& e : rf.records()) {
          for (size_t k = 0; k < e.chunks.size(); ++k) {
            ++f.raw_full_chunks;
            if (rf.StoredRaw(e, k)) ++f.raw_full_raw_chunks;
          }
        }
      }
    }
    for (const ckpt::SaveReport& r : saver.TakeCompleted()) {
      if (r.info.base < 0) {
        f.full_write_s = r.write_s;
      } else {
        f.delta_write_s.push_back(r.write_s);
        f.delta_file_bytes = r.info.file_bytes;
      }
    }
  }
  // The version files, opened (and their indexes checked) once: what the
  // store's decode does before reading chunks.
  std::vector<ckpt::CheckpointFile> files;
  for (int64_t id : ids) {
    SPOT_ASSIGN_OR_RETURN(ckpt::CheckpointFile file,
                          ckpt::CheckpointFile::Open(store->tier(ckpt::Tier::kLocal),
                                                     ckpt::CheckpointStore::DataFileName(id)));
    files.push_back(std::move(file));
  }
  std::vector<const ckpt::CheckpointFile*> chain;
  for (const ckpt::CheckpointFile& file : files) chain.push_back(&file);
  ckpt::ChunkCodec codec;
  SPOT_ASSIGN_OR_RETURN(Fingerprint delta_print, TakeFingerprint(s, scratch));
  // torch::save of the newest state.
  std::filesystem::create_directories(dir + "/torch");
  const std::string model_pt = dir + "/torch/model.pt", optim_pt = dir + "/torch/optimizer.pt";
  torch::save(s.model, model_pt);
  torch::save(*s.optimizer, optim_pt);

  // Scrambles the state, decodes with `decode` (timed alone, then with the
  // restore into the tensors) and checks the state against `want`.
  auto timed_decode = [&](const auto& decode, const Fingerprint& want, const char* what,
                          std::vector<double>& load_s, std::vector<double>& total_s) -> Status {
    s.Scramble();
    const auto t0 = Clock::now();
    {
      SPOT_ASSIGN_OR_RETURN(ckpt::Container c, decode());
      load_s.push_back(Since(t0));
      SPOT_RETURN_IF_ERROR(s.Restore(c));
    }
    total_s.push_back(Since(t0));
    SPOT_ASSIGN_OR_RETURN(Fingerprint got, TakeFingerprint(s, scratch));
    return CheckSame(want, got, what);
  };
  // Where a restore into the model decodes its parameters and buffers: into
  // themselves, under the names CaptureTrainState gives them.
  ckpt::TensorPlacement into_model;
  s.PlaceIntoModel(&into_model);
  // LoadNewestValid(before_step, place) + restore, timed; checked against `want`.
  auto timed_load = [&](int64_t before_step, const ckpt::RecordPlacement* place,
                        const Fingerprint& want, const char* what, std::vector<double>& load_s,
                        std::vector<double>& total_s,
                        const ckpt::CheckpointStore* from = nullptr) -> Status {
    s.Scramble();
    const auto t0 = Clock::now();
    {
      SPOT_ASSIGN_OR_RETURN(ckpt::CheckpointStore::Loaded l,
                            (from ? from : store.get())->LoadNewestValid(before_step, place));
      load_s.push_back(Since(t0));
      SPOT_RETURN_IF_ERROR(s.Restore(l.container));
    }
    total_s.push_back(Since(t0));
    SPOT_ASSIGN_OR_RETURN(Fingerprint got, TakeFingerprint(s, scratch));
    return CheckSame(want, got, what);
  };
  for (int i = 0; i < o.restores; ++i) {
    SPOT_RETURN_IF_ERROR(timed_load(full_step + 1, into_model.place(), full_print,
                                    "restoring the full version into the model",
                                    f.full_placed_load_s, f.full_placed_s));
    SPOT_RETURN_IF_ERROR(timed_load(std::numeric_limits<int64_t>::max(), into_model.place(),
                                    delta_print, "restoring the delta version into the model",
                                    f.delta_placed_load_s, f.delta_placed_s));
    SPOT_RETURN_IF_ERROR(timed_load(std::numeric_limits<int64_t>::max(), into_model.place(),
                                    full_print, "restoring the raw full version into the model",
                                    f.raw_full_placed_load_s, f.raw_full_placed_s,
                                    raw_store.get()));
    s.Scramble();
    auto t0 = Clock::now();
    // The newest version before the first delta: the full one.
    SPOT_ASSIGN_OR_RETURN(ckpt::CheckpointStore::Loaded lf, store->LoadNewestValid(full_step + 1));
    f.full_load_s.push_back(Since(t0));
    SPOT_RETURN_IF_ERROR(s.Restore(lf.container));
    f.full_s.push_back(Since(t0));
    if (lf.info.base >= 0) return InternalError("restore: the first version is a delta");
    f.full_file_bytes = lf.info.file_bytes;
    SPOT_ASSIGN_OR_RETURN(Fingerprint got, TakeFingerprint(s, scratch));
    SPOT_RETURN_IF_ERROR(CheckSame(full_print, got, "restoring the full version"));

    SPOT_RETURN_IF_ERROR(timed_decode([&] { return files[0].ReadAll(nullptr, codec); }, full_print,
                                      "restoring the full version directly", f.full_direct_load_s,
                                      f.full_direct_s));
    SPOT_RETURN_IF_ERROR(timed_decode(
        [&] { return files[0].ReadAll(nullptr, codec, /*threads=*/1); }, full_print,
        "restoring the full version on one thread", f.full_serial_load_s, f.full_serial_s));
    SPOT_RETURN_IF_ERROR(timed_decode(
        [&] { return ckpt::CheckpointFile::ReadChain(chain, nullptr, codec); }, delta_print,
        "restoring the delta chain in one pass", f.chain_load_s, f.chain_s));

    s.Scramble();
    t0 = Clock::now();
    SPOT_ASSIGN_OR_RETURN(ckpt::CheckpointStore::Loaded ld, store->LoadNewestValid());
    f.delta_load_s.push_back(Since(t0));
    SPOT_RETURN_IF_ERROR(s.Restore(ld.container));
    f.delta_s.push_back(Since(t0));
    f.delta_depth = ld.info.chain_depth;
    if (ld.info.chain_depth != kRestoreChainDepth) {
      return InternalError(fmt::format("restore: the newest version has chain depth {}, not {}",
                                       ld.info.chain_depth, kRestoreChainDepth));
    }
    SPOT_ASSIGN_OR_RETURN(got, TakeFingerprint(s, scratch));
    SPOT_RETURN_IF_ERROR(CheckSame(delta_print, got, "restoring the delta version"));

    train::TrainerCounters counters = s.counters;
    s.Scramble();
    t0 = Clock::now();
    torch::load(s.model, model_pt);
    torch::load(*s.optimizer, optim_pt);
    f.torch_s.push_back(Since(t0));
    s.counters = counters;
    SPOT_ASSIGN_OR_RETURN(got, TakeFingerprint(s, scratch));
    SPOT_RETURN_IF_ERROR(CheckSame(delta_print, got, "torch::load", /*tensors_only=*/true));
  }

  // A restart in a new process, as after a preemption: the reps above run in
  // a process whose allocator may hand back memory a previous rep freed (the
  // trainer's malloc settings keep large blocks in the heap), which a new
  // process never has.
  SPOT_RETURN_IF_ERROR(MeasureRestarts(
      o,
      {.key = s.key,
       .dir = dir + "/ours",
       .before_step = full_step + 1,
       .scratch_dir = dir + "/restart"},
      dir + "/ours", full_print,
      {.key = s.key, .ours = false, .dir = dir + "/torch", .scratch_dir = dir + "/restart"},
      delta_print, &f.restart));
  return f;
}

// 5. Restore time, then 6. restarting from the durable tier (ckpt_durable.h).
Status MeasureRestoreInto(const std::string& key, Subject& s, const CkptBenchOptions& o,
                          const std::string& dir, SubjectFigures* f) {
  Progress(fmt::format(
      "ckpt {}: 5. restore, {} reps of full, delta (depth {}) and torch::load, then restarts in "
      "new processes",
      key, o.restores, kRestoreChainDepth));
  {
    ckpt::Container scratch;
    SPOT_ASSIGN_OR_RETURN(f->restore, MeasureRestore(s, o, dir + "/restore", &scratch));
  }
  std::filesystem::remove_all(dir + "/restore");
  SPOT_ASSIGN_OR_RETURN(f->durable, MeasureDurableRestart(s, o, dir + "/durable"));
  return Status::Ok();
}

// ---------------------------------------------------------------------------

Result<SubjectFigures> MeasureSubject(const std::string& key, const Data& data,
                                      const CkptBenchOptions& o) {
  const std::string dir = o.work_dir + "/ckpt/" + key;
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  SubjectFigures f;
  std::unique_ptr<Subject> s = MakeSubject(key, data, o);
  f.key = key;
  f.title = s->title;
  f.params = s->params;
  f.run_steps = key == "cnn" ? o.cnn_steps : o.mlp_steps;
  f.aggressive_s = key == "cnn" ? o.aggressive_interval_s : o.mlp_aggressive_interval_s;
  for (int i = 0; i < o.warmup_steps; ++i) s->Step();
  WaitForQuiet(o.quiet_cores, o.quiet_wait_s);
  CpuLoadMeter meter;
  if (o.restore_only) {
    SPOT_RETURN_IF_ERROR(MeasureRestoreInto(key, *s, o, dir, &f));
    f.other_cores = meter.OtherCores();
    std::filesystem::remove_all(dir);
    return f;
  }

  Progress(fmt::format("ckpt {}: 1. blocking time, {} + {} saves and memcpys, {} torch::save", key,
                       kWarmupSaves, o.saves, kTorchSaves));
  SPOT_ASSIGN_OR_RETURN(f.blocking, MeasureBlocking(*s, o, dir + "/blocking"));
  std::filesystem::remove_all(dir + "/blocking");

  Progress(
      fmt::format("ckpt {}: 3. bytes per save (snapshots {} steps apart)", key, kLongDeltaSteps));
  {
    ckpt::Container s0, s1, s10;
    SPOT_RETURN_IF_ERROR(s->Capture(&s0));
    s->Step();
    SPOT_RETURN_IF_ERROR(s->Capture(&s1));
    for (int i = 1; i < kLongDeltaSteps; ++i) s->Step();
    SPOT_RETURN_IF_ERROR(s->Capture(&s10));
    f.payload = s1.payload_bytes();
    SPOT_ASSIGN_OR_RETURN(f.bytes, MeasureBytes(s0, s1, s10));
    Progress(fmt::format("ckpt {}: 4. codec throughput", key));
    for (ckpt::Codec c : {ckpt::Codec::kShuffleZstd, ckpt::Codec::kPlanesZstd,
                          ckpt::Codec::kXorDelta, ckpt::Codec::kSubDelta, ckpt::Codec::kQ8Delta}) {
      SPOT_ASSIGN_OR_RETURN(CodecRow row, MeasureCodec(c, s0, s1));
      f.codecs.push_back(row);
    }
  }

  Progress(
      fmt::format("ckpt {}: 2. training overhead, {} x 3 runs of {} steps (plain, default "
                  "policy, a save every {:g} s)",
                  key, o.runs, f.run_steps, f.aggressive_s));
  s->Step();  // untimed, after the big allocations above
  for (int r = 0; r < o.runs; ++r) {
    for (size_t k = 0; k < kArms.size(); ++k) {
      Arm arm = kArms[(k + static_cast<size_t>(r)) % kArms.size()];  // rotate the order
      SPOT_ASSIGN_OR_RETURN(RunFigures run,
                            TrainRun(*s, arm, f.run_steps, f.aggressive_s, dir + "/run"));
      Progress(
          fmt::format("ckpt {}: run {}/{} {}: {:.2f} steps/s, {} saves, others {:.2f} "
                      "cores",
                      key, r + 1, o.runs,
                      arm == Arm::kPlain     ? "plain"
                      : arm == Arm::kDefault ? "default policy"
                                             : "aggressive",
                      static_cast<double>(run.steps) / run.wall_s, run.saves, run.other_cores));
      f.runs[arm].push_back(std::move(run));
    }
  }

  Progress(fmt::format("ckpt {}: 3. bytes per save, again at step {}", key, s->counters.step));
  {
    ckpt::Container before, after;
    SPOT_RETURN_IF_ERROR(s->Capture(&before));
    s->Step();
    SPOT_RETURN_IF_ERROR(s->Capture(&after));
    SPOT_ASSIGN_OR_RETURN(BytesRow row, MeasureLateDelta(before, after, s->counters.step));
    f.bytes.push_back(std::move(row));
  }

  SPOT_RETURN_IF_ERROR(MeasureRestoreInto(key, *s, o, dir, &f));
  f.other_cores = meter.OtherCores();
  std::filesystem::remove_all(dir);
  return f;
}

Result<std::string> Run(const CkptBenchOptions& o) {
  auto t0 = Clock::now();
  at::set_num_threads(o.threads);
  // Training runs here under the trainer's malloc settings.
  train::KeepActivationBuffersInHeap();
  for (const std::string& k : o.states) {
    if (k != "cnn" && k != "mlp50m") {
      return InvalidArgumentError("ckpt: unknown state '" + k + "' (want cnn or mlp50m)");
    }
  }
  torch::manual_seed(static_cast<uint64_t>(o.seed));
  Data data = LoadData(o);
  std::vector<SubjectFigures> all;
  for (const std::string& k : o.states) {
    SPOT_ASSIGN_OR_RETURN(SubjectFigures f, MeasureSubject(k, data, o));
    all.push_back(std::move(f));
  }
  return CkptReport(o, data.source, all, Since(t0));
}

}  // namespace

Status RunCkptRestartChild(const CkptBenchOptions& o) {
  try {
    at::set_num_threads(o.threads);
    // Ours under the trainer's malloc settings, as a job restarts;
    // torch::load under glibc's defaults, as a PyTorch job does.
    if (o.restart_child == "ours") train::KeepActivationBuffersInHeap();
    if (o.states.size() != 1) return InvalidArgumentError("restart child: one state expected");
    Data data;  // the step runner needs a data set; nothing trains here
    data.set.images = at::randn({64, 1, 28, 28});
    data.set.labels = at::randint(10, {64}, at::kLong);
    std::unique_ptr<Subject> s = MakeSubject(o.states[0], data, o);
    const auto t0 = Clock::now();
    if (o.restart_child == "ours") {
      SPOT_ASSIGN_OR_RETURN(
          std::unique_ptr<ckpt::CheckpointStore> store,
          ckpt::CheckpointStore::Open({.dir = o.restart_dir,
                                       .durable_dir = o.restart_durable_dir,
                                       .durable_max_chain = o.restart_durable_max_chain}));
      ckpt::TensorPlacement into_model;
      s->PlaceIntoModel(&into_model);
      SPOT_ASSIGN_OR_RETURN(ckpt::CheckpointStore::Loaded l,
                            store->LoadNewestValid(o.restart_before_step, into_model.place()));
      SPOT_RETURN_IF_ERROR(s->Restore(l.container));
    } else if (o.restart_child == "torch") {
      torch::load(s->model, o.restart_dir + "/model.pt");
      torch::load(*s->optimizer, o.restart_dir + "/optimizer.pt");
    } else {
      return InvalidArgumentError("restart child: '" + o.restart_child + "' (want ours or torch)");
    }
    const double seconds = Since(t0);
    ckpt::Container scratch;
    SPOT_ASSIGN_OR_RETURN(Fingerprint print, TakeFingerprint(*s, &scratch));
    std::ofstream out(o.restart_out, std::ios::trunc);
    out << fmt::format("{:.9f}\n", seconds);
    for (const auto& [name, sum] : print) out << name << ' ' << sum << '\n';
    out.close();
    if (!out) return UnavailableError(o.restart_out + ": cannot write");
    return Status::Ok();
  } catch (const c10::Error& e) {
    return InternalError(std::string("restart child: ") + e.what_without_backtrace());
  }
}

Result<std::string> RunCkptWorkload(const CkptBenchOptions& o) {
  Progress(fmt::format("ckpt: states {}", fmt::join(o.states, ", ")));
  try {
    return Run(o);
  } catch (const c10::Error& e) {
    return InternalError(std::string("ckpt workload: ") + e.what_without_backtrace());
  } catch (const std::filesystem::filesystem_error& e) {
    return UnavailableError(std::string("ckpt workload: ") + e.what());
  }
}

}  // namespace spot::bench
