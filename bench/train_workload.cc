#include "train_workload.h"

#include <fmt/format.h>
#include <sys/wait.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "cpu_load.h"
#include "report.h"
#include "train/train_spec.h"
#include "train/trainer.h"

namespace spot::bench {
namespace {

// One side's figure and the load other processes put on the machine meanwhile.
struct Measurement {
  double rate = 0;        // samples/s over the timed steps
  double dataloader = 0;  // Python only: the DataLoader variant
  double other_cores = 0;
};

train::TrainSpec MakeSpec(const TrainBenchOptions& o, int64_t batch, int64_t steps,
                          const std::string& out_dir) {
  train::TrainSpec s;
  s.source = "spot_bench";
  s.name = "bench";
  s.model = o.module.empty() ? "cnn" : "torchscript";
  s.model_file = o.module;
  s.dataset_path = o.dataset_path;
  s.batch_size = batch;
  s.eval_batch_size = 256;  // outside the timing, but 2.5 s faster than 1000 here
  s.steps = steps;
  s.seed = o.seed;
  s.threads = o.threads;
  s.resume = "never";
  s.output_dir = out_dir;
  s.optimizer.type = "adam";
  s.optimizer.lr = o.lr;
  s.checkpoint.dir = out_dir + "/checkpoints";
  s.checkpoint.interval_steps = steps + 1;  // only the final save, outside the timing
  s.checkpoint.keep = 1;
  return s;
}

// Trains `steps` steps with the real Trainer in this process.
Result<Measurement> RunCpp(const TrainBenchOptions& o, int64_t batch, int64_t steps) {
  std::string dir = fmt::format("{}/cpp-b{}", o.work_dir, batch);
  CpuLoadMeter meter;
  SPOT_ASSIGN_OR_RETURN(auto trainer, train::Trainer::Create(MakeSpec(o, batch, steps, dir),
                                                             {.log_interval_s = 1e9}));
  SPOT_ASSIGN_OR_RETURN(train::TrainSummary s, trainer->Run());
  std::error_code ec;
  std::filesystem::remove_all(dir, ec);
  return Measurement{.rate = s.train_samples_per_s, .other_cores = meter.OtherCores()};
}

std::string Quote(const std::string& s) {
  std::string q = "'";
  for (char c : s) q += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return q + "'";
}

// Runs bench/train_bench.py and reads the JSON line it prints last.
Result<Measurement> RunPython(const TrainBenchOptions& o, int64_t batch, int64_t steps) {
  std::string cmd;
  for (const std::string& kv : o.python_env) cmd += "env " + Quote(kv) + " ";
  cmd += fmt::format(
      "{} {} --model cnn --batch {} --steps {} --warmup-steps {} --threads {} --seed {} "
      "--optimizer adam --lr {} --data {}{}",
      Quote(o.python), Quote(o.script), batch, steps, o.warmup_steps, o.threads, o.seed, o.lr,
      Quote(o.dataset_path), o.module.empty() ? "" : " --module " + Quote(o.module));
  CpuLoadMeter meter;
  std::FILE* p = popen(cmd.c_str(), "r");
  if (p == nullptr) return InternalError("cannot start: " + cmd);
  std::string out;
  char buf[4096];
  while (size_t n = std::fread(buf, 1, sizeof buf, p)) out.append(buf, n);
  int rc = pclose(p);
  if (rc != 0) {
    int code = WIFEXITED(rc) ? WEXITSTATUS(rc) : 128 + WTERMSIG(rc);
    return InternalError(fmt::format("Python baseline failed (exit code {}): {}", code, cmd));
  }
  size_t start = out.rfind("\n{");
  start = start == std::string::npos ? 0 : start + 1;
  auto j = nlohmann::json::parse(out.substr(start), nullptr, /*allow_exceptions=*/false);
  if (!j.is_object() || !j.contains("index_select_samples_per_s")) {
    return InternalError("no JSON result from: " + cmd + "\noutput: " + out);
  }
  return Measurement{.rate = j["index_select_samples_per_s"].get<double>(),
                     .dataloader = j["dataloader_samples_per_s"].get<double>(),
                     .other_cores = meter.OtherCores()};
}

// One run, repeated (up to kAttempts in all) while other processes disturbed it.
Result<Measurement> MeasureQuietly(const TrainBenchOptions& o, bool cpp, int64_t batch,
                                   int64_t steps) {
  constexpr int kAttempts = 3;
  for (int attempt = 1;; ++attempt) {
    WaitForQuiet(o.quiet_cores, o.quiet_wait_s);
    SPOT_ASSIGN_OR_RETURN(Measurement m,
                          cpp ? RunCpp(o, batch, steps) : RunPython(o, batch, steps));
    if (m.other_cores <= o.quiet_cores || attempt == kAttempts) return m;
    Progress(
        fmt::format("batch {}: {} run disturbed (others used {:.2f} cores, {:.0f} "
                    "samples/s); running it again",
                    batch, cpp ? "C++" : "Python", m.other_cores, m.rate));
  }
}

struct Runs {
  std::vector<double> cpp, python, dataloader;
  double max_other_cores = 0;
};

// Alternates the two sides (C++ first on even runs), waiting for quiet before each.
Result<Runs> MeasureBatch(const TrainBenchOptions& o, int64_t batch, int64_t steps) {
  Runs runs;
  for (int r = 0; r < o.repeats; ++r) {
    for (bool cpp : {r % 2 == 0, r % 2 != 0}) {
      SPOT_ASSIGN_OR_RETURN(Measurement m, MeasureQuietly(o, cpp, batch, steps));
      (cpp ? runs.cpp : runs.python).push_back(m.rate);
      if (!cpp) runs.dataloader.push_back(m.dataloader);
      runs.max_other_cores = std::max(runs.max_other_cores, m.other_cores);
      Progress(fmt::format("batch {} run {}/{}: {} {:.0f} samples/s{} (others used {:.2f} cores)",
                           batch, r + 1, o.repeats, cpp ? "C++" : "Python", m.rate,
                           cpp ? "" : fmt::format(", DataLoader {:.0f}", m.dataloader),
                           m.other_cores));
    }
  }
  return runs;
}

std::string Method(const TrainBenchOptions& o) {
  std::string env =
      o.python_env.empty() ? "" : fmt::format(" Python ran with {}.", fmt::join(o.python_env, " "));
  return fmt::format(
      "{} on Fashion-MNIST, Adam (lr {}), {} intra-op threads, seed {}. Each run: {} untimed "
      "warm-up steps, then the timed steps (column \"steps\"); samples/s over the timed steps "
      "only. C++: the real Trainer (its train_samples_per_s; eval and checkpoint excluded), "
      "after a {}-step warm-up Trainer in the same process per batch size. Python: "
      "bench/train_bench.py, warm-up steps in the same process. Median of {} runs per side, "
      "alternating C++ and Python, one at a time. \"others\" = cores other processes used "
      "during the runs (max).{}\n",
      o.module.empty() ? "CNN"
                       : fmt::format("The TorchScript module {} (both sides)",
                                     o.module.substr(o.module.rfind('/') + 1)),
      o.lr, o.threads, o.seed, o.warmup_steps, o.warmup_steps, o.repeats, env);
}

}  // namespace

Result<std::string> RunTrainWorkload(const TrainBenchOptions& o) {
  Table table({"batch", "steps", "C++ samples/s", "Python index_select", "Python DataLoader",
               "C++ / best Python", "goal", "result", "others"});
  std::string raw;
  for (int64_t batch : o.batch_sizes) {
    int64_t steps = o.steps > 0 ? o.steps : std::max<int64_t>(1, o.samples / batch);
    Progress(
        fmt::format("train: batch {}: warm-up ({} steps), then {} x ({} C++ + {} Python) "
                    "timed steps",
                    batch, o.warmup_steps, o.repeats, steps, steps));
    if (o.warmup_steps > 0) SPOT_RETURN_IF_ERROR(RunCpp(o, batch, o.warmup_steps).status());
    SPOT_ASSIGN_OR_RETURN(Runs runs, MeasureBatch(o, batch, steps));
    double cpp = Median(runs.cpp), py = Median(runs.python), dl = Median(runs.dataloader);
    double ratio = cpp / std::max(py, dl);
    double goal = batch == 64 ? 1.1 : 1.0;
    table.AddRow({fmt::format("{}", batch), fmt::format("{}", steps), fmt::format("{:.0f}", cpp),
                  fmt::format("{:.0f}", py), fmt::format("{:.0f}", dl),
                  fmt::format("{:.2f}x", ratio), fmt::format(">= {:.1f}x", goal),
                  std::string(ratio >= goal ? "PASS" : "MISS") +
                      (runs.max_other_cores > o.quiet_cores ? " (noisy)" : ""),
                  fmt::format("{:.2f}", runs.max_other_cores)});
    raw += fmt::format("- batch {}: C++ {}, Python index_select {}, Python DataLoader {}\n", batch,
                       FormatList(runs.cpp), FormatList(runs.python), FormatList(runs.dataloader));
  }
  const std::string what =
      o.module.empty() ? "" : " (" + o.module.substr(o.module.rfind('/') + 1) + ")";
  return "## train" + what + ": samples/s, C++ Trainer vs Python PyTorch\n\n" + Method(o) + "\n" +
         table.ToMarkdown() + "\nAll runs (samples/s):\n" + raw;
}

}  // namespace spot::bench
