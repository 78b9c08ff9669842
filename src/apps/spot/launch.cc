// `spot train --nproc N JOB.yaml`: hosts the job's rendezvous store and runs N
// `spot worker` processes on this machine, like torchrun. Unlike torchrun it
// never restarts the survivors when a worker dies: it declares the dead worker
// gone at once (so the others re-form without waiting for its liveness to
// lapse) and lets the elastic workers carry on.
#include <fmt/format.h>
#include <signal.h>
#include <spdlog/spdlog.h>

#include <cstring>
#include <filesystem>
#include <map>
#include <nlohmann/json.hpp>
#include <thread>

#include "apps/spot/commands.h"
#include "apps/spot/exit_code.h"
#include "core/file_io.h"
#include "core/job_files.h"
#include "core/logging.h"
#include "core/process.h"
#include "dist/c10d_stores.h"
#include "train/train_spec.h"

namespace spot::cli {
namespace {

namespace fs = std::filesystem;

// A worker from our own binary, sharing our terminal and process group (so
// Ctrl-C reaches it too), with no signals blocked.
Result<int64_t> SpawnWorker(const std::vector<std::string>& argv) {
  return Spawn({.argv = argv,
                .out = Output::Inherit(),
                .err = Output::Inherit(),
                .inherit_stdin = true,
                .program = "/proc/self/exe",
                .group = ProcessGroup::kInherit});
}

}  // namespace

int RunLaunch(const TrainArgs& args) {
  auto spec = train::LoadTrainSpec(args.job_path);
  if (!spec.ok()) {
    fmt::print(stderr, "error: {}\n", spec.status().message());
    return ExitCodeFor(spec.status());
  }
  SetLogContext("job", spec->name);  // on its JSON lines (SPOT_LOG_FORMAT=json)
  fs::path log_dir =
      args.log_dir.empty() ? fs::path(spec->output_dir) / "workers" : fs::path(args.log_dir);
  if (Status st = CreateDirectories(log_dir.string()); !st.ok()) {
    // The directory is the user's to choose: bad input, naming where it was named.
    fmt::print(stderr, "error: {}: {}\n",
               args.log_dir.empty() ? args.job_path + ": output_dir (its workers/ directory)"
                                    : std::string("--log-dir"),
               st.message());
    return kExitBadInput;
  }
  // Signals are taken synchronously; block them before any thread starts.
  sigset_t set;
  sigemptyset(&set);
  for (int s : {SIGCHLD, SIGTERM, SIGINT}) sigaddset(&set, s);
  sigprocmask(SIG_BLOCK, &set, nullptr);
  auto store = dist::HostTcpStore("127.0.0.1", args.rdzv_port, std::chrono::seconds(30));
  if (!store.ok()) {
    fmt::print(stderr, "error: {}\n", store.status().message());
    return kExitFailure;
  }
  const std::string url = fmt::format("tcp://127.0.0.1:{}", (*store)->getPort());
  auto kv = dist::NewC10dKvStore(
      *store, dist::kTcpKvPrefix,
      std::chrono::milliseconds(static_cast<int64_t>(spec->distributed.liveness_ttl_s * 1e3)));
  const int cores = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  const int threads =
      spec->threads > 0 ? static_cast<int>(spec->threads) : std::max(1, cores / args.nproc);
  spdlog::info("launching {} workers of {} ({} threads each), rendezvous {}", args.nproc,
               spec->name, threads, url);
  std::map<int64_t, std::string> running;
  int finished_ok = 0, failed = 0;
  for (int i = 0; i < args.nproc; ++i) {
    std::string id = fmt::format("worker-{}", i);
    std::string base = (log_dir / id).string();
    std::vector<std::string> argv = {"spot",
                                     "worker",
                                     args.job_path,
                                     "--rendezvous",
                                     url,
                                     "--id",
                                     id,
                                     "--threads",
                                     std::to_string(threads),
                                     "--sample-log",
                                     base + ".samples.csv",
                                     "--event-log",
                                     base + ".events.jsonl",
                                     "--log-interval",
                                     fmt::format("{}", args.log_interval_s)};
    if (!args.step_log.empty()) argv.insert(argv.end(), {"--step-log", args.step_log});
    if (args.plain_progress) argv.push_back("--plain");
    Result<int64_t> pid = SpawnWorker(argv);
    if (pid.ok()) {
      running[*pid] = id;
    } else {
      ++failed;
      spdlog::error("{}: {}", id, pid.status().message());
    }
  }
  while (!running.empty()) {
    timespec tick{0, 200 * 1000 * 1000};
    int sig = sigtimedwait(&set, nullptr, &tick);
    if (sig == SIGTERM || sig == SIGINT) {
      spdlog::warn("{}: stopping the workers", strsignal(sig));
      for (const auto& [pid, id] : running) SignalProcess(pid, SIGTERM);
    }
    for (auto it = running.begin(); it != running.end();) {
      ProcessStatus status = CheckProcess(it->first);  // reaps it when it has ended
      if (status.running) {
        ++it;
        continue;
      }
      if (status.exit_code == 0) {
        ++finished_ok;
      } else {
        ++failed;
        spdlog::warn("{} {}; the others carry on without it", it->second, DescribeExit(status));
        (void)kv->MarkDead(it->second);
      }
      it = running.erase(it);
    }
  }
  fs::path summary = JobFiles{spec->output_dir}.summary();
  if (finished_ok == 0) {
    fmt::print(stderr, "error: {}: no worker finished the job ({} failed)\n", spec->name, failed);
    return kExitFailure;
  }
  auto text = ReadFile(summary.string());
  if (text.ok()) {
    auto j = nlohmann::json::parse(*text, nullptr, false);
    if (!j.is_discarded()) {
      fmt::print(
          "{}: {} steps, test accuracy {:.2f}%, finished by {} workers ({} lost); "
          "summary: {}\n",
          spec->name, j.value("steps", 0), j.value("test_accuracy", 0.0) * 100, finished_ok, failed,
          summary.string());
    }
  }
  return kExitOk;
}

}  // namespace spot::cli
