#include "elastic_workload.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <thread>

#include "bench_process.h"
#include "core/file_io.h"
#include "core/job_files.h"
#include "report.h"

namespace spot::bench {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

int64_t NowMs() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

std::vector<std::string> Lines(const fs::path& p) {
  std::vector<std::string> out;
  std::ifstream f(p);
  for (std::string line; std::getline(f, line);) {
    if (!f.eof() && !line.empty()) out.push_back(line);  // complete lines only
  }
  return out;
}

int64_t LastStep(const fs::path& step_log) {
  const std::vector<StepLogRow> rows = ReadStepLog(step_log.string());
  return rows.empty() ? 0 : rows.back().step;
}

// Polls `done` every millisecond for at most `timeout_s`.
template <typename F>
bool PollUntil(F done, double timeout_s) {
  auto end = std::chrono::steady_clock::now() + std::chrono::duration<double>(timeout_s);
  while (!done()) {
    if (std::chrono::steady_clock::now() > end) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  return true;
}

struct Ctx {
  const ElasticBenchOptions& o;
  fs::path dir;
  int cores = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));

  fs::path Fresh(const std::string& name) const {
    fs::path p = dir / name;
    fs::remove_all(p);
    fs::create_directories(p);
    return p;
  }
  std::string SpotJob(const fs::path& d, int64_t steps, int64_t epochs, int64_t test_limit,
                      const std::string& compression) const {
    std::string yaml = fmt::format(
        "name: bench\nmodel: mlp\ndataset:\n  path: {}\n  test_limit: {}\nbatch_size: 64\n"
        "{}seed: 1\noptimizer:\n  type: sgd\n  lr: 0.05\n"
        "checkpoint:\n  interval_steps: 200\noutput_dir: {}\n"
        "distributed:\n  compression: {}\n  join_window_s: 0.5\n",
        o.dataset_path, test_limit,
        epochs > 0 ? fmt::format("epochs: {}\n", epochs) : fmt::format("steps: {}\n", steps),
        (d / "out").string(), compression);
    fs::path p = d / "job.yaml";
    std::ofstream(p) << yaml;
    return p.string();
  }
  std::vector<std::string> Torchrun(const fs::path& d, std::vector<std::string> launcher,
                                    int64_t steps, int threads) const {
    std::vector<std::string> a = {o.python, "-m", "torch.distributed.run", "--redirects", "1",
                                  "--tee",  "1"};
    a.insert(a.end(), launcher.begin(), launcher.end());
    for (std::string s :
         {o.script, std::string("--data"), o.dataset_path, std::string("--steps"),
          std::to_string(steps), std::string("--ckpt"), (d / "ckpt.pt").string(),
          std::string("--step-log"), (d / "steps.csv").string(), std::string("--pid-dir"),
          d.string(), std::string("--threads"), std::to_string(threads)}) {
      a.push_back(s);
    }
    return a;
  }
};

// Time from SIGKILL of worker `pid` to the first step the step log shows
// after it; also the steps redone (torchrun restarts from its checkpoint).
struct Recovery {
  double ms = 0;
  int64_t redone = 0;
};

Result<Recovery> KillAndWatch(const fs::path& step_log, pid_t pid,
                              const std::function<int64_t(const std::string&)>& line_ms) {
  int64_t last = LastStep(step_log);
  size_t lines_before = Lines(step_log).size();
  int64_t t_kill = NowMs();
  if (::kill(pid, SIGKILL) != 0) return InternalError(fmt::format("cannot kill {}", pid));
  Recovery r;
  bool ok = PollUntil(
      [&] {
        std::vector<std::string> l = Lines(step_log);
        for (size_t i = lines_before; i < l.size(); ++i) {
          int64_t ms = line_ms(l[i]);
          if (ms >= t_kill) {
            r.ms = static_cast<double>(ms - t_kill);
            r.redone = last - std::stoll(l[i].substr(0, l[i].find(','))) + 1;
            return true;
          }
        }
        return false;
      },
      300);
  if (!ok) return DeadlineExceededError("no step within 300 s of the kill");
  return r;
}

Result<Recovery> SpotRecovery(const Ctx& c, int rep) {
  fs::path d = c.Fresh(fmt::format("spot_recovery{}", rep));
  std::string job = c.SpotJob(d, 100000, 0, 1000, "none");
  fs::path steps = d / "steps.csv";
  Proc p({c.o.spot_bin, "train", job, "--nproc", "3", "--plain", "--step-log", steps.string(),
          "--log-dir", (d / "workers").string()},
         (d / "log.txt").string());
  if (!PollUntil([&] { return LastStep(steps) >= c.o.kill_after_step; }, 300)) {
    return DeadlineExceededError("spot: no progress; see " + (d / "log.txt").string());
  }
  pid_t victim = 0;
  for (const std::string& l : Lines(d / "workers" / "worker-1.events.jsonl"))
    victim = json::parse(l)["pid"];
  if (victim == 0) return InternalError("no pid for worker-1");
  // The step log has no times: the time a line appears is the step's end.
  std::map<std::string, int64_t> seen;
  return KillAndWatch(steps, victim, [&](const std::string& line) {
    return seen.emplace(line, NowMs()).first->second;
  });
}

Result<Recovery> TorchrunRecovery(const Ctx& c, int rep) {
  fs::path d = c.Fresh(fmt::format("torchrun_recovery{}", rep));
  fs::path steps = d / "steps.csv";
  Proc p(c.Torchrun(d, {"--standalone", "--nnodes=1", "--nproc_per_node=3", "--max_restarts=3"},
                    100000, 1),
         (d / "log.txt").string());
  if (!PollUntil([&] { return LastStep(steps) >= c.o.kill_after_step; }, 300)) {
    return DeadlineExceededError("torchrun: no progress; see " + (d / "log.txt").string());
  }
  auto pid = ReadFile((d / "rank1").string());
  if (!pid.ok()) return pid.status();
  return KillAndWatch(steps, std::stoi(*pid), [](const std::string& line) {
    return std::stoll(line.substr(line.rfind(',') + 1));
  });
}

// Spot: `spot rendezvous` and 2 workers; a third started once past
// kill_after_step; the time until its sample log shows its first step.
Result<double> SpotJoin(const Ctx& c, int rep) {
  fs::path d = c.Fresh(fmt::format("spot_join{}", rep));
  std::string job = c.SpotJob(d, 100000, 0, 1000, "none");
  Proc store({c.o.spot_bin, "rendezvous", "--port", "0"}, (d / "store.txt").string());
  std::string url;
  PollUntil(
      [&] {
        auto t = ReadFile((d / "store.txt").string());
        size_t at = t.ok() ? t->find("tcp://") : std::string::npos;
        if (at != std::string::npos && t->find('\n', at) != std::string::npos) {
          url = t->substr(at, t->find('\n', at) - at);
        }
        return !url.empty();
      },
      30);
  if (url.empty()) return UnavailableError("spot rendezvous did not start");
  fs::path steps = d / "steps.csv";
  auto worker = [&](const std::string& id) {
    return std::vector<std::string>{c.o.spot_bin,
                                    "worker",
                                    job,
                                    "--rendezvous",
                                    url,
                                    "--id",
                                    id,
                                    "--threads",
                                    "1",
                                    "--step-log",
                                    steps.string(),
                                    "--sample-log",
                                    (d / (id + ".samples.csv")).string()};
  };
  Proc a(worker("a"), (d / "a.txt").string());
  Proc b(worker("b"), (d / "b.txt").string());
  if (!PollUntil([&] { return LastStep(steps) >= c.o.kill_after_step; }, 300)) {
    return DeadlineExceededError("spot: no progress");
  }
  int64_t t0 = NowMs();
  Proc j(worker("joiner"), (d / "joiner.txt").string());
  if (!PollUntil([&] { return !Lines(d / "joiner.samples.csv").empty(); }, 300)) {
    return DeadlineExceededError("the joiner never took part in a step");
  }
  return static_cast<double>(NowMs() - t0);
}

// torchrun: two agents (--nnodes=1:3, one worker each); a third agent
// started once past kill_after_step; the time until a step with world 3.
Result<double> TorchrunJoin(const Ctx& c, int rep) {
  fs::path d = c.Fresh(fmt::format("torchrun_join{}", rep));
  int port = 29700 + rep;
  std::vector<std::string> l = {"--nnodes=1:3",
                                "--nproc_per_node=1",
                                "--max_restarts=3",
                                "--rdzv_backend=c10d",
                                fmt::format("--rdzv_endpoint=127.0.0.1:{}", port),
                                fmt::format("--rdzv_id=bench{}", rep)};
  fs::path steps = d / "steps.csv";
  Proc a(c.Torchrun(d, l, 100000, 1), (d / "a.txt").string());
  Proc b(c.Torchrun(d, l, 100000, 1), (d / "b.txt").string());
  if (!PollUntil([&] { return LastStep(steps) >= c.o.kill_after_step; }, 300)) {
    return DeadlineExceededError("torchrun: no progress");
  }
  int64_t t0 = NowMs();
  Proc j(c.Torchrun(d, l, 100000, 1), (d / "joiner.txt").string());
  int64_t t_join = 0;
  if (!PollUntil(
          [&] {
            for (const std::string& line : Lines(steps)) {
              if (line.find(",3,") != std::string::npos) {
                t_join = std::stoll(line.substr(line.rfind(',') + 1));
                return true;
              }
            }
            return false;
          },
          300)) {
    return DeadlineExceededError("torchrun never ran with the third worker");
  }
  return static_cast<double>(t_join - t0);
}

Result<json> SpotRun(const Ctx& c, const std::string& name, int world, int64_t steps,
                     int64_t epochs, int64_t test_limit, const std::string& compression) {
  fs::path d = c.Fresh(name);
  std::string job = c.SpotJob(d, steps, epochs, test_limit, compression);
  Proc p({c.o.spot_bin, "train", job, "--nproc", std::to_string(world), "--plain"},
         (d / "log.txt").string());
  int rc = p.Wait(1800);
  if (rc != 0)
    return InternalError(fmt::format("{} failed ({}); see {}/log.txt", name, rc, d.string()));
  SPOT_ASSIGN_OR_RETURN(std::string text, ReadFile((d / "out" / "summary.json").string()));
  return json::parse(text);
}

Result<double> TorchrunStepsPerSecond(const Ctx& c, int world, int64_t steps) {
  fs::path d = c.Fresh(fmt::format("torchrun_world{}", world));
  Proc p(c.Torchrun(d, {"--standalone", "--nnodes=1", fmt::format("--nproc_per_node={}", world)},
                    steps, std::max(1, c.cores / world)),
         (d / "log.txt").string());
  if (int rc = p.Wait(1800); rc != 0) return InternalError(fmt::format("torchrun failed ({})", rc));
  std::vector<std::string> l = Lines(d / "steps.csv");
  if (l.size() < 100) return InternalError("torchrun logged too few steps");
  auto ms = [&](size_t i) { return std::stoll(l[i].substr(l[i].rfind(',') + 1)); };
  // From step 50 on: start-up and the first steps' warm-up excluded.
  return static_cast<double>(l.size() - 1 - 49) * 1000.0 /
         static_cast<double>(ms(l.size() - 1) - ms(49));
}

}  // namespace

Result<std::string> RunElasticWorkload(const ElasticBenchOptions& o) {
  Ctx c{o, fs::path(o.work_dir) / "elastic"};
  fs::create_directories(c.dir);
  std::vector<double> spot_rec, torch_rec, spot_join, torch_join, spot_redone, torch_redone;
  for (int rep = 0; rep < o.repeats; ++rep) {
    Progress(fmt::format("elastic: recovery {}/{}", rep + 1, o.repeats));
    SPOT_ASSIGN_OR_RETURN(Recovery s, SpotRecovery(c, rep));
    SPOT_ASSIGN_OR_RETURN(Recovery t, TorchrunRecovery(c, rep));
    spot_rec.push_back(s.ms), spot_redone.push_back(static_cast<double>(s.redone));
    torch_rec.push_back(t.ms), torch_redone.push_back(static_cast<double>(t.redone));
    Progress(fmt::format("elastic: join {}/{}", rep + 1, o.repeats));
    SPOT_ASSIGN_OR_RETURN(double sj, SpotJoin(c, rep));
    SPOT_ASSIGN_OR_RETURN(double tj, TorchrunJoin(c, rep));
    spot_join.push_back(sj), torch_join.push_back(tj);
  }
  Table rec({"", "spot (elastic)", "torchrun (restart all)", "torchrun / spot", "goal"});
  double rs = Median(spot_rec), rt = Median(torch_rec);
  rec.AddRow({"recovery: SIGKILL of 1 of 3 workers -> next completed step",
              fmt::format("{:.0f} ms", rs), fmt::format("{:.0f} ms", rt),
              fmt::format("{:.1f}x", rt / rs), rt / rs >= 5 ? ">= 5x: met" : ">= 5x: MISS"});
  double js = Median(spot_join), jt = Median(torch_join);
  rec.AddRow({"join: new worker process started -> first step with it",
              fmt::format("{:.0f} ms", js), fmt::format("{:.0f} ms", jt),
              fmt::format("{:.1f}x", jt / js), jt / js >= 5 ? ">= 5x: met" : ">= 5x: MISS"});
  rec.AddRow({"steps redone after the kill (median)", fmt::format("{:.0f}", Median(spot_redone)),
              fmt::format("{:.0f}", Median(torch_redone)), "", ""});

  Table tput({"workers", "spot steps/s", "torchrun steps/s", "spot / torchrun"});
  for (int w : o.worlds) {
    Progress(fmt::format("elastic: throughput, {} workers", w));
    SPOT_ASSIGN_OR_RETURN(
        json s, SpotRun(c, fmt::format("spot_world{}", w), w, o.throughput_steps, 0, 1000, "none"));
    SPOT_ASSIGN_OR_RETURN(double t, TorchrunStepsPerSecond(c, w, o.throughput_steps));
    double ss = s["steps_per_s"].get<double>();
    tput.AddRow({std::to_string(w), fmt::format("{:.0f}", ss), fmt::format("{:.0f}", t),
                 fmt::format("{:.2f}", ss / t)});
  }

  Table comp({"compression", "gradient bytes/step/worker", "vs none", "test accuracy", "vs none",
              "goal (within 1 point)"});
  double none_bytes = 0, none_acc = 0;
  for (const std::string& k : o.compressions) {
    Progress(fmt::format("elastic: compression {}", k));
    SPOT_ASSIGN_OR_RETURN(json s, SpotRun(c, "spot_" + k, 2, 0, o.accuracy_epochs, 0, k));
    double bytes = s["bytes_sent_per_step"].get<double>(), acc = s["test_accuracy"].get<double>();
    if (k == "none") none_bytes = bytes, none_acc = acc;
    double d = (acc - none_acc) * 100;
    comp.AddRow({k, fmt::format("{:.0f}", bytes),
                 none_bytes > 0 ? fmt::format("{:.3f}", bytes / none_bytes) : "",
                 fmt::format("{:.2f}%", acc * 100), fmt::format("{:+.2f}", d),
                 std::abs(d) <= 1.0 ? "met" : "MISS"});
  }
  return fmt::format(
      "## elastic\n\nMLP (235,146 parameters) on Fashion-MNIST, global batch 64, SGD; `spot` "
      "workers vs torchrun (python3-torch, DistributedDataParallel over Gloo, checkpoint every 50 "
      "steps) on the same machine in one run. Median of {} repeats.\n\n{}\n"
      "Raw (ms): spot recovery {}, torchrun recovery {}; spot join {}, torchrun join {}.\n\n"
      "Steps/s of {} steps (spot: rank 0's training loop; torchrun: from step 50 on):\n\n{}\n"
      "Compression: 2 workers, {} epochs of 60,000 images, accuracy on the 10,000 test images; "
      "bytes are the payload each worker hands to collectives per step:\n\n{}",
      o.repeats, rec.ToMarkdown(), FormatList(spot_rec), FormatList(torch_rec),
      FormatList(spot_join), FormatList(torch_join), o.throughput_steps, tput.ToMarkdown(),
      o.accuracy_epochs, comp.ToMarkdown());
}

}  // namespace spot::bench
