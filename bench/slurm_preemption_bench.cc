// slurm_preemption_bench: how long a preempted Slurm worker takes from the
// preemption to its flushed checkpoint, against the partition's GraceTime
// (what Slurm gives it before SIGKILL). On a test cluster on this machine
// (cloud/slurm_testing.h: munged, slurmctld, two slurmd nodes in network
// namespaces), each trial runs a 2-node `spot run` job in the preemptible
// partition, and once both workers train together past step 300 submits an urgent job to
// the node of the checkpoint writer (rank 0). Ours: from that submission to
// the newest file of the job's durable checkpoint tier, read once the worker
// has said it stopped (the job saves no periodic checkpoint meanwhile, so
// that file is the preempted worker's). Needs root and Debian's Slurm.
//
//   slurm_preemption_bench [--trials 3] [--grace 5]
#include <fmt/format.h>

#include <CLI/CLI.hpp>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include "apps/spot/slurm_run_support.h"
#include "bench_process.h"
#include "cloud/slurm_testing.h"
#include "core/temp_dir.h"
#include "report.h"

namespace spot::bench {
namespace {

namespace fs = std::filesystem;

double WallNow() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

void Nap() { std::this_thread::sleep_for(std::chrono::milliseconds(50)); }

std::string ReadText(const fs::path& path) {
  std::ifstream in(path);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

// One trial: seconds from the urgent job's submission to the flushed checkpoint.
Result<double> Trial(cloud::SlurmCluster& cluster, const fs::path& dir, int n,
                     const std::string& spot_bin) {
  const testing::SlurmRunJob spec{.name = fmt::format("trial{}", n),
                                  .dir = dir,
                                  .slurm_conf = cluster.conf_path(),
                                  .advertise_host = cluster.host_address(),
                                  .steps = 3000,
                                  .checkpoint_every = 3000};
  const fs::path job = testing::WriteSlurmRunJob(spec);
  const fs::path job_dir = dir / spec.name;
  Proc run({spot_bin, "run", job.string()}, (dir / (spec.name + ".log")).string());
  if (!run.started()) return InternalError("cannot start " + spot_bin);
  std::string victim;
  double submitted = 0;
  for (double until = WallNow() + 300; victim.empty(); Nap()) {
    if (WallNow() > until) {
      return DeadlineExceededError(fmt::format("{}: the two workers never trained together; see {}",
                                               spec.name, job_dir.string()));
    }
    if (testing::ProgressStep(job_dir) < 300) continue;
    const auto running = testing::RunningSlurmInstances(cluster);
    std::optional<std::string> writer = testing::RankZeroOfTwo(running, job_dir / "instances");
    if (!writer) continue;
    submitted = WallNow();
    SPOT_ASSIGN_OR_RETURN(std::string urgent,
                          testing::SubmitUrgent(cluster, running.at(*writer), 5));
    (void)urgent;
    victim = *writer;
  }
  const fs::path log = job_dir / "instances" / (victim + ".log");
  for (double until = WallNow() + 60; ReadText(log).find("stopped by ") == std::string::npos;
       Nap()) {
    if (WallNow() > until) {
      return DeadlineExceededError(fmt::format("{}: {} did not say it stopped within 60 s: {}",
                                               spec.name, victim, ReadText(log)));
    }
  }
  const double flushed = testing::NewestFileTime(job_dir / "durable");
  run.Terminate(30);  // the controller cancels its Slurm jobs
  SPOT_RETURN_IF_ERROR(cluster.CancelAll(30));
  if (flushed < submitted) {
    return InternalError(fmt::format("{}: no checkpoint was flushed after the preemption; see {}",
                                     spec.name, log.string()));
  }
  return flushed - submitted;
}

int Main(int argc, char** argv) {
  CLI::App app{"Slurm preemption to flushed checkpoint, against GraceTime"};
  int trials = 3;
  int grace = 5;
  std::string spot_bin = std::string(SPOT_BINARY_DIR) + "/bin/spot";
  app.add_option("--trials", trials, "Preemptions to time (one `spot run` each)")
      ->check(CLI::Range(1, 50));
  app.add_option("--grace", grace, "GraceTime of the spot partition (seconds)")
      ->check(CLI::Range(1, 600));
  app.add_option("--spot", spot_bin, "The spot binary")->capture_default_str();
  CLI11_PARSE(app, argc, argv);
  if (std::string why = cloud::SlurmCluster::Unsupported(); !why.empty()) {
    fmt::print(stderr, "SKIPPED: no Slurm cluster can run here: {}\n", why);
    return 2;
  }
  Progress("starting a 2-node Slurm cluster");
  auto cluster = cloud::SlurmCluster::Start({.nodes = 2, .grace_time_s = grace});
  if (!cluster.ok()) {
    fmt::print(stderr, "error: {}\n", cluster.status().message());
    return 1;
  }
  auto dir = TempDir::Create("slurm-preemption-bench");
  if (!dir.ok()) {
    fmt::print(stderr, "error: {}\n", dir.status().message());
    return 1;
  }
  std::vector<double> ours;
  Table table({"trial", "ours (s)", "GraceTime (s)", "ratio"});
  for (int n = 1; n <= trials; ++n) {
    Progress(fmt::format("trial {} of {}", n, trials));
    Result<double> s = Trial(**cluster, dir->path(), n, spot_bin);
    if (!s.ok()) {
      dir->Keep();
      fmt::print(stderr, "error: {}\n", s.status().message());
      return 1;
    }
    ours.push_back(*s);
    table.AddRow({std::to_string(n), fmt::format("{:.2f}", *s), std::to_string(grace),
                  fmt::format("{:.2f}", *s / grace)});
  }
  const double median = Median(ours);
  table.AddRow({"median", fmt::format("{:.2f}", median), std::to_string(grace),
                fmt::format("{:.2f}", median / grace)});
  fmt::print(
      "Slurm preemption (urgent job submitted) to the preempted worker's flushed "
      "checkpoint, 2-node MLP job\n\n{}\nraw: {}\n",
      table.ToMarkdown(), FormatList(ours, 2));
  return 0;
}

}  // namespace
}  // namespace spot::bench

int main(int argc, char** argv) { return spot::bench::Main(argc, argv); }
