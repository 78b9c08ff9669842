// Section 6 of the ckpt workload (ckpt_durable.h). The three stores save the
// same states (captured once, the subject restored to each before a store
// saves it), one store after the other, each save Flush()ed before the next
// begins: their replication costs and restarts compare the same bytes, and
// never overlap.
#include "ckpt_durable.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <malloc.h>
#include <torch/serialize.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <limits>
#include <memory>
#include <vector>

#include "bench_process.h"
#include "ckpt/async_saver.h"
#include "ckpt/store.h"
#include "ckpt/torch_adapter.h"
#include "cpu_load.h"
#include "report.h"

namespace spot::bench {
namespace {

namespace fs = std::filesystem;

// One arm: a store with a durable tier, its saver, and its figures.
struct ArmRun {
  DurableArm fig;
  std::string dir;  // the arm's tiers live under it
  std::string local_dir, durable_dir;
  int64_t parent = -1;  // the newest version saved
  std::unique_ptr<ckpt::CheckpointStore> store;
  std::unique_ptr<ckpt::AsyncSaver> saver;

  std::string what() const {
    return fmt::format("durable_max_chain {}", DurableChainName(fig.max_chain));
  }
};

Status OpenArm(int max_chain, const std::string& dir, ArmRun* a) {
  a->fig.max_chain = max_chain;
  a->dir = dir;
  a->local_dir = dir + "/local";
  a->durable_dir = dir + "/durable";
  SPOT_ASSIGN_OR_RETURN(a->store, ckpt::CheckpointStore::Open({.dir = a->local_dir,
                                                               .durable_dir = a->durable_dir,
                                                               .durable_max_chain = max_chain}));
  // As section 5 writes them: deltas whatever they save (the chain is what
  // is measured). One snapshot buffer: each save is flushed before the next.
  a->saver = std::make_unique<ckpt::AsyncSaver>(
      a->store.get(),
      ckpt::AsyncSaverOptions{.full_every = 8, .min_delta_saving = 0, .max_in_flight = 1});
  return Status::Ok();
}

// Saves `s` as the arm's version number `k` (0: the full one), waits until
// it is written and replicated, and records what that took.
Status SaveVersion(Subject& s, int k, ArmRun* a) {
  SPOT_ASSIGN_OR_RETURN(ckpt::Container * c, a->saver->Acquire());
  SPOT_RETURN_IF_ERROR(s.Capture(c));
  a->parent = a->saver->Submit(c, {.step = s.counters.step, .parent = a->parent});
  SPOT_RETURN_IF_ERROR(a->saver->Flush().WithContext(a->what()));
  std::vector<ckpt::SaveReport> done = a->saver->TakeCompleted();
  if (done.size() != 1 || done[0].info.id != a->parent) {
    return InternalError(
        fmt::format("{}: version {} was not reported once as saved", a->what(), a->parent));
  }
  const ckpt::SaveReport& r = done[0];
  if (r.info.chain_depth != k) {
    return InternalError(fmt::format("{}: version {} has local chain depth {}, not {}", a->what(),
                                     r.info.id, r.info.chain_depth, k));
  }
  if (r.durable_chain_depth > a->fig.max_chain) {
    return InternalError(fmt::format("{}: version {}'s durable copy sits at chain depth {}",
                                     a->what(), r.info.id, r.durable_chain_depth));
  }
  DurableVersion v{.id = r.info.id,
                   .local_depth = r.info.chain_depth,
                   .durable_depth = r.durable_chain_depth,
                   .materialized = r.durable_full,
                   .write_s = r.write_s,
                   .replicate_s = r.replicate_s,
                   .local_bytes = r.info.file_bytes};
  // Read now: the durable tier's retention may delete it after later saves.
  SPOT_ASSIGN_OR_RETURN(
      v.durable_bytes,
      a->store->tier(ckpt::Tier::kDurable).Size(ckpt::CheckpointStore::DataFileName(v.id)));
  a->fig.versions.push_back(v);
  return Status::Ok();
}

// The preemption that leaves no survivor: the store and its local tier are
// gone; a new machine opens the store on the same durable tier with an empty
// local directory.
Status Restart(ArmRun* a) {
  a->saver.reset();
  a->store.reset();
  fs::remove_all(a->local_dir);
  a->local_dir = a->dir + "/local-after-restart";
  SPOT_ASSIGN_OR_RETURN(a->store,
                        ckpt::CheckpointStore::Open({.dir = a->local_dir,
                                                     .durable_dir = a->durable_dir,
                                                     .durable_max_chain = a->fig.max_chain}));
  for (const fs::directory_entry& e : fs::directory_iterator(a->durable_dir)) {
    if (e.is_regular_file()) a->fig.durable_tier_bytes += e.file_size();
  }
  return Status::Ok();
}

// LoadNewestValid into the model + RestoreTrainState, timed, from a store
// whose local tier is empty; checked against `want`. `cold`: the durable
// tier's files dropped from the page cache first.
Status TimedRestore(Subject& s, const ckpt::TensorPlacement& into_model, const Fingerprint& want,
                    ckpt::Container* scratch, bool cold, ArmRun* a) {
  s.Scramble();
  if (cold) SPOT_RETURN_IF_ERROR(DropFromPageCache(a->durable_dir));
  const auto t0 = Clock::now();
  {
    SPOT_ASSIGN_OR_RETURN(
        ckpt::CheckpointStore::Loaded l,
        a->store->LoadNewestValid(std::numeric_limits<int64_t>::max(), into_model.place()));
    (cold ? a->fig.cold_load_s : a->fig.load_s).push_back(Since(t0));
    if (l.info.id != a->parent || !l.skipped.empty() ||
        l.info.tiers != std::vector<ckpt::Tier>{ckpt::Tier::kDurable}) {
      return InternalError(fmt::format(
          "{}: the restart restored version {} ({} skipped) from the {} tier, not version {} from "
          "the durable tier",
          a->what(), l.info.id, l.skipped.size(),
          l.info.tiers.empty() ? "no" : ckpt::TierName(l.info.tiers.front()), a->parent));
    }
    a->fig.restored_id = l.info.id;
    a->fig.restored_depth = l.info.chain_depth;
    SPOT_RETURN_IF_ERROR(s.Restore(l.container));
  }
  (cold ? a->fig.cold_restore_s : a->fig.restore_s).push_back(Since(t0));
  SPOT_ASSIGN_OR_RETURN(Fingerprint got, TakeFingerprint(s, scratch));
  return CheckSame(want, got, "restarting from the durable tier, " + a->what());
}

// torch::load of files torch::save wrote of the same state (in `dir`),
// timed; checked against `want` (parameters, buffers and Adam state: all
// torch::save holds). `cold`: the files dropped from the page cache first.
Status TimedTorchLoad(Subject& s, const std::string& dir, const Fingerprint& want,
                      ckpt::Container* scratch, bool cold, std::vector<double>* out) {
  const std::string model_pt = dir + "/model.pt", optim_pt = dir + "/optimizer.pt";
  const train::TrainerCounters counters = s.counters;
  s.Scramble();
  if (cold) SPOT_RETURN_IF_ERROR(DropFromPageCache(dir));
  const auto t0 = Clock::now();
  torch::load(s.model, model_pt);
  torch::load(*s.optimizer, optim_pt);
  out->push_back(Since(t0));
  s.counters = counters;
  SPOT_ASSIGN_OR_RETURN(Fingerprint got, TakeFingerprint(s, scratch));
  return CheckSame(want, got, "torch::load", /*tensors_only=*/true);
}

// What a restart child reports: its restore's seconds and the state after it.
struct RestartChild {
  double seconds = 0;
  Fingerprint print;
};

// Runs `self` as a restart child and reads what it wrote; InternalError with
// the child's log when it fails.
Result<RestartChild> RunRestartChild(const std::string& self, const CkptBenchOptions& o,
                                     const RestartRequest& req) {
  fs::create_directories(req.scratch_dir);
  const std::string out = req.scratch_dir + "/result.txt", log = req.scratch_dir + "/child.log";
  fs::remove(out);
  std::vector<std::string> argv = {self,
                                   "--workloads",
                                   "ckpt",
                                   "--ckpt-states",
                                   req.key,
                                   "--ckpt-restart-child",
                                   req.ours ? "ours" : "torch",
                                   "--ckpt-restart-dir",
                                   req.dir,
                                   "--ckpt-restart-before-step",
                                   std::to_string(req.before_step),
                                   "--ckpt-restart-out",
                                   out,
                                   "--threads",
                                   std::to_string(o.threads),
                                   "--seed",
                                   std::to_string(o.seed)};
  if (!req.durable_dir.empty()) {
    argv.insert(argv.end(),
                {"--ckpt-restart-durable-dir", req.durable_dir, "--ckpt-restart-durable-max-chain",
                 std::to_string(req.durable_max_chain)});
  }
  Proc child(argv, log);
  if (!child.started()) return InternalError("restart: cannot start " + self);
  const int rc = child.Wait(/*timeout_s=*/600);
  std::ifstream in(out);
  RestartChild r;
  if (rc != 0 || !(in >> r.seconds)) {
    std::ifstream l(log);
    std::string text((std::istreambuf_iterator<char>(l)), std::istreambuf_iterator<char>());
    return InternalError(fmt::format("restart child ({}) exited {}: {}",
                                     req.ours ? "ours" : "torch", rc, text.substr(0, 2000)));
  }
  std::string name;
  uint64_t sum = 0;
  while (in >> name >> sum) r.print.emplace_back(name, sum);
  return r;
}

}  // namespace

Status DropFromPageCache(const std::string& dir) {
  for (const fs::directory_entry& e : fs::recursive_directory_iterator(dir)) {
    if (!e.is_regular_file()) continue;
    const int fd = ::open(e.path().c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) return InternalError(fmt::format("{}: cannot open", e.path().string()));
    const int rc = ::posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
    ::close(fd);
    if (rc != 0) return InternalError(fmt::format("{}: posix_fadvise failed", e.path().string()));
  }
  return Status::Ok();
}

Status MeasureRestarts(const CkptBenchOptions& o, const RestartRequest& ours,
                       const std::string& ours_files, const Fingerprint& want_ours,
                       const RestartRequest& torch, const Fingerprint& want_torch,
                       RestartTimes* out) {
  ::sync();  // torch::save does not fsync: its pages must be clean to be dropped
  const std::string self = fs::read_symlink("/proc/self/exe").string();
  for (int i = 0; i < o.restores; ++i) {
    for (bool cold : {false, true}) {
      for (int k = 0; k < 2; ++k) {
        const bool is_ours = (i + k) % 2 == 0;
        RestartRequest req = is_ours ? ours : torch;
        if (is_ours && !req.durable_dir.empty()) {
          req.dir = fmt::format("{}/local-{}-{}", req.scratch_dir, i, cold ? "cold" : "warm");
        }
        if (cold) SPOT_RETURN_IF_ERROR(DropFromPageCache(is_ours ? ours_files : torch.dir));
        SPOT_ASSIGN_OR_RETURN(RestartChild r, RunRestartChild(self, o, req));
        SPOT_RETURN_IF_ERROR(
            CheckSame(is_ours ? want_ours : want_torch, r.print,
                      is_ours ? "restoring in a new process" : "torch::load in a new process",
                      /*tensors_only=*/!is_ours));
        (is_ours ? (cold ? out->ours_cold : out->ours) : (cold ? out->torch_cold : out->torch))
            .push_back(r.seconds);
      }
    }
  }
  return Status::Ok();
}

Result<DurableFigures> MeasureDurableRestart(Subject& s, const CkptBenchOptions& o,
                                             const std::string& dir) {
  Progress(fmt::format(
      "ckpt {}: 6. restart from the durable tier, durable_max_chain no limit, 1 and 0; {} reps",
      s.key, o.restores));
  CpuLoadMeter meter;
  fs::remove_all(dir);
  // The versions' states: a full one, then one after each training step.
  std::vector<ckpt::Container> states(kRestoreChainDepth + 1);
  for (int k = 0; k <= kRestoreChainDepth; ++k) {
    if (k > 0) s.Step();
    SPOT_RETURN_IF_ERROR(s.Capture(&states[k]));
  }
  ckpt::Container scratch;
  SPOT_ASSIGN_OR_RETURN(Fingerprint want, TakeFingerprint(s, &scratch));
  {
    // Untimed: the first save after the earlier sections finds its memory
    // slowly (seconds for the MLP), once per process; no store should pay it.
    SPOT_ASSIGN_OR_RETURN(std::unique_ptr<ckpt::CheckpointStore> store,
                          ckpt::CheckpointStore::Open({.dir = dir + "/warm-up"}));
    ckpt::AsyncSaver saver(store.get(), ckpt::AsyncSaverOptions{.max_in_flight = 1});
    SPOT_ASSIGN_OR_RETURN(ckpt::Container * c, saver.Acquire());
    SPOT_RETURN_IF_ERROR(s.Capture(c));
    saver.Submit(c, {.step = s.counters.step});
    SPOT_RETURN_IF_ERROR(saver.Flush());
  }
  fs::remove_all(dir + "/warm-up");
  // One store at a time (each with its saver's buffers, as a job has one),
  // saving the same states: the subject restored to each (untimed) and
  // captured by the saver.
  std::vector<ArmRun> arms(kDurableMaxChains.size());
  for (size_t j = 0; j < arms.size(); ++j) {
    ArmRun& a = arms[j];
    // Untimed: the memory the last saver freed goes back to the system, so
    // every saver starts on fresh pages, as a job's first save does.
    malloc_trim(0);
    SPOT_RETURN_IF_ERROR(OpenArm(kDurableMaxChains[j], fmt::format("{}/arm{}", dir, j), &a));
    for (int k = 0; k <= kRestoreChainDepth; ++k) {
      SPOT_RETURN_IF_ERROR(s.Restore(states[k]));
      // Untimed: the stores share a file system, and a save's fsyncs would
      // also write out the dirty pages the store before it left.
      ::sync();
      SPOT_RETURN_IF_ERROR(SaveVersion(s, k, &a));
    }
    std::vector<double> replicate;
    int full = 0;
    for (const DurableVersion& v : a.fig.versions) {
      replicate.push_back(v.replicate_s);
      full += v.materialized ? 1 : 0;
    }
    Progress(fmt::format("ckpt {}: 6. {}: replicated in {} s, {} of {} durable copies in full",
                         s.key, a.what(), FormatList(replicate, 2), full, a.fig.versions.size()));
    SPOT_RETURN_IF_ERROR(Restart(&a));
  }
  states.clear();
  SPOT_ASSIGN_OR_RETURN(Fingerprint now, TakeFingerprint(s, &scratch));
  SPOT_RETURN_IF_ERROR(CheckSame(want, now, "the newest state, restored before its save"));
  const std::string torch_dir = dir + "/torch";
  fs::create_directories(torch_dir);
  torch::save(s.model, torch_dir + "/model.pt");
  torch::save(*s.optimizer, torch_dir + "/optimizer.pt");
  ::sync();  // every file clean, so the cold reps can drop them from the page cache

  DurableFigures f;
  ckpt::TensorPlacement into_model;
  s.PlaceIntoModel(&into_model);
  for (int i = 0; i < o.restores; ++i) {
    // The stores' order rotates each rep; torch::load follows them. Then
    // the same from a cold page cache.
    for (bool cold : {false, true}) {
      for (size_t k = 0; k < arms.size(); ++k) {
        ArmRun& a = arms[(k + static_cast<size_t>(i)) % arms.size()];
        SPOT_RETURN_IF_ERROR(TimedRestore(s, into_model, want, &scratch, cold, &a));
      }
      SPOT_RETURN_IF_ERROR(
          TimedTorchLoad(s, torch_dir, want, &scratch, cold, cold ? &f.torch_cold_s : &f.torch_s));
    }
  }
  // What a job gets (durable_max_chain 1), restarted in a new process, as
  // after a preemption: a new empty local tier per restart.
  for (ArmRun& a : arms) {
    if (a.fig.max_chain != 1) continue;
    SPOT_RETURN_IF_ERROR(MeasureRestarts(
        o,
        {.key = s.key,
         .durable_dir = a.durable_dir,
         .durable_max_chain = a.fig.max_chain,
         .scratch_dir = a.dir + "/restart"},
        a.durable_dir, want,
        {.key = s.key, .ours = false, .dir = torch_dir, .scratch_dir = a.dir + "/restart"}, want,
        &f.restart));
  }
  for (ArmRun& a : arms) f.arms.push_back(std::move(a.fig));
  arms.clear();  // closes the stores
  f.other_cores = meter.OtherCores();
  fs::remove_all(dir);
  return f;
}

}  // namespace spot::bench
