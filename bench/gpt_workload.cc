#include "gpt_workload.h"

#include <fmt/format.h>
#include <yaml-cpp/yaml.h>

#include <cmath>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <sstream>

#include "bench_process.h"
#include "core/file_io.h"
#include "report.h"
#include "train/token_stream.h"

namespace spot::bench {
namespace {

namespace fs = std::filesystem;

// Runs `argv` to its end with its output in `log`; the log's text.
Result<std::string> RunToEnd(const std::vector<std::string>& argv, const std::string& log) {
  Proc p(argv, log);
  if (!p.started()) return InternalError("cannot start " + argv[0]);
  const int rc = p.Wait(24 * 3600);
  SPOT_ASSIGN_OR_RETURN(std::string out, ReadFile(log));
  if (rc != 0) {
    return InternalError(fmt::format("{} exited with {}; its log {}:\n{}", argv[0], rc, log,
                                     out.substr(out.size() > 2000 ? out.size() - 2000 : 0)));
  }
  return out;
}

// The King James Bible without verse references, as examples/gpt-bible/prepare.sh makes it.
Result<std::string> PrepareBible(const std::string& dir) {
  SPOT_ASSIGN_OR_RETURN(std::string raw,
                        RunToEnd({"/usr/bin/bible", "-f", "Gen1:1-Rev22:21"}, dir + "/bible.log"));
  std::istringstream in(raw);
  std::string text, line;
  while (std::getline(in, line)) {
    const size_t space = line.find(' ');
    if (space == std::string::npos || line.find(':') > space) continue;  // not a verse
    text += line.substr(space + 1) + "\n";
  }
  SPOT_RETURN_IF_ERROR(train::PrepareText(text, 0.1, dir + "/data").status());
  return dir + "/data";
}

struct Side {
  double tokens_per_s = 0;
  double val_loss = 0;
};

Status WriteYaml(const YAML::Node& node, const std::string& path) {
  YAML::Emitter e;
  e << node;
  return WriteFileAtomically(path, std::string(e.c_str()) + "\n");
}

// `spot train JOB`, its tokens/s (training steps only) and validation loss.
Result<Side> RunSpot(const GptBenchOptions& o, const std::string& job, const std::string& out,
                     int64_t context) {
  SPOT_RETURN_IF_ERROR(RunToEnd({o.spot_bin, "train", job, "--plain"}, out + ".log").status());
  SPOT_ASSIGN_OR_RETURN(std::string text, ReadFile(out + "/summary.json"));
  const auto summary = nlohmann::json::parse(text, nullptr, false);
  if (!summary.is_object()) return InternalError(out + "/summary.json: not JSON");
  return Side{.tokens_per_s = summary.value("train_samples_per_s", 0.0) * context,
              .val_loss = summary.value("test_loss", 0.0)};
}

}  // namespace

Result<std::string> RunGptWorkload(const GptBenchOptions& o) {
  const std::string dir = o.work_dir + "/gpt";
  SPOT_RETURN_IF_ERROR(CreateDirectories(dir));
  Progress("gpt: preparing the King James Bible as characters");
  SPOT_ASSIGN_OR_RETURN(std::string data, PrepareBible(dir));
  YAML::Node job = YAML::LoadFile(o.job_template);
  job["dataset"]["path"] = data;
  job["output_dir"] = dir + "/cpp";
  job["steps"] = o.steps;
  job["threads"] = o.threads;
  job["resume"] = "never";
  job["init"]["weights"] = dir + "/init.pt";
  job["checkpoint"] = YAML::Load("{interval: steps, interval_steps: 100000}");
  const int64_t context = job["model"]["context"].as<int64_t>();
  const int64_t batch = job["batch_size"].as<int64_t>();
  const std::string job_file = dir + "/job.yaml", bf16_file = dir + "/job-bf16.yaml",
                    auto_file = dir + "/job-auto.yaml";
  SPOT_RETURN_IF_ERROR(WriteYaml(job, job_file));
  job["output_dir"] = dir + "/cpp-bf16";
  job["precision"] = "bf16";
  SPOT_RETURN_IF_ERROR(WriteYaml(job, bf16_file));
  job["output_dir"] = dir + "/cpp-auto";
  job["precision"] = "auto";
  SPOT_RETURN_IF_ERROR(WriteYaml(job, auto_file));

  Progress(fmt::format("gpt: Python, {} steps (also writes the initial weights)", o.steps));
  SPOT_ASSIGN_OR_RETURN(std::string py_out,
                        RunToEnd({o.python, o.reference, job_file, "--init-out", dir + "/init.pt",
                                  "--threads", std::to_string(o.threads), "--json"},
                                 dir + "/python.log"));
  const auto py = nlohmann::json::parse(py_out.substr(py_out.rfind("\n{") + 1), nullptr, false);
  if (!py.is_object()) return InternalError("no JSON result in " + dir + "/python.log");
  Progress(fmt::format("gpt: spot train, {} steps from the same weights", o.steps));
  SPOT_ASSIGN_OR_RETURN(Side cpp, RunSpot(o, job_file, dir + "/cpp", context));
  Progress(fmt::format("gpt: spot train, precision bf16, {} steps", o.steps));
  SPOT_ASSIGN_OR_RETURN(Side bf16, RunSpot(o, bf16_file, dir + "/cpp-bf16", context));
  Progress(fmt::format("gpt: spot train, precision auto, {} steps", o.steps));
  SPOT_ASSIGN_OR_RETURN(Side automatic, RunSpot(o, auto_file, dir + "/cpp-auto", context));
  const Side python{.tokens_per_s = py["tokens_per_s"].get<double>(),
                    .val_loss = py["val_loss"].get<double>()};
  const double speed = cpp.tokens_per_s / python.tokens_per_s;
  const double gap = std::abs(cpp.val_loss - python.val_loss) / python.val_loss;
  Table table({"side", "tokens/s", "val loss", "perplexity"});
  for (const auto& [name, s] : {std::pair{"spot train (C++), fp32", cpp},
                                {"spot train (C++), bf16", bf16},
                                {"spot train (C++), auto", automatic},
                                {"Python PyTorch, fp32", python}}) {
    table.AddRow({name, fmt::format("{:.0f}", s.tokens_per_s), fmt::format("{:.4f}", s.val_loss),
                  fmt::format("{:.2f}", std::exp(s.val_loss))});
  }
  return fmt::format(
      "## gpt: the built-in GPT, C++ vs Python PyTorch\n\n"
      "{} ({}-token windows, batch {}), {} steps on the King James Bible as characters, {} "
      "threads, the same initial weights (Python's, through init.weights) and batches on both "
      "sides, run one after the other; tokens/s over the training steps only, validation loss "
      "after the last step.\n\n{}\n"
      "C++ / Python tokens/s: **{:.2f}x** (goal >= 1.0x: {}); validation loss apart by "
      "**{:.2f}%** (goal <= 2%: {}). bf16 / fp32 tokens/s: **{:.2f}x**, validation loss "
      "{:+.2f}%; auto (layers over a 1% bf16 error budget, and normalization, in float32) / "
      "fp32 tokens/s: **{:.2f}x**, validation loss {:+.2f}%.\n",
      o.job_template.substr(o.job_template.rfind('/') + 1), context, batch, o.steps, o.threads,
      table.ToMarkdown(), speed, speed >= 1.0 ? "PASS" : "MISS", gap * 100,
      gap <= 0.02 ? "PASS" : "MISS", bf16.tokens_per_s / cpp.tokens_per_s,
      (bf16.val_loss / cpp.val_loss - 1) * 100, automatic.tokens_per_s / cpp.tokens_per_s,
      (automatic.val_loss / cpp.val_loss - 1) * 100);
}

}  // namespace spot::bench
