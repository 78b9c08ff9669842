// spot_bench: end-to-end benchmarks with named workloads (like LevelDB's
// db_bench). Each prints a Markdown table comparing SpotTrain with its anchor,
// measured in the same run:
//   train  C++ Trainer vs Python PyTorch samples/s (batch 64 and 256)
//   ckpt   checkpointing cost (CNN and a 50M MLP): blocking time vs memcpy,
//          training overhead, bytes per save, codec MB/s, restore vs torch::load
//   sim    SpotSim evaluation speed (runs/s, full eval under 1 s, omniscient)
//   elastic  elastic `spot` workers vs torchrun (recovery, join, steps/s, compression)
//   run    `spot run` on the demo job: notice -> flushed checkpoint vs the notice,
//          reconcile overhead vs its interval, cost vs on demand and SpotSim
//   fleet  the controller's time per reconcile pass at 1, 100 and 1,000 instances
//          over 50 pools (fleet-up, virtual time), SpotSim runs/s of fleet-up vs up
// Tables go to stdout, progress to stderr. Exit codes: 0 done (a missed goal is
// a result, shown as MISS), 1 a workload failed, 2 bad flags.
#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <CLI/CLI.hpp>
#include <cstdlib>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <optional>
#include <thread>

#include "ckpt_workload.h"
#include "core/logging.h"
#include "core/temp_dir.h"
#include "elastic_workload.h"
#include "fleet_workload.h"
#include "gpt_workload.h"
#include "images_workload.h"
#include "monitor_workload.h"
#include "report.h"
#include "run_workload.h"
#include "sim_workload.h"
#include "train/trainer.h"
#include "train_workload.h"

namespace spot::bench {
namespace {

struct Flags {
  std::vector<std::string> workloads = {"train", "ckpt", "sim"};
  std::string work_dir;  // default: a new directory under $TMPDIR, removed at the end
  TrainBenchOptions train;
  CkptBenchOptions ckpt;
  SimBenchOptions sim;
  ElasticBenchOptions elastic;
  RunBenchOptions run;
  RunBenchOptions command;  // the run workload on the PyTorch example (a command workload)
  MonitorBenchOptions monitor;
  FleetBenchOptions fleet;
  GptBenchOptions gpt;
  ImagesBenchOptions images;
};

void AddFlags(CLI::App& app, Flags* f) {
  app.add_option("--workloads", f->workloads,
                 "Comma-separated: train, ckpt, sim, elastic, run, monitor, fleet, gpt, images")
      ->delimiter(',')
      ->check(CLI::IsMember({"train", "ckpt", "sim", "elastic", "run", "command", "monitor",
                             "fleet", "gpt", "images"}))
      ->capture_default_str();
  app.add_option("--threads", f->train.threads, "Intra-op threads on both sides")
      ->check(CLI::Range(1, 256))
      ->capture_default_str();
  app.add_option("--batch-sizes", f->train.batch_sizes, "train: batch sizes")
      ->delimiter(',')
      ->check(CLI::Range(1, 60000))
      ->capture_default_str();
  app.add_option("--samples", f->train.samples,
                 "train: timed samples per run (steps = this / batch)")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  app.add_option("--steps", f->train.steps,
                 "train: timed steps per run at every batch size "
                 "(overrides --samples; 0 = use --samples)")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  app.add_option("--warmup-steps", f->train.warmup_steps, "train: untimed steps before timing")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  app.add_option("--repeats", f->train.repeats, "train: runs per side; the median is reported")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  app.add_option("--seed", f->train.seed, "Seed for weights and data order")->capture_default_str();
  app.add_option("--python", f->train.python, "Python with PyTorch")->capture_default_str();
  app.add_option("--script", f->train.script, "The Python baseline")->capture_default_str();
  app.add_option("--python-env", f->train.python_env,
                 "train: VAR=VALUE set for the Python runs only (repeatable), e.g. "
                 "GLIBC_TUNABLES=glibc.malloc.mmap_threshold=33554432:glibc.malloc.trim_threshold="
                 "1073741824 to give Python the trainer's malloc settings");
  app.add_option("--train-module", f->train.module,
                 "train: a TorchScript module (examples/torchscript/export.py) both sides train "
                 "instead of the CNN");
  app.add_option("--data", f->train.dataset_path, "Fashion-MNIST directory")->capture_default_str();
  app.add_option("--quiet-wait", f->train.quiet_wait_s,
                 "train: seconds to wait for other processes to go quiet before each run")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  app.add_option("--ckpt-states", f->ckpt.states,
                 "ckpt: training states, comma-separated: cnn, mlp50m")
      ->delimiter(',')
      ->check(CLI::IsMember({"cnn", "mlp50m"}))
      ->capture_default_str();
  app.add_option("--ckpt-saves", f->ckpt.saves,
                 "ckpt: timed saves (and memcpys) per state for the blocking time, after 2 "
                 "warm-up saves")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  app.add_option("--ckpt-runs", f->ckpt.runs,
                 "ckpt: training runs per arm (plain, default policy, aggressive)")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  app.add_option("--ckpt-cnn-steps", f->ckpt.cnn_steps, "ckpt: steps per training run, CNN")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  app.add_option("--ckpt-mlp-steps", f->ckpt.mlp_steps, "ckpt: steps per training run, 50M MLP")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  app.add_option("--ckpt-aggressive-interval", f->ckpt.aggressive_interval_s,
                 "ckpt: seconds between saves in the aggressive arm, CNN")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  app.add_option("--ckpt-mlp-aggressive-interval", f->ckpt.mlp_aggressive_interval_s,
                 "ckpt: seconds between saves in the aggressive arm, 50M MLP")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  app.add_option("--ckpt-quiet-wait", f->ckpt.quiet_wait_s,
                 "ckpt: seconds to wait for other processes to go quiet before each state")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  app.add_option("--ckpt-restores", f->ckpt.restores, "ckpt: timed restores per method")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  app.add_flag("--ckpt-restore-only", f->ckpt.restore_only,
               "ckpt: measure the restore time alone (sections 5 and 6; no training runs)");
  // Internal: the restart child of sections 5 and 6 (ckpt_workload.h), hidden from --help.
  app.add_option("--ckpt-restart-child", f->ckpt.restart_child)
      ->check(CLI::IsMember({"ours", "torch"}))
      ->group("");
  app.add_option("--ckpt-restart-dir", f->ckpt.restart_dir)->group("");
  app.add_option("--ckpt-restart-before-step", f->ckpt.restart_before_step)->group("");
  app.add_option("--ckpt-restart-out", f->ckpt.restart_out)->group("");
  app.add_option("--ckpt-restart-durable-dir", f->ckpt.restart_durable_dir)->group("");
  app.add_option("--ckpt-restart-durable-max-chain", f->ckpt.restart_durable_max_chain)->group("");
  app.add_option("--sim-samples", f->sim.samples, "sim: starts per zone for the fast policies")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  app.add_option("--sim-omniscient-samples", f->sim.omniscient_samples,
                 "sim: starts per zone for omniscient")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  app.add_option("--market-data", f->sim.data_dir, "sim: the shared market records")
      ->capture_default_str();
  app.add_option("--elastic-repeats", f->elastic.repeats,
                 "elastic: kills and joins per side; the median is reported")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  app.add_option("--elastic-epochs", f->elastic.accuracy_epochs,
                 "elastic: epochs of each compression run")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  app.add_option("--elastic-compressions", f->elastic.compressions,
                 "elastic: compression choices to compare")
      ->delimiter(',')
      ->capture_default_str();
  app.add_option("--spot-bin", f->elastic.spot_bin, "elastic, run: the spot binary")
      ->capture_default_str();
  app.add_option("--run-repeats", f->run.repeats, "run: runs of the demo job")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  app.add_option("--run-job", f->run.job_file,
                 "run: the job file (relative paths in it resolve against the source directory)")
      ->capture_default_str();
  app.add_option("--fleet-pools", f->fleet.pools, "fleet: synthetic spot pools")
      ->check(CLI::Range(1, 1000))
      ->capture_default_str();
  app.add_option("--fleet-nodes", f->fleet.controller_nodes,
                 "fleet: instances (N) of the controller arms with the store on tmpfs")
      ->delimiter(',')
      ->check(CLI::Range(1, 100000))
      ->capture_default_str();
  app.add_option("--fleet-disk-nodes", f->fleet.disk_nodes,
                 "fleet: instances (N) of the controller arms with the store on disk")
      ->delimiter(',')
      ->check(CLI::Range(1, 100000))
      ->capture_default_str();
  app.add_option("--fleet-tmpfs-dir", f->fleet.tmpfs_dir,
                 "fleet: memory-backed directory for the tmpfs arms' stores (\"\": skip them)")
      ->capture_default_str();
  app.add_option("--fleet-instance-hours", f->fleet.controller_instance_hours,
                 "fleet: work of a controller arm is min(24 h, this / N) compute-hours")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  app.add_option("--fleet-sim-samples", f->fleet.sim_samples,
                 "fleet: SpotSim starts per policy and N")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  app.add_option("--images-side", f->images.side, "images: width and height of each image")
      ->check(CLI::Range(8, 4096))
      ->capture_default_str();
  app.add_option("--gpt-steps", f->gpt.steps, "gpt: optimizer steps on each side")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  app.add_option("--work-dir", f->work_dir, "Scratch directory (default: a new temporary one)");
}

std::string CpuModel() {
  std::ifstream in("/proc/cpuinfo");
  for (std::string line; std::getline(in, line);) {
    if (line.rfind("model name", 0) == 0) return line.substr(line.find(':') + 2);
  }
  return "unknown CPU";
}

std::string Header(const Flags& f) {
  char date[32];
  std::time_t now = std::time(nullptr);
  std::strftime(date, sizeof date, "%Y-%m-%d %H:%M", std::localtime(&now));
  return fmt::format("# spot_bench ({})\n\nMachine: {}, {} cores, BLAS {}. Workloads: {}.\n\n",
                     date, CpuModel(), std::thread::hardware_concurrency(), train::BlasLibrary(),
                     fmt::join(f.workloads, ", "));
}

int Run(Flags& f) {
  std::optional<TempDir> scratch;  // removed at the end when we made it
  if (f.work_dir.empty()) {
    auto t = TempDir::Create("spot_bench");
    if (!t.ok()) {
      fmt::print(stderr, "error: {}\n", t.status().message());
      return 1;
    }
    scratch.emplace(std::move(t).value());
    f.work_dir = scratch->path().string();
  }
  f.train.work_dir = f.ckpt.work_dir = f.elastic.work_dir = f.run.work_dir = f.work_dir;
  f.run.spot_bin = f.elastic.spot_bin;
  f.monitor.spot_bin = f.elastic.spot_bin;
  f.monitor.work_dir = f.work_dir;
  f.fleet.work_dir = f.work_dir;
  f.gpt.work_dir = f.work_dir;
  f.images.work_dir = f.work_dir;
  f.images.spot_bin = f.elastic.spot_bin;
  f.gpt.spot_bin = f.elastic.spot_bin;
  f.gpt.python = f.train.python;
  f.gpt.threads = f.train.threads;
  f.monitor.dataset_path = f.train.dataset_path;
  f.run.dataset_path = f.train.dataset_path;
  f.command = f.run;
  f.command.job_file = SPOT_SOURCE_DIR "/examples/pytorch-fashion-mnist.yaml";
  f.command.dataset_path = "";  // the script's own default
  f.elastic.python = f.train.python;
  f.elastic.dataset_path = f.train.dataset_path;
  f.ckpt.threads = f.train.threads;
  f.ckpt.seed = f.train.seed;
  f.ckpt.dataset_path = f.train.dataset_path;
  fmt::print("{}", Header(f));
  std::fflush(stdout);
  int rc = 0;
  for (const std::string& w : f.workloads) {
    Result<std::string> report = w == "train"     ? RunTrainWorkload(f.train)
                                 : w == "ckpt"    ? RunCkptWorkload(f.ckpt)
                                 : w == "elastic" ? RunElasticWorkload(f.elastic)
                                 : w == "run"     ? RunRunWorkload(f.run)
                                 : w == "command" ? RunRunWorkload(f.command)
                                 : w == "monitor" ? RunMonitorWorkload(f.monitor)
                                 : w == "fleet"   ? RunFleetWorkload(f.fleet)
                                 : w == "gpt"     ? RunGptWorkload(f.gpt)
                                 : w == "images"  ? RunImagesWorkload(f.images)
                                                  : RunSimWorkload(f.sim);
    if (!report.ok()) {
      fmt::print(stderr, "error: workload {}: {}\n", w, report.status().ToString());
      rc = 1;
      break;
    }
    fmt::print("{}\n", *report);
    std::fflush(stdout);
  }
  return rc;
}

}  // namespace
}  // namespace spot::bench

int main(int argc, char** argv) {
  spot::bench::Flags flags;
  flags.train.script = SPOT_SOURCE_DIR "/bench/train_bench.py";
  flags.sim.data_dir = SPOT_SOURCE_DIR "/../shared/data";
  flags.elastic.script = SPOT_SOURCE_DIR "/bench/torchrun_worker.py";
  flags.elastic.spot_bin = SPOT_BINARY_DIR "/bin/spot";
  flags.run.job_file = SPOT_SOURCE_DIR "/examples/fashion-mnist-spot.yaml";
  flags.run.source_dir = SPOT_SOURCE_DIR;
  flags.gpt.reference = SPOT_SOURCE_DIR "/examples/gpt-bible/reference.py";
  flags.gpt.job_template = SPOT_SOURCE_DIR "/examples/gpt-bible.yaml";
  CLI::App app{"spot_bench: SpotTrain against its anchors (Python PyTorch, torch::save)."};
  spot::bench::AddFlags(app, &flags);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e) == 0 ? 0 : 2;
  }
  // Warnings only: the trainer's info lines would drown the progress.
  if (spot::Status s = spot::InitLogging(spot::LogLevel::kWarn); !s.ok()) {
    fmt::print(stderr, "error: {}\n", s.message());
    return 2;
  }
  if (!flags.ckpt.restart_child.empty()) {
    flags.ckpt.threads = flags.train.threads;
    flags.ckpt.seed = flags.train.seed;
    if (spot::Status st = spot::bench::RunCkptRestartChild(flags.ckpt); !st.ok()) {
      fmt::print(stderr, "error: {}\n", st.ToString());
      return 1;
    }
    return 0;
  }
  return spot::bench::Run(flags);
}
