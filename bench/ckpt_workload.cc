#include "ckpt_workload.h"

#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <fmt/format.h>
#include <malloc.h>
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
#include <map>
#include <optional>

#include "ckpt/async_saver.h"
#include "ckpt/blob_store.h"
#include "ckpt/codec.h"
#include "ckpt/format.h"
#include "ckpt/interval.h"
#include "ckpt/store.h"
#include "cpu_load.h"
#include "report.h"
#include "train/fashion_mnist.h"
#include "train/model.h"
#include "train/train_state.h"

namespace spot::bench {
namespace {

namespace nn = torch::nn;
using Clock = std::chrono::steady_clock;

double Since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

std::string Mb(double bytes) { return fmt::format("{:.1f}", bytes / 1e6); }
std::string Verdict(bool pass) { return pass ? "PASS" : "MISS"; }

constexpr int kWarmupSaves = 2;
constexpr int kTorchSaves = 3;       // torch::save reps (reference only)
constexpr int kLongDeltaSteps = 10;  // the "across 10 steps" delta
constexpr int kRestoreChainDepth = 3;
constexpr double kGoalBlocking = 1.5;    // ours / memcpy
constexpr double kGoalOverhead = 0.01;   // of training time, at the default interval
constexpr double kGoalFullRatio = 1.15;  // raw / shuffle-zstd
constexpr double kGoalDeltaRatio = 1.7;  // raw / xor-delta against the previous step
constexpr double kGoalCodecMbps = 500;   // per core, encode and decode

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
  at::Tensor images, labels;
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
    d.images =
        raw.to(at::kFloat).div_(255).sub_(train::kFashionMnistMean).div_(train::kFashionMnistStd);
    d.labels = at::from_blob(set->labels.data(), {set->count}, at::kByte).to(at::kLong);
    d.source =
        fmt::format("the {} Fashion-MNIST training images in {}", set->count, o.dataset_path);
    return d;
  }
  Progress(fmt::format("ckpt: cannot load Fashion-MNIST ({}); training on random inputs instead",
                       set.status().message()));
  d.real = false;
  d.images = at::randn({4096, 1, 28, 28});
  d.labels = at::randint(10, {4096}, at::kLong);
  d.source =
      fmt::format("RANDOM inputs (Fashion-MNIST could not be loaded: {})", set.status().message());
  return d;
}

// A model, its Adam optimizer and the trainer's counters, trained the way
// trainer.cc trains: index_select a shuffled batch, forward, backward, step.
struct Subject {
  std::string key;    // cnn | mlp50m
  std::string title;  // for the report
  std::shared_ptr<train::Net> model;
  std::unique_ptr<torch::optim::Adam> optimizer;
  train::TrainerCounters counters;
  const Data* data = nullptr;
  at::Tensor order, x, y;
  int64_t batch = 64;
  int64_t cursor = 0;
  int64_t params = 0;
  float loss = 0;

  void Step() {
    const int64_t n = data->images.size(0);
    if (cursor + batch > n) {
      cursor = 0;
      ++counters.epoch;
    }
    at::Tensor idx = order.slice(0, cursor, cursor + batch);
    at::index_select_out(x, data->images, 0, idx);
    at::index_select_out(y, data->labels, 0, idx);
    optimizer->zero_grad();
    at::Tensor l = at::cross_entropy_loss(model->forward(x), y);
    loss = l.item<float>();
    l.backward();
    optimizer->step();
    cursor += batch;
    ++counters.step;
    counters.index_in_epoch = cursor;
  }

  // What SaveCheckpoint in trainer.cc puts in a snapshot buffer.
  Status Capture(ckpt::Container* c) {
    c->Recycle();
    return train::CaptureTrainState(*model, *optimizer, "adam", counters, c);
  }

  Status Restore(const ckpt::Container& c) {
    SPOT_ASSIGN_OR_RETURN(train::TrainerCounters restored,
                          train::RestoreTrainState(c, *model, *optimizer, "adam"));
    counters = restored;
    return Status::Ok();
  }

  // Zeroes parameters and buffers and drops the Adam state (untimed), so a
  // restore must really bring all of them back.
  void Scramble() {
    torch::NoGradGuard no_grad;
    for (at::Tensor& p : model->parameters()) p.zero_();
    for (at::Tensor& b : model->buffers()) b.zero_();
    optimizer->state().clear();
    counters.step = -1;
  }

  // The tensors a snapshot copies: parameters, buffers, Adam's moments (in
  // that order; the few bytes of step counts, RNG state and counters left out).
  std::vector<at::Tensor> Tensors() {
    std::vector<at::Tensor> out;
    for (const at::Tensor& p : model->parameters()) out.push_back(p.detach());
    for (const at::Tensor& b : model->buffers()) out.push_back(b);
    auto& state = optimizer->state();
    for (const at::Tensor& p : model->parameters()) {
      auto it = state.find(c10::guts::to_string(p.unsafeGetTensorImpl()));
      if (it == state.end()) continue;
      auto& s = static_cast<torch::optim::AdamParamState&>(*it->second);
      out.push_back(s.exp_avg());
      out.push_back(s.exp_avg_sq());
    }
    return out;
  }
};

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
  s->data = &data;
  s->batch = o.batch;
  s->order = at::randperm(data.images.size(0), at::kLong);
  s->x = at::empty({o.batch, 1, data.images.size(2), data.images.size(3)});
  s->y = at::empty({o.batch}, at::kLong);
  return s;
}

// Per-record checksums of a state (captured into `scratch`).
using Fingerprint = std::vector<std::pair<std::string, uint64_t>>;

Result<Fingerprint> TakeFingerprint(Subject& s, ckpt::Container* scratch) {
  SPOT_RETURN_IF_ERROR(s.Capture(scratch));
  Fingerprint f;
  for (const ckpt::Record& r : scratch->records()) f.emplace_back(r.name, ckpt::Checksum(r.data));
  return f;
}

// InternalError naming the first record of `want` that `got` lacks or holds
// differently; with `tensors_only`, only model/ and optim/ records count.
Status CheckSame(const Fingerprint& want, const Fingerprint& got, std::string_view what,
                 bool tensors_only = false) {
  std::map<std::string_view, uint64_t> have;
  for (const auto& [name, sum] : got) have.emplace(name, sum);
  for (const auto& [name, sum] : want) {
    if (tensors_only && !name.starts_with("model/") && !name.starts_with("optim/")) continue;
    auto it = have.find(name);
    if (it == have.end()) return InternalError(fmt::format("{}: '{}' is missing", what, name));
    if (it->second != sum) {
      return InternalError(fmt::format("{}: '{}' differs from what was saved", what, name));
    }
  }
  return Status::Ok();
}

// `to` becomes a copy of `from` (reusing to's storage).
void CopyInto(const ckpt::Container& from, ckpt::Container* to) {
  to->Recycle();
  for (const ckpt::Record& r : from.records()) {
    std::span<char> d = to->AddUninitialized(r.name, r.dtype, r.shape);
    if (!d.empty()) std::memcpy(d.data(), r.data.data(), d.size());
  }
}

// Checkpoint files are kept in memory (ckpt::MemoryBlobStore) for measuring sizes and
// decoding without a disk.
using ckpt::MemoryBlobStore;

// ---------------------------------------------------------------------------
// 1. Blocking time per save.

struct BlockingFigures {
  std::vector<double> ours_s, memcpy_s, torch_save_s;
  uint64_t snapshot_bytes = 0;  // payload of our snapshot
  uint64_t memcpy_bytes = 0;
  uint64_t torch_bytes = 0;  // torch::save's two files
};

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

enum class Arm { kPlain = 0, kDefault = 1, kAggressive = 2 };
constexpr std::array<Arm, 3> kArms = {Arm::kPlain, Arm::kDefault, Arm::kAggressive};

struct RunFigures {
  double wall_s = 0;   // steps, saves' blocking, the job-start save, the final Flush
  double flush_s = 0;  // of which waiting for the last saves to be written
  int64_t steps = 0;
  int saves = 0;
  int delta_saves = 0;
  double blocking_s = 0;                            // sum over the run's saves
  std::vector<double> full_write_s, delta_write_s;  // writer thread, per save
  std::vector<double> step_s;                       // each step's time
  std::vector<bool> busy;                           // whether a write overlapped the step
  int64_t faults = 0;            // minor page faults the training thread took in its steps
  double policy_cost_s = 0;      // the IntervalPolicy's own estimate of one save's cost
  double policy_interval_s = 0;  // and the interval it would use next
  double other_cores = 0;
};

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
    bool busy = saver && saver->pending() > 0;
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
    // A write in flight at the start or at the end of the step overlapped it.
    // (The policy, like trainer.cc, only looks at the end.)
    r.busy.push_back(busy || saver->pending() > 0);
    policy->RecordStep(step_s, saver->pending() > 0);
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
// 3. Bytes per save, and 4. codec throughput.

struct BytesRow {
  std::string what;
  uint64_t stored = 0;
  std::string codecs;
  std::string by_group;  // raw / stored of model/, exp_avg and exp_avg_sq records
};

// "model 1.52x, exp_avg 1.20x, exp_avg_sq 1.31x, other 2.00x" for a file's records.
std::string RatiosByGroup(const ckpt::CheckpointFile& f) {
  std::map<std::string, std::pair<uint64_t, uint64_t>> groups;  // raw, stored
  for (const ckpt::RecordEntry& e : f.records()) {
    std::string g = e.name.starts_with("model/")      ? "model"
                    : e.name.ends_with("/exp_avg")    ? "exp_avg"
                    : e.name.ends_with("/exp_avg_sq") ? "exp_avg_sq"
                                                      : "other";
    groups[g].first += e.raw_bytes;
    groups[g].second += e.stored_bytes();
  }
  std::string out;
  for (const char* g : {"model", "exp_avg", "exp_avg_sq", "other"}) {
    auto it = groups.find(g);
    if (it == groups.end()) continue;
    out += fmt::format("{}{} {:.2f}x", out.empty() ? "" : ", ", g,
                       static_cast<double>(it->second.first) /
                           static_cast<double>(std::max<uint64_t>(1, it->second.second)));
  }
  return out;
}

struct CodecRow {
  ckpt::Codec codec;
  uint64_t raw_bytes = 0, stored_bytes = 0;
  double encode_s = 0, decode_s = 0;
};

// Writes `c` as a checkpoint file into `mem` and decodes it again (against
// `base`, for a delta): ReadAll checks every record against the checksum of
// what the writer was given (for q8-delta records, of the reconstruction).
Result<BytesRow> EncodeAndCheck(std::string what, ckpt::Container& c, const ckpt::CodecPlan& plan,
                                ckpt::Container* reference, const ckpt::Container* base,
                                ckpt::ChunkCodec& codec, MemoryBlobStore& mem) {
  const int64_t id = 2, base_id = base ? 1 : -1;
  SPOT_ASSIGN_OR_RETURN(std::unique_ptr<ckpt::BlobWriter> w, mem.Create("f"));
  SPOT_ASSIGN_OR_RETURN(ckpt::WrittenFile written,
                        ckpt::WriteCheckpointFile(c, plan, reference, id, base_id, codec, *w));
  SPOT_RETURN_IF_ERROR(w->Commit());
  SPOT_ASSIGN_OR_RETURN(ckpt::CheckpointFile f, ckpt::CheckpointFile::Open(mem, "f"));
  ckpt::Container base_copy;
  if (base) CopyInto(*base, &base_copy);
  auto decoded = f.ReadAll(base ? &base_copy : nullptr, codec);
  if (!decoded.ok()) return decoded.status().WithContext("decoding the " + what + " file");
  if (decoded->records().size() != c.records().size()) {
    return InternalError("the " + what + " file decodes to a different number of records");
  }
  SPOT_RETURN_IF_ERROR(mem.Delete("f"));
  return BytesRow{std::move(what), written.file_bytes, written.codecs, RatiosByGroup(f)};
}

Result<std::vector<BytesRow>> MeasureBytes(const ckpt::Container& s0, ckpt::Container& s1,
                                           ckpt::Container& s10) {
  MemoryBlobStore mem;
  ckpt::ChunkCodec codec(ckpt::AsyncSaverOptions{}.zstd_level);
  ckpt::Container ref;
  std::vector<BytesRow> rows;
  auto add = [&](Result<BytesRow> r) -> Status {
    if (!r.ok()) return r.status();
    rows.push_back(std::move(r).value());
    return Status::Ok();
  };
  SPOT_RETURN_IF_ERROR(add(
      EncodeAndCheck("raw (full)", s1, {.full = ckpt::Codec::kRaw}, &ref, nullptr, codec, mem)));
  ref.Clear();
  SPOT_RETURN_IF_ERROR(
      add(EncodeAndCheck("shuffle-zstd (full)", s1, {}, &ref, nullptr, codec, mem)));
  CopyInto(s0, &ref);
  SPOT_RETURN_IF_ERROR(
      add(EncodeAndCheck("xor-delta, 1 step after its base", s1, {}, &ref, &s0, codec, mem)));
  CopyInto(s0, &ref);
  SPOT_RETURN_IF_ERROR(
      add(EncodeAndCheck(fmt::format("xor-delta, {} steps after its base", kLongDeltaSteps), s10,
                         {}, &ref, &s0, codec, mem)));
  CopyInto(s0, &ref);
  SPOT_RETURN_IF_ERROR(
      add(EncodeAndCheck("q8-delta (model; optimizer xor), 1 step", s1,
                         {.delta = ckpt::Codec::kQ8Delta}, &ref, &s0, codec, mem)));
  return rows;
}

// Encodes every chunk of every record of `now` with `c` (against the same
// bytes of `before` for the delta codecs), then decodes them all, timing
// only the codec calls, and checks that decoding gives back `now` (q8-delta:
// the encoder's reconstruction, each element within Q8ErrorBound of `now`).
// q8-delta covers the floating-point records only.
Result<CodecRow> MeasureCodec(ckpt::Codec c, const ckpt::Container& before,
                              const ckpt::Container& now) {
  ckpt::ChunkCodec codec(ckpt::AsyncSaverOptions{}.zstd_level);
  CodecRow row{.codec = c};
  std::vector<std::string> stored;
  std::vector<std::string> recon;  // q8: the base after encoding, per chunk
  std::string dst;
  for (size_t i = 0; i < now.records().size(); ++i) {
    const ckpt::Record& r = now.records()[i];
    const ckpt::Record& b = before.records()[i];
    if (b.name != r.name || b.data.size() != r.data.size()) {
      return InternalError("codec: the two snapshots differ in layout at " + r.name);
    }
    if (c == ckpt::Codec::kQ8Delta && !ckpt::SupportsQ8(r.dtype)) continue;
    stored.clear();
    recon.clear();
    for (size_t pos = 0; pos < r.data.size(); pos += ckpt::kChunkBytes) {
      const size_t n = std::min(ckpt::kChunkBytes, r.data.size() - pos);
      std::string base(b.data.substr(pos, n));  // Encode may update it (q8)
      stored.emplace_back();
      auto t0 = Clock::now();
      Status st =
          codec.Encode(c, r.dtype, {r.data.data() + pos, n}, {base.data(), n}, &stored.back());
      row.encode_s += Since(t0);
      if (!st.ok()) return st.WithContext("encoding " + r.name);
      row.raw_bytes += n;
      row.stored_bytes += stored.back().size();
      if (c == ckpt::Codec::kQ8Delta) recon.push_back(std::move(base));
    }
    for (size_t k = 0, pos = 0; k < stored.size(); ++k, pos += ckpt::kChunkBytes) {
      const size_t n = std::min(ckpt::kChunkBytes, r.data.size() - pos);
      if (ckpt::IsDelta(c)) {
        dst.assign(b.data.substr(pos, n));  // decoding starts from the base's bytes
      } else {
        dst.assign(n, '\0');
      }
      auto t0 = Clock::now();
      Status st = codec.Decode(c, r.dtype, stored[k], {dst.data(), n});
      row.decode_s += Since(t0);
      if (!st.ok()) return st.WithContext("decoding " + r.name);
      std::string_view want =
          c == ckpt::Codec::kQ8Delta ? std::string_view(recon[k]) : r.data.substr(pos, n);
      if (dst != want) {
        return InternalError(
            fmt::format("{}: {} does not decode to what was encoded", ckpt::CodecName(c), r.name));
      }
      if (c == ckpt::Codec::kQ8Delta && r.dtype == ckpt::DType::kF32) {
        // Each element within the documented bound of the value saved.
        const size_t count = n / 4;
        for (size_t blk = 0; blk < count; blk += ckpt::kQ8Block) {
          const size_t len = std::min(ckpt::kQ8Block, count - blk);
          double max_delta = 0;
          for (size_t j = blk; j < blk + len; ++j) {
            float a, z;
            std::memcpy(&a, r.data.data() + pos + 4 * j, 4);
            std::memcpy(&z, b.data.data() + pos + 4 * j, 4);
            max_delta = std::max(max_delta, std::fabs(double{a} - double{z}));
          }
          for (size_t j = blk; j < blk + len; ++j) {
            float a, got;
            std::memcpy(&a, r.data.data() + pos + 4 * j, 4);
            std::memcpy(&got, dst.data() + 4 * j, 4);
            if (std::fabs(double{got} - double{a}) >
                ckpt::Q8ErrorBound(max_delta, std::fabs(double{a}), r.dtype)) {
              return InternalError(
                  fmt::format("q8-delta: {} element {} is {} after decoding, "
                              "{} was saved (beyond the error bound)",
                              r.name, pos / 4 + j, got, a));
            }
          }
        }
      }
    }
  }
  return row;
}

// ---------------------------------------------------------------------------
// 5. Restore time.

struct RestoreFigures {
  std::vector<double> full_s, delta_s, torch_s;
  std::vector<double> full_load_s, delta_load_s;  // of which LoadNewestValid
  int delta_depth = 0;
  uint64_t full_file_bytes = 0;
};

Result<RestoreFigures> MeasureRestore(Subject& s, const CkptBenchOptions& o, const std::string& dir,
                                      ckpt::Container* scratch) {
  RestoreFigures f;
  // Versions written the way the trainer writes them (AsyncSaver, xor deltas,
  // full_every 8), one training step apart: a full version, then deltas up to
  // chain depth 3.
  SPOT_ASSIGN_OR_RETURN(std::unique_ptr<ckpt::CheckpointStore> store,
                        ckpt::CheckpointStore::Open({.dir = dir + "/ours"}));
  Fingerprint full_print;
  int64_t full_step = 0;
  {
    ckpt::AsyncSaver saver(store.get(), ckpt::AsyncSaverOptions{});
    int64_t parent = -1;
    for (int v = 0; v <= kRestoreChainDepth; ++v) {
      if (v > 0) s.Step();
      SPOT_ASSIGN_OR_RETURN(ckpt::Container * c, saver.Acquire());
      SPOT_RETURN_IF_ERROR(s.Capture(c));
      parent = saver.Submit(c, {.step = s.counters.step, .parent = parent});
      SPOT_RETURN_IF_ERROR(saver.Flush());
      if (v == 0) {
        full_step = s.counters.step;
        SPOT_ASSIGN_OR_RETURN(full_print, TakeFingerprint(s, scratch));
      }
    }
  }
  SPOT_ASSIGN_OR_RETURN(Fingerprint delta_print, TakeFingerprint(s, scratch));
  // torch::save of the newest state.
  std::filesystem::create_directories(dir + "/torch");
  const std::string model_pt = dir + "/torch/model.pt", optim_pt = dir + "/torch/optimizer.pt";
  torch::save(s.model, model_pt);
  torch::save(*s.optimizer, optim_pt);

  for (int i = 0; i < o.restores; ++i) {
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
  return f;
}

// ---------------------------------------------------------------------------

struct SubjectFigures {
  std::string key, title;
  int64_t params = 0;
  int64_t run_steps = 0;
  double aggressive_s = 0;
  BlockingFigures blocking;
  std::map<Arm, std::vector<RunFigures>> runs;
  uint64_t payload = 0;
  std::vector<BytesRow> bytes;
  std::vector<CodecRow> codecs;
  RestoreFigures restore;
  double other_cores = 0;  // used by other processes while this state was measured
};

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
    for (ckpt::Codec c :
         {ckpt::Codec::kShuffleZstd, ckpt::Codec::kXorDelta, ckpt::Codec::kQ8Delta}) {
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

  Progress(fmt::format("ckpt {}: 5. restore, {} reps of full, delta (depth {}) and torch::load",
                       key, o.restores, kRestoreChainDepth));
  {
    ckpt::Container scratch;
    SPOT_ASSIGN_OR_RETURN(f.restore, MeasureRestore(*s, o, dir + "/restore", &scratch));
  }
  f.other_cores = meter.OtherCores();
  std::filesystem::remove_all(dir);
  return f;
}

// ---------------------------------------------------------------------------
// The report.

std::vector<double> Scaled(const std::vector<double>& v, double k) {
  std::vector<double> out;
  for (double x : v) out.push_back(x * k);
  return out;
}

template <typename Fn>
std::vector<double> Map(const std::vector<RunFigures>& runs, Fn fn) {
  std::vector<double> out;
  for (const RunFigures& r : runs) out.push_back(fn(r));
  return out;
}

double StepsPerS(const RunFigures& r) { return static_cast<double>(r.steps) / r.wall_s; }

std::string BlockingSection(const std::vector<SubjectFigures>& all, const CkptBenchOptions& o) {
  Table t({"state", "snapshot MB", "ours ms", "memcpy ms", "ours / memcpy", "goal", "result",
           "torch::save ms", "torch::save / ours"});
  std::string raw;
  for (const SubjectFigures& f : all) {
    const BlockingFigures& b = f.blocking;
    double ours = Median(b.ours_s), anchor = Median(b.memcpy_s), ts = Median(b.torch_save_s);
    double ratio = ours / anchor;
    t.AddRow({f.title, Mb(static_cast<double>(b.snapshot_bytes)), fmt::format("{:.2f}", ours * 1e3),
              fmt::format("{:.2f}", anchor * 1e3), fmt::format("{:.3f}x", ratio),
              fmt::format("<= {:.1f}x", kGoalBlocking), Verdict(ratio <= kGoalBlocking),
              fmt::format("{:.1f}", ts * 1e3), fmt::format("{:.1f}x", ts / ours)});
    raw += fmt::format(
        "- {}: ours {}, memcpy {}, torch::save {} (ms; memcpy copies {} MB)\n", f.key,
        FormatList(Scaled(b.ours_s, 1e3), 2), FormatList(Scaled(b.memcpy_s, 1e3), 2),
        FormatList(Scaled(b.torch_save_s, 1e3), 1), Mb(static_cast<double>(b.memcpy_bytes)));
  }
  return fmt::format(
      "### 1. Blocking time per save\n\n"
      "Ours: AsyncSaver Acquire + Container::Recycle + CaptureTrainState + Submit, what "
      "trainer.cc's SaveCheckpoint makes training wait for (the encode and write run on the "
      "saver's thread, untimed here: each save waits for the previous write with Flush first). "
      "Median of {} saves after {} warm-up saves, so snapshot buffers are reused. Anchor: "
      "std::memcpy of the same parameter, buffer and Adam-moment tensors into preallocated, "
      "touched buffers, alternating with ours. torch::save: model and optimizer to two files "
      "(page cache, no fsync), median of {}.\n\n{}\nAll reps:\n{}",
      o.saves, kWarmupSaves, kTorchSaves, t.ToMarkdown(), raw);
}

std::string OverheadSection(const std::vector<SubjectFigures>& all, const CkptBenchOptions& o) {
  Table t({"state", "arm", "steps/run", "saves/run", "run s", "steps/s", "time vs plain", "goal",
           "result", "others"});
  Table s({"state", "C per save (measured)", "steps during writes", "steps after writes",
           "blocking + flush", "policy's estimate of C", "policy interval T", "C / T", "goal",
           "result"});
  std::string raw, writes;
  for (const SubjectFigures& f : all) {
    const auto& plain = f.runs.at(Arm::kPlain);
    std::vector<double> plain_walls = Map(plain, [](const RunFigures& r) { return r.wall_s; });
    double plain_wall = Median(plain_walls);
    // The spread of the plain runs: differences smaller than this are noise.
    double spread_s = *std::max_element(plain_walls.begin(), plain_walls.end()) -
                      *std::min_element(plain_walls.begin(), plain_walls.end());
    for (Arm arm : kArms) {
      const auto& runs = f.runs.at(arm);
      double wall = Median(Map(runs, [](const RunFigures& r) { return r.wall_s; }));
      double saves = Median(Map(runs, [](const RunFigures& r) { return double(r.saves); }));
      double overhead = wall / plain_wall - 1;
      std::string name = arm == Arm::kPlain ? "no checkpointing"
                         : arm == Arm::kDefault
                             ? "default policy (trainer.cc)"
                             : fmt::format("a save every {:g} s", f.aggressive_s);
      double others = Median(Map(runs, [](const RunFigures& r) { return r.other_cores; }));
      t.AddRow({f.title, name, fmt::format("{}", f.run_steps), fmt::format("{:g}", saves),
                fmt::format("{:.1f}", wall), fmt::format("{:.2f}", Median(Map(runs, StepsPerS))),
                arm == Arm::kPlain ? "" : fmt::format("{:+.2f}%", overhead * 100),
                arm == Arm::kDefault ? fmt::format("<= {:g}%", kGoalOverhead * 100) : "",
                arm != Arm::kDefault ? ""
                : overhead < 0
                    ? std::string("n/a (window; faster than plain: run-to-run variation)")
                : std::fabs(wall - plain_wall) < spread_s
                    ? fmt::format("{} (window; within the plain runs' spread, {:.0f}%)",
                                  Verdict(overhead <= kGoalOverhead), spread_s / plain_wall * 100)
                    : Verdict(overhead <= kGoalOverhead) + " (window)",
                fmt::format("{:.2f}", others)});
      raw += fmt::format(
          "- {} {}: steps/s {}, flush s {}, page faults per step {}, saves {}, "
          "others {} cores\n",
          f.key, name, FormatList(Map(runs, StepsPerS), 2),
          FormatList(Map(runs, [](const RunFigures& r) { return r.flush_s; }), 2),
          FormatList(
              Map(runs, [](const RunFigures& r) { return double(r.faults) / double(r.steps); })),
          FormatList(Map(runs, [](const RunFigures& r) { return double(r.saves); })),
          FormatList(Map(runs, [](const RunFigures& r) { return r.other_cores; }), 2));
      if (arm != Arm::kPlain) {
        std::vector<double> full, delta;
        for (const RunFigures& r : runs) {
          full.insert(full.end(), r.full_write_s.begin(), r.full_write_s.end());
          delta.insert(delta.end(), r.delta_write_s.begin(), r.delta_write_s.end());
        }
        writes += fmt::format("- {} {}: full {} ms, delta {} ms\n", f.key, name,
                              FormatList(Scaled(full, 1e3)), FormatList(Scaled(delta, 1e3)));
      }
    }
    // Steady state of the default policy: the measured cost of a save (extra
    // wall time over the paired plain run, per save) over the interval the
    // policy chose after measuring that save itself.
    const auto& def = f.runs.at(Arm::kDefault);
    std::vector<double> cost;
    for (size_t i = 0; i < def.size() && i < plain.size(); ++i) {
      cost.push_back((def[i].wall_s - plain[i].wall_s) / std::max(1, def[i].saves));
    }
    double c = Median(cost);
    // Where C went, against the paired plain run's median step: steps a write
    // overlapped, steps after the writes were done, and blocking + Flush.
    std::vector<double> during, after, rest;
    for (size_t i = 0; i < def.size() && i < plain.size(); ++i) {
      double base = Median(plain[i].step_s);
      double d = 0, a = 0;
      for (size_t k = 0; k < def[i].step_s.size(); ++k) {
        (def[i].busy[k] ? d : a) += def[i].step_s[k] - base;
      }
      double saves = std::max(1, def[i].saves);
      during.push_back(d / saves);
      after.push_back(a / saves);
      rest.push_back((def[i].blocking_s + def[i].flush_s) / saves);
    }
    double saves_per_run = Median(Map(def, [](const RunFigures& r) { return double(r.saves); }));
    double est = Median(Map(def, [](const RunFigures& r) { return r.policy_cost_s; }));
    double interval = Median(Map(def, [](const RunFigures& r) { return r.policy_interval_s; }));
    double share = std::max(0.0, c) / interval;
    s.AddRow({f.title, fmt::format("{:.1f} ms", c * 1e3),
              fmt::format("{:+.1f} ms", Median(during) * 1e3),
              fmt::format("{:+.1f} ms", Median(after) * 1e3),
              fmt::format("{:.1f} ms", Median(rest) * 1e3), fmt::format("{:.1f} ms", est * 1e3),
              fmt::format("{:.1f} s", interval), fmt::format("{:.2f}%", share * 100),
              fmt::format("<= {:g}%", kGoalOverhead * 100),
              c <= 0 ? std::string("n/a: C < 0, run-to-run variation exceeds a save's cost")
              : c * saves_per_run < spread_s
                  ? fmt::format("n/a: C is within the plain runs' spread ({:.1f} s)", spread_s)
                  : Verdict(share <= kGoalOverhead)});
    raw += fmt::format(
        "- {} cost per save (default - plain, paired runs) {} ms; policy "
        "estimates {} ms, intervals {} s\n",
        f.key, FormatList(Scaled(cost, 1e3), 1),
        FormatList(Scaled(Map(def, [](const RunFigures& r) { return r.policy_cost_s; }), 1e3), 1),
        FormatList(Map(def, [](const RunFigures& r) { return r.policy_interval_s; }), 1));
  }
  return fmt::format(
      "### 2. Training-time overhead\n\n"
      "Real training steps (batch {}), {} runs per arm, the arms alternating (order rotated "
      "each round). A run's time (\"run s\", median) covers its steps, the saves' blocking time, "
      "the background writer competing for the {} cores, and at the end the wait for its last "
      "saves to be written (Flush), so each run carries all the work of its saves (this "
      "overstates their cost by whatever part of a write, such as fsync waits, would overlap "
      "later training). steps/s = steps / run s. Checkpointing arms run as trainer.cc does: a "
      "fresh CheckpointStore and AsyncSaver (xor deltas, full_every 8), a save of the initial "
      "state before the first step (the trainer does this when rollback is on, the default), "
      "then a save whenever IntervalPolicy::IntervalSeconds() (default IntervalOptions: MTBF "
      "1 h, max_overhead 1%, first save after 30 s) or the forced interval has passed; every "
      "step and save is recorded in the policy. \"others\": cores other processes kept busy "
      "during the runs (median); above {:.2f} the figures are noisy. Page faults per step (in "
      "\"All runs\"): minor faults the training thread took during its steps.\n\n{}\n"
      "After the job-start save the default policy saves every T (below; T comes from its "
      "measurement of that first save), so a run shorter than T holds the job-start save only "
      "and its \"(window)\" figure is that one save's cost spread over one short run, not the "
      "overhead at the default interval. That overhead is C / T below: C is measured (extra time "
      "of each "
      "default-policy run over the plain run of the same round, per save; mostly a full version "
      "with cold snapshot buffers, the dearest kind), T is the interval the policy chose at the "
      "end of that run from its own estimate of C (blocking time plus the slowdown of steps run "
      "while the writer was busy). C / T is within the goal when the policy's estimate is not "
      "below the real cost. C is split (medians, so the parts need not add up) into the extra "
      "time of steps a write overlapped (at their start or end), of the steps after the writes "
      "were done, both against the paired plain run's median step, and the blocking and final "
      "Flush time.\n\n{}\nAll runs:\n{}\nBackground writer time per save (encode, "
      "write, fsync, retention; wall time of the writer thread):\n{}",
      o.batch, o.runs, o.threads, o.quiet_cores, t.ToMarkdown(), s.ToMarkdown(), raw, writes);
}

std::string BytesSection(const std::vector<SubjectFigures>& all) {
  Table t({"state", "encoding", "stored MB", "raw / stored", "goal", "result", "records"});
  std::string groups;
  for (const SubjectFigures& f : all) {
    for (size_t i = 0; i < f.bytes.size(); ++i) {
      const BytesRow& b = f.bytes[i];
      groups += fmt::format("- {} {}: {}\n", f.key, b.what, b.by_group);
      double ratio = static_cast<double>(f.payload) / static_cast<double>(b.stored);
      double goal = i == 1 ? kGoalFullRatio : i == 2 ? kGoalDeltaRatio : 0;
      t.AddRow({f.title, b.what, Mb(static_cast<double>(b.stored)), fmt::format("{:.2f}x", ratio),
                goal > 0 ? fmt::format(">= {:.2f}x", goal) : "",
                goal > 0 ? Verdict(ratio >= goal) : "", b.codecs});
    }
    t.AddRow({f.title, "torch::save (model + optimizer files)",
              Mb(static_cast<double>(f.blocking.torch_bytes)),
              fmt::format("{:.2f}x", static_cast<double>(f.payload) /
                                         static_cast<double>(f.blocking.torch_bytes)),
              "", "", ""});
  }
  return fmt::format(
      "### 3. Bytes written per save\n\n"
      "Whole checkpoint files (format v2: header, chunks, index, footer) written by "
      "WriteCheckpointFile into memory at zstd level 1 (the saver's), of the full training "
      "state (parameters, buffers, Adam step/exp_avg/exp_avg_sq, RNG, counters). raw / stored "
      "= the snapshot's payload bytes over the file's bytes. Deltas: the state one Adam step, "
      "and {} steps, after the base snapshot. Each file was decoded again and checked against "
      "the snapshot's checksums (q8: against its reconstruction).\n\n{}\nraw / stored by "
      "record group (\"other\": Adam step counts, RNG, counters):\n{}",
      kLongDeltaSteps, t.ToMarkdown(), groups);
}

std::string CodecSection(const std::vector<SubjectFigures>& all) {
  Table t({"state", "codec", "MB", "raw / stored", "encode MB/s", "decode MB/s", "goal", "result"});
  for (const SubjectFigures& f : all) {
    for (const CodecRow& c : f.codecs) {
      double enc = static_cast<double>(c.raw_bytes) / 1e6 / c.encode_s;
      double dec = static_cast<double>(c.raw_bytes) / 1e6 / c.decode_s;
      bool judged = f.key == "mlp50m";
      t.AddRow({f.title, std::string(ckpt::CodecName(c.codec)),
                Mb(static_cast<double>(c.raw_bytes)),
                fmt::format("{:.2f}x",
                            static_cast<double>(c.raw_bytes) / static_cast<double>(c.stored_bytes)),
                fmt::format("{:.0f}", enc), fmt::format("{:.0f}", dec),
                judged ? fmt::format(">= {:.0f}", kGoalCodecMbps) : "",
                judged ? (enc >= kGoalCodecMbps && dec >= kGoalCodecMbps
                              ? "PASS"
                              : fmt::format("MISS ({})",
                                            enc < kGoalCodecMbps && dec < kGoalCodecMbps ? "both"
                                            : enc < kGoalCodecMbps                       ? "encode"
                                                                   : "decode"))
                       : ""});
    }
  }
  return fmt::format(
      "### 4. Codec throughput, one core\n\n"
      "ChunkCodec (zstd level 1) called directly on every {} MiB chunk of every record, "
      "single-threaded; MB of raw record bytes per second of codec calls only (copying the "
      "base into place is untimed). Delta codecs: the state one step after the base. q8-delta: "
      "every f32 record (here also the optimizer's). A record's chunks are all encoded, then "
      "all decoded; every decoded chunk is compared with the original (q8: with the encoder's "
      "reconstruction, and each element with Q8ErrorBound). The goal applies to the 50M "
      "state.\n\n{}",
      ckpt::kChunkBytes >> 20, t.ToMarkdown());
}

std::string RestoreSection(const std::vector<SubjectFigures>& all, const CkptBenchOptions& o) {
  Table t({"state", "restore", "ms", "of which LoadNewestValid ms", "vs torch::load", "verified"});
  std::string raw;
  for (const SubjectFigures& f : all) {
    const RestoreFigures& r = f.restore;
    double tl = Median(r.torch_s);
    auto row = [&](const std::string& what, const std::vector<double>& v,
                   const std::vector<double>& load) {
      double m = Median(v);
      t.AddRow({f.title, what, fmt::format("{:.1f}", m * 1e3),
                load.empty() ? "" : fmt::format("{:.1f}", Median(load) * 1e3),
                fmt::format("{:.2f}x", m / tl), "yes"});
    };
    row("full version (LoadNewestValid + RestoreTrainState)", r.full_s, r.full_load_s);
    row(fmt::format("delta at chain depth {} (LoadNewestValid + RestoreTrainState)", r.delta_depth),
        r.delta_s, r.delta_load_s);
    row("torch::load (model + optimizer)", r.torch_s, {});
    raw += fmt::format("- {}: full {}, delta {}, torch::load {} (ms)\n", f.key,
                       FormatList(Scaled(r.full_s, 1e3), 1), FormatList(Scaled(r.delta_s, 1e3), 1),
                       FormatList(Scaled(r.torch_s, 1e3), 1));
  }
  return fmt::format(
      "### 5. Restore time\n\n"
      "Median of {} reps; before each, parameters and buffers are zeroed and the Adam state "
      "dropped, and after it the state is captured again and compared record by record (by "
      "checksum) with what was saved (torch::load: parameters, buffers and Adam state only; it "
      "holds no RNG or counters). Ours reads and checks the manifest, every chunk and every "
      "decoded record. The versions were written by AsyncSaver (xor deltas) one training step "
      "apart: a full version, then {} deltas; the full one is restored with "
      "LoadNewestValid(before_step = its step + 1), the newest with LoadNewestValid(), which "
      "decodes the whole chain. torch::load reads files torch::save wrote of the "
      "same state. All files were just written (page cache). \"vs torch::load\" < 1 means "
      "ours is faster.\n\n{}\nAll reps:\n{}",
      o.restores, kRestoreChainDepth, t.ToMarkdown(), raw);
}

std::string Report(const CkptBenchOptions& o, const Data& data,
                   const std::vector<SubjectFigures>& all, double elapsed_s) {
  std::string others;
  for (const SubjectFigures& f : all) {
    others += fmt::format("{}{} {:.2f}", others.empty() ? "" : ", ", f.key, f.other_cores);
  }
  return fmt::format(
             "## ckpt: checkpointing cost in training\n\n"
             "States: {}. Each after {} Adam steps (lr 1e-3, batch {}) on {}; {} intra-op "
             "threads, seed {}, glibc malloc set as the trainer sets it. Cores other processes "
             "used meanwhile: {}. The workload took {:.0f} s.\n\n",
             fmt::join(o.states, ", "), o.warmup_steps, o.batch, data.source, o.threads, o.seed,
             others, elapsed_s) +
         BlockingSection(all, o) + "\n" + OverheadSection(all, o) + "\n" + BytesSection(all) +
         "\n" + CodecSection(all) + "\n" + RestoreSection(all, o);
}

Result<std::string> Run(const CkptBenchOptions& o) {
  auto t0 = Clock::now();
  at::set_num_threads(o.threads);
  // As trainer.cc (KeepActivationBuffersInHeap): training runs here as it does there.
  mallopt(M_MMAP_THRESHOLD, 32 << 20);
  mallopt(M_TRIM_THRESHOLD, 1 << 30);
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
  return Report(o, data, all, Since(t0));
}

}  // namespace

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
