// What the Slurm end-to-end test and the Slurm preemption benchmark share: a
// `spot run` job on a test cluster (cloud/slurm_testing.h), and how to find
// the instance that writes checkpoints (rank 0), its node, and preempt it
// with an urgent job.
#pragma once

#include <fmt/format.h>
#include <sys/stat.h>

#include <algorithm>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <regex>
#include <sstream>
#include <string>
#include <vector>

#include "cloud/slurm_testing.h"
#include "core/job_files.h"
#include "core/number_text.h"
#include "core/status.h"

namespace spot::testing {

struct SlurmRunJob {
  std::string name;                // the job's name
  std::filesystem::path dir;       // holds the trace; the job dir is dir/name
  std::string slurm_conf;          // the cluster's slurm.conf
  std::string advertise_host;      // the cluster's bridge address on this machine
  std::string partition = "spot";  // where spot instances go
  int64_t steps = 3000;            // training steps
  int64_t checkpoint_every = 50;   // steps between periodic checkpoints
  std::string provider_extra;      // more `provider:` lines ("  cpus_per_task: 64\n")
  std::string checkpoint_extra;    // more `train.checkpoint:` lines ("    keep_every: 1\n")
};

// Writes the market (one zone where spot is always available, so the policy
// keeps spot) and the job file; returns the job file's path. A 2-node elastic
// MLP job, one tick a wall second (time_compression 60).
inline std::filesystem::path WriteSlurmRunJob(const SlurmRunJob& j) {
  namespace fs = std::filesystem;
  std::string counts;
  for (int i = 0; i < 600; ++i) counts += i ? ",1" : "1";
  const fs::path trace = j.dir / "zone-a_gpu_1.json";
  std::ofstream(trace) << "{\"metadata\": {\"gap_seconds\": 60}, \"data\": [" << counts << "]}\n";
  const std::string yaml = fmt::format(
      "name: {name}\npolicy: greedy\ncompute_hours: 0.3\ndeadline_hours: 3\n"
      "provider:\n  name: slurm\n  partition: {partition}\n  ondemand_partition: spotlong\n"
      "  slurm_conf: {conf}\n  poll_interval_s: 30\n  start_timeout_s: 3600\n{provider}"
      "resources:\n  nodes: 2\n  min_nodes: 1\n  ondemand_price: 3.0\n  changeover_hours: 0.02\n"
      "market:\n  traces:\n    - {trace}\n  time_compression: 60\n  notice_seconds: 120\n"
      "  when_missing: error\n  metadata: none\n"
      "controller:\n  reconcile_interval_s: 0.05\n  terminate_grace_s: 1\n"
      "  advertise_host: {host}\n"
      "train:\n  model: mlp\n  dataset:\n    path: /usr/share/datasets/fashion-mnist\n"
      "    train_limit: 12000\n  batch_size: 32\n  steps: {steps}\n  seed: 7\n  threads: 1\n"
      "  optimizer:\n    type: adam\n    lr: 0.002\n"
      "  checkpoint:\n    interval: steps\n    interval_steps: {every}\n"
      "    durable_dir: {durable}\n{checkpoint}"
      "  distributed:\n    collective_timeout_s: 3\n  output_dir: {out}\n",
      fmt::arg("name", j.name), fmt::arg("partition", j.partition), fmt::arg("conf", j.slurm_conf),
      fmt::arg("provider", j.provider_extra), fmt::arg("trace", trace.string()),
      fmt::arg("host", j.advertise_host), fmt::arg("steps", j.steps),
      fmt::arg("every", j.checkpoint_every), fmt::arg("checkpoint", j.checkpoint_extra),
      fmt::arg("durable", (j.dir / j.name / "durable").string()),
      fmt::arg("out", (j.dir / j.name).string()));
  const fs::path path = j.dir / (j.name + ".yaml");
  std::ofstream(path) << yaml;
  return path;
}

// The step the job's progress file reports; -1 before there is one.
inline int64_t ProgressStep(const std::filesystem::path& job_dir) {
  std::ifstream in(JobFiles{job_dir.string()}.progress());
  const nlohmann::json j = nlohmann::json::parse(in, nullptr, /*allow_exceptions=*/false);
  return j.is_object() && j.contains("step") && j["step"].is_number_integer()
             ? j["step"].get<int64_t>()
             : -1;
}

// Our instances Slurm runs now: instance id -> node ("spot-<id>" jobs).
inline std::map<std::string, std::string> RunningSlurmInstances(cloud::SlurmCluster& cluster) {
  std::map<std::string, std::string> out;
  Result<cloud::CliOutput> r =
      cluster.Tool("squeue", {"--noheader", "--states=RUNNING", "--format=%j %N"});
  if (!r.ok() || r->exit_code != 0) return out;
  std::istringstream in(r->out);
  std::string name, node;
  while (in >> name >> node) {
    if (name.rfind("spot-", 0) == 0) out[name.substr(5)] = node;
  }
  return out;
}

// The last generation an instance's worker logged: its number, rank, size.
struct LoggedGeneration {
  int64_t number = -1;
  int rank = -1;
  int world = 0;
};

// The decimal integer `text` starts with (-1 when it starts with none).
inline int64_t LeadingInteger(const std::string& text) {
  size_t n = 0;
  while (n < text.size() && n < 18 && text[n] >= '0' && text[n] <= '9') ++n;
  Result<int64_t> v = ParseInteger(text.substr(0, n));
  return v.ok() ? *v : -1;
}

inline LoggedGeneration LastGeneration(const std::filesystem::path& log) {
  std::ifstream in(log);
  const std::string text{std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
  static const std::regex kLine(R"(generation (\d+): rank (\d+) of (\d+))");
  LoggedGeneration g;
  for (auto it = std::sregex_iterator(text.begin(), text.end(), kLine);
       it != std::sregex_iterator(); ++it) {
    g = {LeadingInteger((*it)[1]), static_cast<int>(LeadingInteger((*it)[2])),
         static_cast<int>(LeadingInteger((*it)[3]))};
  }
  return g;
}

// Of the running instances, the one that is rank 0 of a generation of both
// (the checkpoint writer), once both workers train together.
inline std::optional<std::string> RankZeroOfTwo(const std::map<std::string, std::string>& running,
                                                const std::filesystem::path& instances_dir) {
  if (running.size() != 2) return std::nullopt;
  std::optional<std::string> writer;
  int64_t number = -1;
  for (const auto& [id, node] : running) {
    const LoggedGeneration g = LastGeneration(instances_dir / (id + ".log"));
    if (g.world != 2 || (number >= 0 && g.number != number)) return std::nullopt;
    number = g.number;
    if (g.rank == 0) writer = id;
  }
  return writer;
}

// Submits a job to the urgent partition for `node`: Slurm preempts what runs
// there. Returns its job id.
inline Result<std::string> SubmitUrgent(cloud::SlurmCluster& cluster, const std::string& node,
                                        int sleep_s) {
  SPOT_ASSIGN_OR_RETURN(
      cloud::CliOutput r,
      cluster.Tool("sbatch", {"--parsable", "--partition=urgent", "--nodelist=" + node,
                              "--output=/dev/null", fmt::format("--wrap=sleep {}", sleep_s)}));
  if (r.exit_code != 0) return InternalError("urgent sbatch: " + r.err);
  return r.out.substr(0, r.out.find_first_of(";\n"));
}

// The newest modification time (Unix seconds) of a file under `dir`; 0 for none.
inline double NewestFileTime(const std::filesystem::path& dir) {
  double newest = 0;
  std::error_code ec;
  for (auto it = std::filesystem::recursive_directory_iterator(dir, ec);
       !ec && it != std::filesystem::recursive_directory_iterator(); it.increment(ec)) {
    struct stat st {};
    if (it->is_regular_file(ec) && ::stat(it->path().c_str(), &st) == 0) {
      newest = std::max(newest, st.st_mtim.tv_sec + st.st_mtim.tv_nsec / 1e9);
    }
  }
  return newest;
}

}  // namespace spot::testing
