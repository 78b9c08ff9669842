// `spot profile RUN`: where a run's training steps spent their time. Every
// worker writes a step profile while it trains (<run dir>/profile/*.jsonl,
// monitor/chrome_trace.h); this merges them into one trace that
// chrome://tracing, Perfetto (ui.perfetto.dev) and speedscope open, one
// process per worker, and prints each worker's time per phase.
#include <fmt/format.h>

#include <CLI/CLI.hpp>
#include <filesystem>

#include "apps/spot/commands.h"
#include "apps/spot/exit_code.h"
#include "apps/spot/run_job.h"
#include "core/file_io.h"
#include "monitor/chrome_trace.h"
#include "train/train_spec.h"

namespace spot::cli {
namespace {

namespace fs = std::filesystem;

int Fail(const Status& s) {
  fmt::print(stderr, "error: {}\n", s.message());
  return ExitCodeFor(s);
}

// The run directory of RUN: a directory as given, else the job file's (a
// `spot run` job, or a `spot train` one).
Result<std::string> RunDirOf(const std::string& run) {
  std::error_code ec;
  if (fs::is_directory(run, ec)) return run;
  if (!fs::exists(run, ec)) {
    return NotFoundError(fmt::format("{}: no such run directory or job file", run));
  }
  auto job = LoadJob(run);
  if (job.ok()) return job->job_dir;
  auto train = train::LoadTrainSpec(run);
  if (train.ok()) return train->output_dir;
  return job.status();
}

}  // namespace

CLI::App* AddProfileCommand(CLI::App& app, ProfileArgs* args) {
  CLI::App* cmd = app.add_subcommand(
      "profile",
      "Where a run's steps spent their time: each worker's phases (data, forward, backward, "
      "sync, optimizer) and checkpoint saves, merged into one Chrome trace");
  cmd->add_option("run", args->run, "The run directory, or the job file (spot run or spot train)")
      ->required();
  cmd->add_option("-o,--output", args->output,
                  "Trace file to write (default: <run dir>/profile.trace.json); open it in "
                  "chrome://tracing or ui.perfetto.dev");
  return cmd;
}

int RunProfile(const ProfileArgs& args) {
  auto dir = RunDirOf(args.run);
  if (!dir.ok()) return Fail(dir.status());
  std::vector<std::string> files = monitor::TraceFilesOf(*dir);
  if (files.empty()) {
    return Fail(NotFoundError(
        fmt::format("{}: no step profiles in {}/profile (workers write them while they train)",
                    args.run, *dir)));
  }
  monitor::ProfileSummary sum;
  auto doc = monitor::MergeTraceFiles(files, &sum);
  if (!doc.ok()) return Fail(doc.status());
  const std::string out =
      args.output.empty() ? (fs::path(*dir) / "profile.trace.json").string() : args.output;
  if (Status s = WriteFileAtomically(out, *doc); !s.ok()) {
    return Fail(InvalidArgumentError(fmt::format("--output {}: {}", out, s.message())));
  }
  fmt::print("{:<24} {:<10} {:<10} {:>8} {:>10} {:>10} {:>10} {:>7}\n", "worker", "lane", "phase",
             "events", "total s", "mean ms", "p95 ms", "share");
  for (const monitor::PhaseRow& r : sum.rows) {
    fmt::print("{:<24} {:<10} {:<10} {:>8} {:>10.2f} {:>10.3f} {:>10.3f} {:>7}\n", r.process,
               r.lane, r.phase, r.count, r.total_s, r.mean_ms, r.p95_ms,
               r.lane == "step" ? fmt::format("{:.1f}%", 100 * r.share) : "");
  }
  fmt::print("{} events of {} workers{} -> {} (open in chrome://tracing or ui.perfetto.dev)\n",
             sum.events, files.size(),
             sum.skipped_lines > 0
                 ? fmt::format(", {} cut-short last lines skipped", sum.skipped_lines)
                 : "",
             out);
  return kExitOk;
}

}  // namespace spot::cli
