// `spot logs JOB`: the log files of a `spot run` job (the controller's, the
// rendezvous', every instance's) merged in time order, for people or, with
// --json, as JSON lines; with --follow, as they grow, until SIGINT/SIGTERM
// or the job ends.
#include <fmt/format.h>
#include <signal.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <cstdio>
#include <filesystem>

#include "apps/spot/commands.h"
#include "apps/spot/exit_code.h"
#include "apps/spot/log_merge.h"
#include "apps/spot/run_job.h"
#include "core/clock.h"
#include "core/job_files.h"

namespace spot::cli {
namespace {

namespace fs = std::filesystem;

constexpr long kPollNs = 200 * 1000 * 1000;

int Fail(const Status& s) {
  fmt::print(stderr, "error: {}\n", s.message());
  return ExitCodeFor(s);
}

bool LooksLikeJobDir(const fs::path& dir) {
  std::error_code ec;
  for (const fs::path& p : {dir / "controller.log", dir / "rendezvous.log", dir / "instances",
                            fs::path(JobFiles{dir.string()}.worker_job())}) {
    if (fs::exists(p, ec)) return true;
  }
  return false;
}

// The job directory `job` names: the directory itself, a job file's
// train.output_dir, or runs/<job>.
Result<std::string> ResolveJobDir(const std::string& job) {
  std::error_code ec;
  fs::path dir;
  if (fs::is_directory(job, ec)) {
    dir = job;
  } else if (fs::is_regular_file(job, ec)) {
    SPOT_ASSIGN_OR_RETURN(LoadedJob j, LoadJob(job));
    dir = j.job_dir;
    if (!fs::is_directory(dir, ec)) {
      return InvalidArgumentError(fmt::format(
          "job file {}: its job directory {} does not exist (has the job run?)", job, j.job_dir));
    }
  } else if (job.find('/') == std::string::npos && fs::is_directory(fs::path("runs") / job, ec)) {
    dir = fs::path("runs") / job;
  } else {
    return InvalidArgumentError(fmt::format(
        "no job '{}': not a job directory, a job file or the name of one under runs/", job));
  }
  if (!LooksLikeJobDir(dir)) {
    return InvalidArgumentError(fmt::format(
        "{}: not a job directory of `spot run` (no controller.log, rendezvous.log, instances/ "
        "or train.yaml)",
        dir.string()));
  }
  return dir.string();
}

struct Printer {
  const LogsArgs& args;
  LogFilter filter;

  void Print(const LogSource& s, const LogLine& line) const {
    if (!Shown(filter, s, line)) return;
    std::string out = args.json ? JsonLine(s, line) : HumanLine(s, line);
    out.push_back('\n');
    std::fwrite(out.data(), 1, out.size(), stdout);
  }
  void Print(const std::vector<LogSource>& sources, const std::vector<MergedLine>& lines) const {
    for (const MergedLine& m : lines) Print(sources[m.source], m.line);
    std::fflush(stdout);
  }
};

int PrintAll(const std::string& dir, const Printer& printer) {
  const std::vector<LogSource> sources = JobLogSources(dir);
  MergeFiles(sources, [&](MergedLine m) { printer.Print(sources[m.source], m.line); });
  std::fflush(stdout);
  return kExitOk;
}

// Polls the files, new ones included, every 0.2 s; what each poll finds is
// merged by time (a line written late with an early time is shown late).
int Follow(const std::string& dir, const Printer& printer) {
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGINT);
  sigaddset(&set, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &set, nullptr);
  std::vector<LogSource> sources;
  std::vector<LogTail> tails;
  auto poll = [&](bool complete) {
    for (const LogSource& s : JobLogSources(dir)) {
      const bool known = std::any_of(sources.begin(), sources.end(),
                                     [&](const LogSource& k) { return k.path == s.path; });
      if (known) continue;
      sources.push_back(s);
      tails.emplace_back(s.path);
    }
    std::vector<std::vector<LogLine>> batch;
    for (LogTail& t : tails) batch.push_back(t.Read(complete));
    printer.Print(sources, MergeByTime(std::move(batch)));
  };
  while (true) {
    // Checked before reading: what the job wrote before it ended is read now.
    const bool ended = JobEnded(dir);
    poll(ended);
    if (ended) return kExitOk;
    timespec tick{0, kPollNs};
    const int sig = sigtimedwait(&set, nullptr, &tick);
    if (sig == SIGINT || sig == SIGTERM) {
      poll(/*complete=*/true);
      return kExitOk;
    }
  }
}

}  // namespace

CLI::App* AddLogsCommand(CLI::App& app, LogsArgs* args) {
  CLI::App* cmd = app.add_subcommand(
      "logs",
      "Show a `spot run` job's logs (controller, rendezvous, every instance) merged in time "
      "order, each line with its instance, rank and generation.");
  cmd->add_option("job", args->job,
                  "The job: its directory (train.output_dir), its job file, or its name under "
                  "runs/")
      ->required();
  cmd->add_flag("-f,--follow", args->follow,
                "Keep showing new lines, of new instances too, until SIGINT/SIGTERM or the job "
                "ends");
  cmd->add_option("--instance", args->instance, "Only this instance's lines");
  cmd->add_option("--level", args->level, "Only lines of this level or above")
      ->check(CLI::IsMember({"debug", "info", "warn", "error", "critical"}));
  cmd->add_option("--since", args->since,
                  "Only lines from this time on: a duration back from now (90s, 10m, 2h, 1d) or "
                  "a UTC time (2026-12-03T07:00:00Z)");
  cmd->add_flag("--json", args->json,
                "Print JSON lines (ECS fields) instead of text; other lines are wrapped in one");
  return cmd;
}

int RunLogs(const LogsArgs& args) {
  auto dir = ResolveJobDir(args.job);
  if (!dir.ok()) return Fail(dir.status());
  Printer printer{.args = args};
  if (!args.level.empty()) printer.filter.min_level = LogLevelRank(args.level);
  printer.filter.instance = args.instance;
  if (!args.since.empty()) {
    auto since = ParseSince(args.since, static_cast<int64_t>(RealClock()->NowUnixS() * 1000));
    if (!since.ok()) return Fail(since.status());
    printer.filter.since_ms = *since;
  }
  return args.follow ? Follow(*dir, printer) : PrintAll(*dir, printer);
}

}  // namespace spot::cli
