// `spot run JOB.yaml`: the controller. Reads and checks the whole job (spec,
// market, policy, provider, the workers' job file, the directories) before it
// writes a file or starts a process; then hosts the rendezvous (a detached
// `spot rendezvous`, so a controller restart does not take it down), says how
// a worker starts, and hands the rest to control::JobRunner (store, provider,
// policy, monitor, API, controller); then prints what the job cost against on
// demand and what SpotSim predicted for the same market segment at the
// training speed the run measured.
#include <fmt/format.h>
#include <signal.h>
#include <spdlog/spdlog.h>
#include <unistd.h>
#include <xxhash.h>
#include <yaml-cpp/yaml.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>
#include <thread>

#include "apps/spot/agent_spec.h"
#include "apps/spot/commands.h"
#include "apps/spot/exit_code.h"
#include "apps/spot/run_job.h"
#include "apps/spot/run_market.h"
#include "apps/spot/run_summary.h"
#include "control/controller.h"
#include "control/job_monitor.h"
#include "control/job_runner.h"
#include "control/job_store.h"
#include "core/file_io.h"
#include "core/job_files.h"
#include "core/logging.h"
#include "core/number_text.h"
#include "core/process.h"
#include "core/process_cpu.h"
#include "dist/c10d_stores.h"
#include "dist/rendezvous.h"
#include "sim/spot_sim.h"
#include "train/train_spec.h"

namespace spot::cli {

namespace fs = std::filesystem;

Result<LoadedJob> LoadJob(const std::string& path) {
  // A regular file of at most kMaxSpecFileBytes; errors name the file once.
  auto text = ReadSpecFile(path);
  if (!text.ok()) return text.status();
  SPOT_ASSIGN_OR_RETURN(SpecReader top, SpecReader::FromString(*text, path));
  LoadedJob j;
  control::ReadRunSpecFields(top, &j.run);
  // A job trains with SpotTrain's trainer (`train:`) or runs a program (`run:`).
  const bool command = j.run.command.enabled();
  if (command && top.Has("train")) {
    top.AddError("train", "a job has either `train:` (SpotTrain's trainer) or `run:` (a program)");
  } else if (!command) {
    if (!top.Has("train") && !top.Has("run")) {
      top.AddError("train", "required section is missing (or give a program to run with `run:`)");
    } else {
      train::ReadTrainSpecFields(top.Section("train", /*required=*/true), &j.train);
    }
  }
  SPOT_RETURN_IF_ERROR(top.Finish());
  if (command) {
    j.job_dir = j.run.command.output_dir.empty() ? "runs/" + j.run.name : j.run.command.output_dir;
  } else {
    YAML::Node root = YAML::Load(*text);
    j.train_node = YAML::Clone(root["train"]);
    j.job_dir = j.train_node["output_dir"] ? j.train.output_dir : "runs/" + j.run.name;
  }
  j.hash = fmt::format("{:016x}", XXH3_64bits(text->data(), text->size()));
  return j;
}

std::string JobStateDir(const LoadedJob& j) {
  return j.run.controller.state_dir.empty() ? JobFiles{j.job_dir}.state_dir()
                                            : j.run.controller.state_dir;
}

namespace {

// The workers' job file: the train section with the job's name, directories
// and gang size filled in, checked (into j.train) as the workers will read it.
Result<std::string> WorkerJobText(LoadedJob& j) {
  YAML::Node t = YAML::Clone(j.train_node);
  t["name"] = j.run.name;
  t["output_dir"] = j.job_dir;
  if (!t["checkpoint"] || !t["checkpoint"]["durable_dir"]) {
    t["checkpoint"]["durable_dir"] = (fs::path(j.job_dir) / "durable").string();
  }
  // Workers run in their instance's directory: a module, data or weights file named
  // relative to where `spot run` started is given to them absolute.
  for (auto [section, key] : {std::pair{"model", "torchscript"}, std::pair{"dataset", "path"},
                              std::pair{"init", "weights"}}) {
    if (!t[section] || !t[section].IsMap() || !t[section][key]) continue;
    std::error_code ec;
    fs::path p = fs::absolute(t[section][key].as<std::string>(), ec);
    if (!ec) t[section][key] = p.lexically_normal().string();
  }
  t["distributed"]["min_workers"] = j.run.resources.min_nodes;
  // Room for a second gang while one is replaced make before break (a
  // policy keeps on-demand until the spot gang it starts is ready): the
  // newcomers join the running group and get its state from it.
  t["distributed"]["max_workers"] = 2 * j.run.resources.nodes;
  YAML::Emitter e;
  e << t;
  std::string text =
      "# Written by `spot run " + j.run.source + "`: the workers' job file.\n" + e.c_str() + "\n";
  SPOT_ASSIGN_OR_RETURN(
      j.train,
      train::ParseTrainSpec(text, j.run.source + " (train section, as the workers get it)"));
  return text;
}

// A command workload's agent file: the program and how to start it, with its
// directories absolute (agents run in their instance's directory).
Result<std::string> AgentJobText(const LoadedJob& j, const std::string& state_dir) {
  const control::CommandSpec& c = j.run.command;
  std::error_code ec;
  auto absolute = [&](const std::string& p) {
    return fs::absolute(p, ec).lexically_normal().string();
  };
  AgentSpec a{.job = j.run.name,
              .run = c.run,
              .setup = c.setup,
              .workdir = absolute(c.workdir.empty() ? "." : c.workdir),
              .envs = c.envs,
              .checkpoint_dir =
                  absolute(c.checkpoint_dir.empty() ? (fs::path(j.job_dir) / "checkpoints").string()
                                                    : c.checkpoint_dir),
              .nproc_per_node = static_cast<int>(c.nproc_per_node),
              .notice_signal = c.notice_signal,
              .min_nodes = static_cast<int>(j.run.resources.min_nodes),
              .max_nodes = static_cast<int>(j.run.resources.nodes),
              .stop_grace_s = j.run.controller.terminate_grace_s,
              .token_file = absolute((fs::path(state_dir) / "api.token").string())};
  if (!fs::is_directory(a.workdir, ec)) {
    return InvalidArgumentError(fmt::format("{}: workdir: {} is not a directory", j.run.source,
                                            c.workdir.empty() ? "." : c.workdir));
  }
  return AgentSpecJson(a);
}

// The outermost directory of `dir` that does not exist yet, and its nearest
// existing ancestor (`missing` empty when `dir` exists).
struct DirState {
  fs::path missing, existing;
};

DirState Inspect(const std::string& dir) {
  std::error_code ec;
  DirState d{.existing = fs::absolute(dir, ec)};
  while (!fs::exists(d.existing, ec) && d.existing.has_parent_path() &&
         d.existing != d.existing.parent_path()) {
    d.missing = d.existing;
    d.existing = d.existing.parent_path();
  }
  return d;
}

// Why `dir` (named by the job file's `field`) could not be created, before
// anything is: its nearest existing ancestor must be a writable directory.
Status CheckCreatable(const LoadedJob& j, const std::string& field, const std::string& dir) {
  const fs::path p = Inspect(dir).existing;
  std::error_code ec;
  std::string why;
  if (!fs::is_directory(p, ec)) {
    why = p.string() + " is not a directory";
  } else if (::access(p.c_str(), W_OK | X_OK) != 0) {
    why = p.string() + ": " + std::strerror(errno);
  }
  if (why.empty()) return Status::Ok();
  return InvalidArgumentError(
      fmt::format("{}: {}: cannot create directory {}: {}", j.run.source, field, dir, why));
}

// The fields naming the job's directory and the controller's.
std::pair<std::string, std::string> DirectoryFields(const LoadedJob& j) {
  std::string job_field =
      j.train_node["output_dir"] ? "train.output_dir" : "train.output_dir (default runs/<name>)";
  return {job_field, j.run.controller.state_dir.empty() ? job_field : "controller.state_dir"};
}

std::string SelfExe() {
  std::error_code ec;
  fs::path p = fs::read_symlink("/proc/self/exe", ec);
  return ec ? "/proc/self/exe" : p.string();
}

// The rendezvous store, reused across controller restarts while it runs
// (its pid and port are kept in <state dir>/rendezvous.json). *started: this
// call started it. It binds a free port itself and writes which one to
// <state dir>/rendezvous.port: a port picked here ahead could be taken by
// another process before the store binds it.
Result<std::string> EnsureRendezvous(const std::string& state_dir, const std::string& job_dir,
                                     const std::string& host, bool* started) {
  *started = false;
  const std::string record = (fs::path(state_dir) / "rendezvous.json").string();
  if (auto text = ReadFile(record); text.ok()) {
    auto j = nlohmann::json::parse(*text, nullptr, false);
    if (!j.is_discarded() && ProcessMatches(j.value("pid", int64_t{0}), "rendezvous") &&
        j.value("host", std::string("127.0.0.1")) == host) {
      return fmt::format("tcp://{}:{}", host, j.value("port", 0));
    }
  }
  const std::string port_file = (fs::path(state_dir) / "rendezvous.port").string();
  const std::string log = (fs::path(job_dir) / "rendezvous.log").string();
  std::error_code ec;
  fs::remove(port_file, ec);  // a stopped store's
  SPOT_ASSIGN_OR_RETURN(int64_t pid, Spawn({.argv = {SelfExe(), "rendezvous", "--host", host,
                                                     "--port", "0", "--port-file", port_file},
                                            .log_path = log}));
  // The store gives up binding after 30 s (HostTcpStore's timeout).
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(35);
  int port = 0;
  for (;;) {
    if (auto text = ReadFile(port_file); text.ok()) {
      std::string_view digits = *text;
      if (digits.ends_with('\n')) digits.remove_suffix(1);
      auto parsed = ParseInteger(digits);
      if (!parsed.ok() || *parsed <= 0 || *parsed > 65535) {
        (void)StopProcess(pid, /*grace_s=*/3);
        return InternalError(fmt::format("{}: not a port: '{}'", port_file, digits));
      }
      port = static_cast<int>(*parsed);
      break;
    }
    if (!CheckProcess(pid).running) {
      return UnavailableError(
          fmt::format("the rendezvous store did not start on {} (its log: {})", host, log));
    }
    if (std::chrono::steady_clock::now() > deadline) {
      (void)StopProcess(pid, /*grace_s=*/3);
      return DeadlineExceededError(fmt::format(
          "the rendezvous store did not start listening on {} within 35 s (its log: {})", host,
          log));
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  fs::remove(port_file, ec);
  *started = true;
  if (Status st = WriteFileAtomically(
          record, nlohmann::json{{"pid", pid}, {"host", host}, {"port", port}}.dump() + "\n");
      !st.ok()) {
    SignalProcess(pid, SIGTERM);  // unrecorded, no later command could find it
    return st;
  }
  return fmt::format("tcp://{}:{}", host, port);
}

void StopRendezvous(const std::string& state_dir) {
  auto text = ReadFile((fs::path(state_dir) / "rendezvous.json").string());
  if (!text.ok()) return;
  auto j = nlohmann::json::parse(*text, nullptr, false);
  if (j.is_discarded()) return;
  int64_t pid = j.value("pid", int64_t{0});
  if (ProcessMatches(pid, "rendezvous")) SignalProcess(pid, SIGTERM);
  for (int i = 0; i < 50 && CheckProcess(pid).running; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
}

// How an instance of a command workload starts: `spot agent` on the job's
// agent file, joining the rendezvous, with its local disk, the controller's
// API, the metadata service to watch, the port for its /metrics (the
// program's busy time, as a native worker's) and how many instances share
// its machine: all of the job's on the local provider, one elsewhere (an EC2
// instance, a Slurm allocation is a machine of its own).
std::function<std::vector<std::string>(const control::WorkerLaunch&)> AgentCommand(
    const LoadedJob& j, const std::string& agent_json, const std::string& rdzv_url) {
  const int shared_by =
      j.run.provider.name == "local" ? static_cast<int>(j.run.resources.nodes) : 1;
  return [=, exe = SelfExe(), watch = j.run.market.metadata](const control::WorkerLaunch& l) {
    return std::vector<std::string>{exe,
                                    "agent",
                                    agent_json,
                                    "--rendezvous",
                                    rdzv_url,
                                    "--id",
                                    l.spec.id,
                                    "--local-dir",
                                    l.local_dir,
                                    "--controller",
                                    l.api_url,
                                    "--watch",
                                    watch,
                                    "--notice-poll",
                                    "0.1",
                                    "--metrics-port",
                                    std::to_string(l.metrics_port),
                                    "--machine-shared-by",
                                    std::to_string(shared_by)};
  };
}

// How an instance starts its worker: `spot worker` on the workers' job file,
// joining the rendezvous, with its local disk, the job's shared records and
// the metadata service to watch. Its intra-op threads: the job's `threads`,
// else on the local provider this machine's CPUs shared by the job's
// instances, elsewhere (an EC2 instance, a Slurm allocation: a machine of
// its own) every CPU the worker may run on, which it counts itself.
std::function<std::vector<std::string>(const control::WorkerLaunch&)> WorkerCommand(
    const LoadedJob& j, const std::string& train_yaml, const std::string& rdzv_url) {
  const int threads = j.train.threads > 0 ? static_cast<int>(j.train.threads)
                      : j.run.provider.name == "local"
                          ? std::max(1, AvailableCpus() / static_cast<int>(j.run.resources.nodes))
                          : 0;
  const JobFiles files{j.job_dir};
  return [=, exe = SelfExe(), watch = j.run.market.metadata](const control::WorkerLaunch& l) {
    const cloud::InstanceSpec& s = l.spec;
    const std::string& local_dir = l.local_dir;
    const int metrics_port = l.metrics_port;
    return std::vector<std::string>{exe,
                                    "worker",
                                    train_yaml,
                                    "--rendezvous",
                                    rdzv_url,
                                    "--id",
                                    s.id,
                                    "--threads",
                                    std::to_string(threads),
                                    "--checkpoint-dir",
                                    (fs::path(local_dir) / "checkpoints").string(),
                                    "--progress-file",
                                    files.progress(),
                                    "--step-log",
                                    files.step_log(),
                                    "--watch",
                                    watch,
                                    "--notice-poll",
                                    "0.1",
                                    "--metrics-port",
                                    std::to_string(metrics_port),
                                    "--tensorboard",
                                    files.tensorboard(),
                                    "--plain",
                                    "--log-interval",
                                    "5"};
  };
}

// Where the workers' checkpoints are kept durably: the train section's
// durable tier, or a command workload's checkpoint directory.
std::string CheckpointLocation(const LoadedJob& j) {
  if (!j.run.command.enabled()) return j.train.checkpoint.durable_dir;
  return j.run.command.checkpoint_dir.empty() ? (fs::path(j.job_dir) / "checkpoints").string()
                                              : j.run.command.checkpoint_dir;
}

int Fail(const Status& s) {
  fmt::print(stderr, "error: {}\n", s.message());
  return ExitCodeFor(s);
}

// A job file checked for everything it can get wrong, before anything is
// written or started.
struct CheckedJob {
  LoadedJob job;
  RunMarket market;
  std::string worker_yaml;  // the workers' job file
  std::string state_dir;
};

Result<CheckedJob> CheckJob(const std::string& path) {
  CheckedJob c;
  SPOT_ASSIGN_OR_RETURN(c.job, LoadJob(path));
  SPOT_ASSIGN_OR_RETURN(c.market, LoadRunMarket(c.job.run));
  c.job.run.resources.ondemand_price = c.market.ondemand_price;
  SPOT_RETURN_IF_ERROR(control::ValidateJob(c.job.run));
  if (const std::string& url = c.job.run.controller.rendezvous; !url.empty()) {
    if (auto e = dist::ParseRendezvousUrl(url); !e.ok()) {
      return InvalidArgumentError(
          fmt::format("{}: controller.rendezvous: {}", c.job.run.source, e.status().message()));
    }
  }
  c.state_dir = JobStateDir(c.job);
  if (c.job.run.command.enabled()) {
    SPOT_ASSIGN_OR_RETURN(c.worker_yaml, AgentJobText(c.job, c.state_dir));
  } else {
    SPOT_ASSIGN_OR_RETURN(c.worker_yaml, WorkerJobText(c.job));
  }
  const auto [job_field, state_field] = DirectoryFields(c.job);
  SPOT_RETURN_IF_ERROR(CheckCreatable(c.job, job_field, c.job.job_dir));
  SPOT_RETURN_IF_ERROR(CheckCreatable(c.job, state_field, c.state_dir));
  return c;
}

// The job's directories and the workers' job file; returns its path.
Result<std::string> WriteJobFiles(const CheckedJob& c) {
  const auto [job_field, state_field] = DirectoryFields(c.job);
  std::vector<fs::path> made;  // removed again when a later step fails
  Status st;
  for (const auto& [field, dir] :
       {std::pair{job_field, c.job.job_dir}, {state_field, c.state_dir}}) {
    const fs::path missing = Inspect(dir).missing;
    st = CreateDirectories(dir);
    if (!st.ok()) {
      st = InvalidArgumentError(c.job.run.source + ": " + field + ": " + st.message());
      break;
    }
    if (!missing.empty()) made.push_back(missing);
  }
  const std::string path = c.job.run.command.enabled()
                               ? (fs::path(c.job.job_dir) / "agent.json").string()
                               : JobFiles{c.job.job_dir}.worker_job();
  if (st.ok()) st = WriteFileAtomically(path, c.worker_yaml);
  if (st.ok()) return path;
  std::error_code ec;
  for (const fs::path& p : made) fs::remove_all(p, ec);
  return st;
}

// Fails the command after the rendezvous is up. One this command `started`
// is stopped unless the job has live instances (a controller run again
// resumes them and needs it).
int FailWithRendezvous(const Status& s, bool started, const std::string& state_dir,
                       const std::string& job, control::JobStore* store) {
  bool live = false;
  if (store) {
    auto instances = store->Instances(job, /*live_only=*/true);
    live = !instances.ok() || !instances->empty();
  }
  if (started && !live) StopRendezvous(state_dir);
  return Fail(s);
}

}  // namespace

CLI::App* AddRunCommand(CLI::App& app, RunArgs* args) {
  CLI::App* cmd = app.add_subcommand(
      "run",
      "Run a job on a spot fleet: choose capacity by policy over the job's market, launch "
      "workers, survive preemptions, report cost against on demand. Run the same command again "
      "to resume a job whose controller died.");
  cmd->add_option("job", args->job_path, "Job file (YAML); see docs/job-spec.md")->required();
  cmd->add_option(
      "--decision-log", args->decision_log,
      "Also write the decisions as JSON lines here (default: <job dir>/decisions.jsonl)");
  cmd->add_option("--status-interval", args->status_interval_s, "Seconds between status lines")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  return cmd;
}

int RunRunCommand(const RunArgs& args) {
  auto checked = CheckJob(args.job_path);
  if (!checked.ok()) return Fail(checked.status());
  LoadedJob& j = checked->job;
  const RunMarket& market = checked->market;
  const std::string& state_dir = checked->state_dir;
  for (const std::string& line : market.stand_ins) spdlog::warn("market: {}", line);
  auto train_yaml = WriteJobFiles(*checked);
  if (!train_yaml.ok()) return Fail(train_yaml.status());
  // The controller's log as JSON lines in <job dir>/controller.log beside the
  // terminal's text; the processes it starts write JSON to their log files.
  SetLogContext({{"job", j.run.name}, {"role", std::string("controller")}});
  if (Status st = AddJsonLogFile((fs::path(j.job_dir) / "controller.log").string()); !st.ok()) {
    return Fail(st);
  }
  ExportLogEnvironment();       // setenv: before any thread starts
  control::BlockStopSignals();  // before any thread starts
  // The job's own rendezvous (an etcd cluster), else one this controller hosts.
  const bool hosted = j.run.controller.rendezvous.empty();
  bool started = false;
  Result<std::string> rdzv_url =
      hosted ? EnsureRendezvous(state_dir, j.job_dir, j.run.controller.advertise_host, &started)
             : j.run.controller.rendezvous;
  if (!rdzv_url.ok()) return Fail(rdzv_url.status());
  const bool command = j.run.command.enabled();
  const auto ttl = std::chrono::milliseconds(
      static_cast<int64_t>((command ? 3.0 : j.train.distributed.liveness_ttl_s) * 1e3));
  auto rdzv = dist::OpenRendezvous(*rdzv_url, j.run.name, ttl, std::chrono::seconds(20));
  if (!rdzv.ok()) return FailWithRendezvous(rdzv.status(), started, state_dir, j.run.name, nullptr);
  std::shared_ptr<dist::KvStore> kv = rdzv->kv;
  std::vector<const market::Trace*> zones;
  for (const market::Trace& t : market.zones) zones.push_back(&t);
  auto runner = control::JobRunner::Create(
      {.spec = j.run,
       .spec_hash = j.hash,
       .job_dir = j.job_dir,
       .state_dir = state_dir,
       .zones = zones,
       .market_description = market.description,
       .epochs = command ? 0 : j.train.epochs,
       .decision_log_path = args.decision_log,
       .status_interval_s = args.status_interval_s,
       .worker_command = command ? AgentCommand(j, *train_yaml, *rdzv_url)
                                 : WorkerCommand(j, *train_yaml, *rdzv_url),
       .is_alive =
           [kv](const std::string& id) {
             auto alive = kv->IsAlive(id);
             return !alive.ok() || *alive;  // a store hiccup is not a verdict
           },
       .on_instance_gone = [kv](const std::string& id) { (void)kv->MarkDead(id); },
       // A worker's group is the job's; an agent's, the job's agents'.
       .group_members = [kv, group = command ? j.run.name + "/agent" : j.run.name]()
           -> std::optional<control::GroupMembers> {
         auto m = dist::ReadMembership(kv.get(), group);
         if (!m.ok()) return std::nullopt;
         return control::GroupMembers{.generation = m->generation,
                                      .formed = {m->formed.begin(), m->formed.end()},
                                      .waiting = {m->waiting.begin(), m->waiting.end()}};
       },
       .rendezvous_url = *rdzv_url,
       .metrics_address =
           [kv, job = j.run.name](const std::string& id) {
             auto at = kv->Get(control::MetricsAddressKey(job, id));
             return at.ok() && at->has_value() ? **at : std::string();
           },
       .checkpoint_location = CheckpointLocation(j)});
  if (!runner.ok()) {
    return FailWithRendezvous(runner.status(), started, state_dir, j.run.name, nullptr);
  }
  auto outcome = (*runner)->Run();
  if (!outcome.ok()) {
    return FailWithRendezvous(outcome.status(), started, state_dir, j.run.name,
                              &(*runner)->store());
  }
  if (hosted && control::IsTerminal(outcome->state)) StopRendezvous(state_dir);
  const JobFiles files{j.job_dir};
  return PrintRunSummary((*runner)->store(), j.run, market, j.job_dir, *outcome,
                         static_cast<int64_t>(ReadStepLog(files.step_log()).size()));
}

}  // namespace spot::cli
