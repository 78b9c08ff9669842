// `spot train --nproc N JOB.yaml`: hosts the job's rendezvous store and runs N
// `spot worker` processes on this machine, like torchrun. Unlike torchrun it
// never restarts the survivors when a worker dies: it declares the dead worker
// gone at once (so the others re-form without waiting for its liveness to
// lapse) and lets the elastic workers carry on.
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <map>
#include <thread>

#include <fmt/format.h>
#include <nlohmann/json.hpp>
#include <spdlog/spdlog.h>

#include "apps/spot/commands.h"
#include "apps/spot/exit_code.h"
#include "core/file_io.h"
#include "dist/c10d_stores.h"
#include "train/train_spec.h"

namespace spot::cli {
namespace {

namespace fs = std::filesystem;

pid_t Spawn(const std::vector<std::string>& argv, const sigset_t& old_mask) {
  pid_t pid = ::fork();
  if (pid != 0) return pid;
  sigprocmask(SIG_SETMASK, &old_mask, nullptr);
  std::vector<char*> a;
  for (const std::string& s : argv) a.push_back(const_cast<char*>(s.c_str()));
  a.push_back(nullptr);
  ::execv("/proc/self/exe", a.data());
  std::fprintf(stderr, "error: cannot start %s: %s\n", argv[0].c_str(), std::strerror(errno));
  ::_exit(127);
}

std::string Describe(int status) {
  if (WIFSIGNALED(status)) return fmt::format("killed by {}", strsignal(WTERMSIG(status)));
  return fmt::format("exited with code {}", WEXITSTATUS(status));
}

}  // namespace

int RunLaunch(const TrainArgs& args) {
  auto spec = train::LoadTrainSpec(args.job_path);
  if (!spec.ok()) {
    fmt::print(stderr, "error: {}\n", spec.status().message());
    return ExitCodeFor(spec.status());
  }
  fs::path log_dir =
      args.log_dir.empty() ? fs::path(spec->output_dir) / "workers" : fs::path(args.log_dir);
  if (Status st = CreateDirectories(log_dir.string()); !st.ok()) {
    fmt::print(stderr, "error: {}\n", st.message());
    return kExitFailure;
  }
  // Signals are taken synchronously; block them before any thread starts.
  sigset_t set, old_mask;
  sigemptyset(&set);
  for (int s : {SIGCHLD, SIGTERM, SIGINT}) sigaddset(&set, s);
  sigprocmask(SIG_BLOCK, &set, &old_mask);
  auto store = dist::HostTcpStore("127.0.0.1", args.rdzv_port, std::chrono::seconds(30));
  if (!store.ok()) {
    fmt::print(stderr, "error: {}\n", store.status().message());
    return kExitFailure;
  }
  const std::string url = fmt::format("tcp://127.0.0.1:{}", (*store)->getPort());
  auto kv = dist::NewC10dKvStore(*store, dist::kTcpKvPrefix,
                                 std::chrono::milliseconds(
                                     static_cast<int64_t>(spec->distributed.liveness_ttl_s * 1e3)));
  const int cores = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  const int threads =
      spec->threads > 0 ? static_cast<int>(spec->threads) : std::max(1, cores / args.nproc);
  spdlog::info("launching {} workers of {} ({} threads each), rendezvous {}", args.nproc,
               spec->name, threads, url);
  std::map<pid_t, std::string> running;
  for (int i = 0; i < args.nproc; ++i) {
    std::string id = fmt::format("worker-{}", i);
    std::string base = (log_dir / id).string();
    std::vector<std::string> argv = {"spot", "worker", args.job_path, "--rendezvous", url,
                                     "--id", id, "--threads", std::to_string(threads),
                                     "--sample-log", base + ".samples.csv",
                                     "--event-log", base + ".events.jsonl",
                                     "--log-interval", fmt::format("{}", args.log_interval_s)};
    if (!args.step_log.empty()) argv.insert(argv.end(), {"--step-log", args.step_log});
    if (args.plain_progress) argv.push_back("--plain");
    running[Spawn(argv, old_mask)] = id;
  }
  int finished_ok = 0, failed = 0;
  while (!running.empty()) {
    timespec tick{0, 200 * 1000 * 1000};
    int sig = sigtimedwait(&set, nullptr, &tick);
    if (sig == SIGTERM || sig == SIGINT) {
      spdlog::warn("{}: stopping the workers", strsignal(sig));
      for (const auto& [pid, id] : running) ::kill(pid, SIGTERM);
    }
    int status = 0;
    for (pid_t pid; (pid = ::waitpid(-1, &status, WNOHANG)) > 0;) {
      auto it = running.find(pid);
      if (it == running.end()) continue;
      if (WIFEXITED(status) && WEXITSTATUS(status) == 0) {
        ++finished_ok;
      } else {
        ++failed;
        spdlog::warn("{} {}; the others carry on without it", it->second, Describe(status));
        (void)kv->MarkDead(it->second);
      }
      running.erase(it);
    }
  }
  fs::path summary = fs::path(spec->output_dir) / "summary.json";
  if (finished_ok == 0) {
    fmt::print(stderr, "error: {}: no worker finished the job ({} failed)\n", spec->name, failed);
    return kExitFailure;
  }
  auto text = ReadFile(summary.string());
  if (text.ok()) {
    auto j = nlohmann::json::parse(*text, nullptr, false);
    if (!j.is_discarded()) {
      fmt::print("{}: {} steps, test accuracy {:.2f}%, finished by {} workers ({} lost); "
                 "summary: {}\n",
                 spec->name, j.value("steps", 0), j.value("test_accuracy", 0.0) * 100,
                 finished_ok, failed, summary.string());
    }
  }
  return kExitOk;
}

}  // namespace spot::cli
