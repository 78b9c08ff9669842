#include "ckpt_workload.h"

#include <ATen/Parallel.h>
#include <fcntl.h>
#include <fmt/format.h>
#include <torch/optim/adam.h>
#include <torch/serialize.h>
#include <torch/utils.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>

#include "ckpt/store.h"
#include "cpu_load.h"
#include "report.h"
#include "train/model.h"
#include "train/train_state.h"

namespace spot::bench {
namespace {

using Clock = std::chrono::steady_clock;

double MsSince(Clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
}

Status Fsync(const std::string& path) {
  int fd = open(path.c_str(), O_RDONLY);
  if (fd < 0) return UnavailableError("cannot open " + path);
  bool ok = fsync(fd) == 0;
  close(fd);
  return ok ? Status::Ok() : UnavailableError("fsync failed: " + path);
}

// The state a trainer checkpoints: the CNN and Adam after a few real steps (on
// random inputs: the values do not matter, the Adam state must exist).
struct State {
  std::shared_ptr<train::Net> model = train::MakeModel("cnn");
  torch::optim::Adam optimizer{model->parameters(), torch::optim::AdamOptions(1e-3)};
  std::vector<at::Tensor> snapshot;  // the parameters as saved

  void Train(int steps) {
    model->train();
    for (int i = 0; i < steps; ++i) {
      optimizer.zero_grad();
      at::Tensor x = at::randn({64, 1, 28, 28});
      at::cross_entropy_loss(model->forward(x), at::randint(10, {64}, at::kLong)).backward();
      optimizer.step();
    }
    for (const at::Tensor& p : model->parameters()) snapshot.push_back(p.detach().clone());
  }
  // Zeroes the parameters and drops the Adam state (untimed), so that a load
  // must really restore both.
  void Scramble() {
    torch::NoGradGuard no_grad;
    for (at::Tensor& p : model->parameters()) p.zero_();
    optimizer.state().clear();
  }
  Status Verify(const char* what) const {
    auto params = model->parameters();
    for (size_t i = 0; i < params.size(); ++i) {
      if (!params[i].equal(snapshot[i])) {
        return InternalError(fmt::format("{} did not restore the parameters", what));
      }
    }
    return optimizer.state().size() == params.size()
               ? Status::Ok()
               : InternalError(fmt::format("{} did not restore the Adam state", what));
  }
};

struct Figures {
  std::vector<double> ours_save, ours_load, torch_save, torch_fsync, torch_load;
  uint64_t ours_bytes = 0, torch_bytes = 0;
  double other_cores = 0;  // used by other processes meanwhile
};

// One rep of all four operations; every load is checked against the saved state.
Status RunRep(State& s, ckpt::CheckpointStore& store, const train::TrainerCounters& counters,
              const std::string& model_pt, const std::string& optim_pt, Figures* f) {
  auto t0 = Clock::now();
  ckpt::Container c;
  SPOT_RETURN_IF_ERROR(CaptureTrainState(*s.model, s.optimizer, "adam", counters, &c));
  SPOT_ASSIGN_OR_RETURN(ckpt::VersionInfo v, store.Save(c, counters.step, -1, "{}"));
  f->ours_save.push_back(MsSince(t0));
  f->ours_bytes = v.file_bytes + std::filesystem::file_size(v.manifest_path);

  t0 = Clock::now();
  torch::save(s.model, model_pt);
  torch::save(s.optimizer, optim_pt);
  f->torch_save.push_back(MsSince(t0));
  SPOT_RETURN_IF_ERROR(Fsync(model_pt));
  SPOT_RETURN_IF_ERROR(Fsync(optim_pt));
  f->torch_fsync.push_back(MsSince(t0));
  f->torch_bytes = std::filesystem::file_size(model_pt) + std::filesystem::file_size(optim_pt);

  s.Scramble();
  t0 = Clock::now();
  SPOT_ASSIGN_OR_RETURN(ckpt::CheckpointStore::Loaded loaded, store.LoadNewestValid());
  SPOT_RETURN_IF_ERROR(RestoreTrainState(loaded.container, *s.model, s.optimizer, "adam").status());
  f->ours_load.push_back(MsSince(t0));
  SPOT_RETURN_IF_ERROR(s.Verify("our load"));

  s.Scramble();
  t0 = Clock::now();
  torch::load(s.model, model_pt);
  torch::load(s.optimizer, optim_pt);
  f->torch_load.push_back(MsSince(t0));
  return s.Verify("torch::load");
}

std::string Report(const CkptBenchOptions& o, const Figures& f) {
  double save = Median(f.ours_save), load = Median(f.ours_load);
  double tsave = Median(f.torch_fsync), tload = Median(f.torch_load);
  Table t({"operation", "ours ms", "torch ms", "torch / ours", "ours bytes", "torch bytes"});
  t.AddRow({"save (with fsync)", fmt::format("{:.2f}", save), fmt::format("{:.2f}", tsave),
            fmt::format("{:.2f}x", tsave / save), fmt::format("{}", f.ours_bytes),
            fmt::format("{}", f.torch_bytes)});
  t.AddRow({"load", fmt::format("{:.2f}", load), fmt::format("{:.2f}", tload),
            fmt::format("{:.2f}x", tload / load), "", ""});
  return fmt::format(
      "## ckpt: one checkpoint of the CNN + Adam state\n\n"
      "Median of {} reps. Ours: CaptureTrainState + CheckpointStore::Save (temp file, fsync, "
      "rename, directory fsync; data file and manifest; includes the RNG state and counters), "
      "and LoadNewestValid (size and XXH3 checks) + RestoreTrainState. torch: torch::save of "
      "the model and of the optimizer to two files, then fsync of both (no atomic rename), and "
      "torch::load of both. Loads read files just written (page cache). \"torch / ours\" > 1 "
      "means ours is faster. Other processes used {:.2f} cores meanwhile.\n\n{}\ntorch::save "
      "without the fsync: {:.2f} ms (median); "
      "all reps, ms: ours save {}, torch save+fsync {}, ours load {}, torch load {}.\n",
      o.reps, f.other_cores, t.ToMarkdown(), Median(f.torch_save), FormatList(f.ours_save, 1),
      FormatList(f.torch_fsync, 1), FormatList(f.ours_load, 1), FormatList(f.torch_load, 1));
}

Result<std::string> Run(const CkptBenchOptions& o) {
  at::set_num_threads(o.threads);
  torch::manual_seed(static_cast<uint64_t>(o.seed));
  State s;
  s.Train(5);
  std::string dir = o.work_dir + "/ckpt";
  SPOT_ASSIGN_OR_RETURN(ckpt::CheckpointStore store,
                        ckpt::CheckpointStore::Open({.dir = dir + "/ours", .keep_last = 2}));
  std::filesystem::create_directories(dir + "/torch");
  train::TrainerCounters counters{.step = 5,
                                  .seed = o.seed,
                                  .batch_size = 64,
                                  .model = "cnn",
                                  .optimizer = "adam",
                                  .threads = o.threads,
                                  .blas = "bench"};
  Figures f;
  WaitForQuiet(o.quiet_cores, o.quiet_wait_s);
  CpuLoadMeter meter;
  for (int r = 0; r < o.reps; ++r) {
    SPOT_RETURN_IF_ERROR(
        RunRep(s, store, counters, dir + "/torch/model.pt", dir + "/torch/optimizer.pt", &f));
  }
  f.other_cores = meter.OtherCores();
  return Report(o, f);
}

}  // namespace

Result<std::string> RunCkptWorkload(const CkptBenchOptions& o) {
  Progress(fmt::format("ckpt: {} reps of save and load, ours and torch", o.reps));
  try {
    return Run(o);
  } catch (const c10::Error& e) {
    return InternalError(std::string("ckpt workload: ") + e.what_without_backtrace());
  } catch (const std::filesystem::filesystem_error& e) {
    return UnavailableError(std::string("ckpt workload: ") + e.what());
  }
}

}  // namespace spot::bench
