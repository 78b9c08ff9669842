// `spot train JOB.yaml`: trains one job on this machine.
#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <CLI/CLI.hpp>
#include <cstring>

#include "apps/spot/commands.h"
#include "apps/spot/exit_code.h"
#include "train/train_spec.h"
#include "train/trainer.h"

namespace spot::cli {

CLI::App* AddTrainCommand(CLI::App& app, TrainArgs* args) {
  CLI::App* cmd = app.add_subcommand(
      "train",
      "Train a job on this machine. Resumes from the newest valid checkpoint when the job "
      "says resume: auto (the default). Writes <output_dir>/model.pt (a state dict Python's "
      "torch.load reads) and <output_dir>/summary.json.");
  cmd->add_option("job", args->job_path, "Job file (YAML); see docs/job-spec.md")->required();
  cmd->add_option("--step-log", args->step_log,
                  "Append one line per step to this file: step,epoch,loss,lr (exact values)");
  cmd->add_flag("--plain", args->plain_progress,
                "Periodic log lines instead of a progress bar, even on a terminal");
  cmd->add_option("--log-interval", args->log_interval_s,
                  "Seconds between progress lines when not on a terminal")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  cmd->add_option("--nproc", args->nproc,
                  "Run N elastic data-parallel workers on this machine (like torchrun); the "
                  "job's distributed: section applies")
      ->check(CLI::Range(1, 256));
  cmd->add_option("--rdzv-port", args->rdzv_port,
                  "With --nproc: port of the rendezvous store (default: any free port)")
      ->check(CLI::Range(0, 65535));
  cmd->add_option("--log-dir", args->log_dir,
                  "With --nproc: write each worker's step, sample and event logs and its "
                  "output here (default: <output_dir>/workers)");
  return cmd;
}

int RunTrain(const TrainArgs& args) {
  auto spec = train::LoadTrainSpec(args.job_path);
  if (!spec.ok()) {
    fmt::print(stderr, "error: {}\n", spec.status().message());
    return ExitCodeFor(spec.status());
  }
  auto trainer = train::Trainer::Create(*spec, {.step_log_path = args.step_log,
                                                .plain_progress = args.plain_progress,
                                                .log_interval_s = args.log_interval_s,
                                                .handle_signals = true});
  if (!trainer.ok()) {
    fmt::print(stderr, "error: {}\n", trainer.status().message());
    return ExitCodeFor(trainer.status());
  }
  auto summary = (*trainer)->Run();
  if (!summary.ok()) {
    fmt::print(stderr, "error: {}\n", summary.status().message());
    return ExitCodeFor(summary.status());
  }
  const train::TrainSummary& s = *summary;
  if (s.stopped_by_signal != 0) {
    fmt::print("{}: stopped by {} at step {}; checkpoint {} holds it. Run again to continue.\n",
               spec->name, strsignal(s.stopped_by_signal), s.steps, s.last_checkpoint_version);
    return 128 + s.stopped_by_signal;
  }
  fmt::print(
      "{}: {} steps ({} this run{}), {}\n", spec->name, s.steps, s.steps_this_run,
      s.resumed_from_step >= 0 ? fmt::format(", resumed from step {}", s.resumed_from_step) : "",
      train::EvalText(spec->loss, s.test_accuracy, s.test_loss));
  fmt::print("throughput {:.0f} samples/s{}, wall time {:.1f} s\n", s.train_samples_per_s,
             spec->dataset == "tokens"
                 ? fmt::format(" ({:.0f} tokens/s)", s.train_samples_per_s * spec->context)
                 : "",
             s.wall_seconds);
  fmt::print(
      "checkpoints: {} saved ({} deltas), {:.1f} MB written for {:.1f} MB of state; "
      "training waited {:.3f} s for them ({:.2f}% overhead)\n",
      s.checkpoints_saved, s.delta_checkpoints, s.checkpoint_bytes / 1e6,
      s.checkpoint_payload_bytes / 1e6, s.checkpoint_seconds, s.checkpoint_overhead * 100);
  for (const train::RollbackEvent& e : s.rollbacks) {
    fmt::print("rollback: {} at step {}; restored checkpoint {} (step {}), skipped batch {}\n",
               e.reason, e.at_step, e.restored_version, e.restored_step, e.batch);
  }
  fmt::print("model: {}\nsummary: {}\n", s.model_path, s.summary_path);
  return kExitOk;
}

}  // namespace spot::cli
