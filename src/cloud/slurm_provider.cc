#include "cloud/slurm_provider.h"

#include <fmt/format.h>
#include <spdlog/spdlog.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <thread>

#include "cloud/bootstrap.h"
#include "cloud/provider_registry.h"
#include "core/file_io.h"

namespace spot::cloud {
namespace {

std::string JoinComma(const std::vector<std::string>& v) {
  std::string out;
  for (const std::string& s : v) out += (out.empty() ? "" : ",") + s;
  return out;
}

}  // namespace

void DeclareFields(SlurmProviderOptions& o, FieldVisitor& v) {
  v.String("partition", &o.partition, "Slurm partition the jobs are submitted to (required)");
  v.String("ondemand_partition", &o.ondemand_partition,
           "partition for on-demand instances (one whose jobs are never preempted); empty: "
           "`partition`");
  v.String("qos", &o.qos, "Slurm QOS (sbatch --qos); empty: the account's default");
  v.String("account", &o.account, "Slurm account (sbatch --account); empty: the user's default");
  v.String("time_limit", &o.time_limit,
           "job time limit (sbatch --time, e.g. 4:00:00); empty: the partition's default");
  v.Int("cpus_per_task", &o.cpus_per_task, {.min = 1}, "CPUs of each instance's job");
  v.StringList("sbatch_args", &o.sbatch_args,
               "more sbatch options, one word each (e.g. [--gres=gpu:1, --mem=16G])");
  v.String("slurm_conf", &o.slurm_conf,
           "slurm.conf of the cluster, exported as SLURM_CONF to the Slurm tools; empty: theirs");
  v.String("bin_dir", &o.bin_dir, "directory holding sbatch, squeue, sacct and scancel");
  v.String("job_name_prefix", &o.job_name_prefix, "Slurm job names are <prefix>-<instance id>");
  v.Int("signal_before_s", &o.signal_before_s, {.min = 0, .max = 65535},
        "sbatch --signal=B:TERM@N: SIGTERM to the program N s before its time limit and, with "
        "SlurmctldParameters=preempt_send_user_signal, when a preemption begins; 0: none");
  v.Double("poll_interval_s", &o.poll_interval_s, {.min = 0},
           "simulated seconds between squeue calls (one call per interval for all jobs)");
  v.Double("start_timeout_s", &o.start_timeout_s, {.min = 0},
           "simulated seconds a job may wait in the queue before it is cancelled and reported");
  v.Double("command_timeout_s", &o.command_timeout_s, {.min = 0.1},
           "wall seconds each Slurm command may take");
}

std::string EncodeSlurmInstanceData(const std::string& job_id) {
  return nlohmann::json{{"job_id", job_id}}.dump();
}

Result<std::string> DecodeSlurmInstanceData(const std::string& text) {
  nlohmann::json j = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (!j.is_object() || !j.contains("job_id") || !j["job_id"].is_string() ||
      !ParseSbatchJobId(j["job_id"].get<std::string>()).ok()) {
    return InvalidArgumentError("Slurm provider data '" + text + "': want {\"job_id\": \"123\"}");
  }
  return j["job_id"].get<std::string>();
}

SlurmProvider::SlurmProvider(SlurmProviderOptions options, TempDir scratch)
    : opt_(std::move(options)), scratch_(std::move(scratch)) {}

Result<CliOutput> SlurmProvider::Tool(const std::string& name, std::vector<std::string> args) {
  args.insert(args.begin(), opt_.bin_dir + "/" + name);
  std::vector<std::pair<std::string, std::string>> env;
  if (!opt_.slurm_conf.empty()) env.emplace_back("SLURM_CONF", opt_.slurm_conf);
  ++cli_calls_;
  Result<CliOutput> r = RunCli(args, env, scratch_.path().string(), opt_.command_timeout_s);
  if (!r.ok()) return UnavailableError("Slurm: " + std::string(r.status().message()));
  return r;
}

Result<std::map<std::string, SlurmJobState>> SlurmProvider::Query(
    const std::vector<std::string>& job_ids) {
  std::map<std::string, SlurmJobState> out;
  if (job_ids.empty()) return out;
  SPOT_ASSIGN_OR_RETURN(
      CliOutput q, Tool("squeue", {"--states=all", "--noheader", "--jobs=" + JoinComma(job_ids),
                                   std::string("--Format=") + kSqueueFormat}));
  // Every id unknown: exit 1, "Invalid job id specified".
  if (q.exit_code != 0 && q.err.find("Invalid job id") == std::string::npos) {
    return UnavailableError("Slurm squeue failed: " + q.err);
  }
  if (q.exit_code == 0) {
    SPOT_ASSIGN_OR_RETURN(std::vector<SlurmJobState> jobs, ParseSqueue(q.out));
    for (SlurmJobState& s : jobs) out[s.job_id] = std::move(s);
  }
  std::vector<std::string> missing;
  for (const std::string& id : job_ids) {
    if (!out.count(id)) missing.push_back(id);
  }
  if (missing.empty() || !accounting_) return out;
  SPOT_ASSIGN_OR_RETURN(CliOutput a, Tool("sacct", {"--noheader", "--parsable2", "--allocations",
                                                    "--jobs=" + JoinComma(missing),
                                                    "--format=JobIDRaw,State,ExitCode"}));
  if (a.out.find("accounting storage is disabled") != std::string::npos ||
      a.err.find("accounting storage is disabled") != std::string::npos) {
    accounting_ = false;  // no slurmdbd: purged jobs are simply gone
    return out;
  }
  if (a.exit_code != 0) return out;
  Result<std::vector<SlurmJobState>> jobs = ParseSacct(a.out);
  if (!jobs.ok()) return jobs.status();
  for (SlurmJobState& s : *jobs) {
    if (!out.count(s.job_id)) out[s.job_id] = std::move(s);
  }
  return out;
}

double SlurmProvider::SimTime(const std::string& slurm_time, double lo, double hi) const {
  Result<double> wall = ParseSlurmTime(slurm_time);
  if (opt_.wall_epoch_unix_s <= 0 || !wall.ok()) return hi;
  const double sim = (*wall - opt_.wall_epoch_unix_s) * opt_.time_compression;
  return std::clamp(sim, lo, hi);
}

Result<InstanceView> SlurmProvider::Launch(const InstanceSpec& spec, double now_s) {
  if (spec.id.empty()) return InvalidArgumentError("Slurm launch: the instance id is empty");
  if (instances_.count(spec.id)) {
    return InvalidArgumentError("Slurm launch: instance '" + spec.id + "' exists already");
  }
  const std::string& partition =
      spec.spot || opt_.ondemand_partition.empty() ? opt_.partition : opt_.ondemand_partition;
  const std::string what =
      fmt::format("Slurm sbatch of instance {} (partition {})", spec.id, partition);
  const std::string local_dir = opt_.instances_dir + "/" + spec.id;
  SPOT_ASSIGN_OR_RETURN(
      std::string script,
      RenderBootstrap({.job = opt_.job,
                       .instance_id = spec.id,
                       .argv = opt_.command(spec, local_dir),
                       .local_dir = local_dir,
                       .rendezvous_url = opt_.rendezvous_url,
                       .checkpoint_location = opt_.checkpoint_location,
                       .comment = "SpotTrain instance " + spec.id + " (a Slurm batch script)"}));
  const std::string script_path = (scratch_.path() / (spec.id + ".sbatch")).string();
  SPOT_RETURN_IF_ERROR(WriteFileAtomically(script_path, script));
  std::vector<std::string> args = {"--parsable",
                                   "--no-requeue",
                                   "--nodes=1",
                                   "--ntasks=1",
                                   "--job-name=" + opt_.job_name_prefix + "-" + spec.id,
                                   "--partition=" + partition,
                                   fmt::format("--cpus-per-task={}", opt_.cpus_per_task),
                                   "--output=" + opt_.instances_dir + "/" + spec.id + ".log",
                                   "--chdir=" + opt_.instances_dir};
  if (!opt_.qos.empty()) args.push_back("--qos=" + opt_.qos);
  if (!opt_.account.empty()) args.push_back("--account=" + opt_.account);
  if (!opt_.time_limit.empty()) args.push_back("--time=" + opt_.time_limit);
  if (opt_.signal_before_s > 0) {
    args.push_back(fmt::format("--signal=B:TERM@{}", opt_.signal_before_s));
  }
  for (const std::string& a : opt_.sbatch_args) args.push_back(a);
  args.push_back(script_path);
  Result<CliOutput> sb = Tool("sbatch", args);
  if (!sb.ok()) return UnavailableError(what + ": " + std::string(sb.status().message()));
  if (sb->exit_code != 0) return MapSbatchError(what, sb->err);
  SPOT_ASSIGN_OR_RETURN(std::string job_id, ParseSbatchJobId(sb->out));

  // Slurm accepts some jobs it can never (or not now) start and says why in
  // their Reason: give those back and report Slurm's reason. A job its
  // scheduler has not looked at yet has Reason "None": asked again, a few
  // times within a second (Poll catches a later verdict).
  Result<std::map<std::string, SlurmJobState>> q = Query({job_id});
  for (int i = 0; i < 5 && q.ok() && q->count(job_id) && q->at(job_id).state == "PENDING" &&
                  (q->at(job_id).reason.empty() || q->at(job_id).reason == "None");
       ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
    q = Query({job_id});
  }
  if (q.ok() && q->count(job_id)) {
    const SlurmJobState& s = q->at(job_id);
    const PendingOutlook outlook =
        s.state == "PENDING" ? ClassifyPendingReason(s.reason) : PendingOutlook::kWaits;
    if (outlook != PendingOutlook::kWaits) {
      (void)Tool("scancel", {job_id});
      const std::string msg =
          fmt::format("{}: Slurm job {} cannot start: PENDING ({})", what, job_id, s.reason);
      return outlook == PendingOutlook::kNever ? FailedPreconditionError(msg)
                                               : UnavailableError(msg);
    }
  }
  Instance inst;
  inst.view.spec = spec;
  inst.view.provider_data = EncodeSlurmInstanceData(job_id);
  inst.view.launched_s = now_s;
  inst.view.process_running = false;  // until Slurm runs it
  inst.job_id = job_id;
  spdlog::info("Slurm: submitted {} as job {} to partition {}", spec.id, job_id, partition);
  InstanceView view = inst.view;
  instances_[spec.id] = std::move(inst);
  return view;
}

void SlurmProvider::End(Instance& inst, InstanceState state, double now_s) {
  inst.view.state = state;
  inst.view.process_running = false;
  inst.view.ended_s = now_s;
}

Status SlurmProvider::Terminate(const std::string& id, double now_s) {
  auto it = instances_.find(id);
  if (it == instances_.end()) return NotFoundError("Slurm: no instance '" + id + "'");
  Instance& inst = it->second;
  if (inst.view.state != InstanceState::kRunning) return Status::Ok();
  SPOT_ASSIGN_OR_RETURN(CliOutput r, Tool("scancel", {inst.job_id}));
  // scancel of a job that already ended succeeds or says it is finished.
  if (r.exit_code != 0 && r.err.find("already completing or completed") == std::string::npos &&
      r.err.find("Invalid job id") == std::string::npos) {
    return UnavailableError(
        fmt::format("Slurm scancel of job {} ({}): {}", inst.job_id, id, r.err));
  }
  End(inst, InstanceState::kTerminated, now_s);
  return Status::Ok();
}

std::vector<InstanceView> SlurmProvider::List() const {
  std::vector<InstanceView> out;
  for (const auto& [id, inst] : instances_) out.push_back(inst.view);
  return out;
}

void SlurmProvider::Apply(Instance& inst, const SlurmJobState& s, double now_s,
                          std::vector<ProviderEvent>* events) {
  InstanceView& v = inst.view;
  const std::string& id = v.spec.id;
  const std::string where = s.nodes.empty() ? "" : " on " + s.nodes;
  const bool preempted = !s.preempt_time.empty() || s.state == "PREEMPTED";
  if (preempted && v.notice_s < 0) {
    v.notice_s = SimTime(s.preempt_time, v.launched_s, now_s);
    events->push_back({ProviderEvent::Kind::kNotice, id, v.notice_s,
                       fmt::format("Slurm job {}{} is being preempted (since {}): SIGTERM, then "
                                   "the partition's GraceTime",
                                   inst.job_id, where, s.preempt_time)});
  }
  if (SlurmStateRunning(s.state)) {
    v.process_running = true;
    return;
  }
  if (!SlurmStateEnded(s.state)) {
    // PENDING (or requeued). A preempted job Slurm requeued anyway is ended
    // here; a relaunch is the controller's decision.
    v.process_running = false;
    if (preempted) {
      (void)Tool("scancel", {inst.job_id});
      End(inst, InstanceState::kPreempted, now_s);
      events->push_back({ProviderEvent::Kind::kPreempted, id, now_s,
                         fmt::format("Slurm job {} was preempted and requeued ({}); cancelled",
                                     inst.job_id, s.state)});
    } else if (s.state == "PENDING" && ClassifyPendingReason(s.reason) == PendingOutlook::kNever) {
      // A verdict that came after the launch's look: the job will never run.
      (void)Tool("scancel", {inst.job_id});
      End(inst, InstanceState::kPreempted, now_s);
      events->push_back({ProviderEvent::Kind::kPreempted, id, now_s,
                         fmt::format("Slurm job {} cannot start: PENDING ({}); cancelled",
                                     inst.job_id, s.reason)});
    } else if (now_s - v.launched_s > opt_.start_timeout_s) {
      (void)Tool("scancel", {inst.job_id});
      End(inst, InstanceState::kPreempted, now_s);
      events->push_back({ProviderEvent::Kind::kPreempted, id, now_s,
                         fmt::format("Slurm job {} did not start within {:g} s: {} ({})",
                                     inst.job_id, opt_.start_timeout_s, s.state, s.reason)});
    }
    return;
  }
  v.exit_code = s.exit_code;
  const std::string how = s.signal != 0 ? fmt::format("killed by signal {}", s.signal)
                                        : fmt::format("exit code {}", s.exit_code);
  if (preempted || s.state == "NODE_FAIL" || s.state == "BOOT_FAIL") {
    End(inst, InstanceState::kPreempted, now_s);
    events->push_back({ProviderEvent::Kind::kPreempted, id, now_s,
                       fmt::format("Slurm job {}{} {} ({}){}", inst.job_id, where, s.state, how,
                                   preempted ? ", preempted" : "")});
    return;
  }
  End(inst, InstanceState::kTerminated, now_s);
  events->push_back({ProviderEvent::Kind::kExited, id, now_s,
                     fmt::format("Slurm job {}{} {} ({}, reason {})", inst.job_id, where, s.state,
                                 how, s.reason)});
}

Result<std::vector<ProviderEvent>> SlurmProvider::Poll(double now_s) {
  std::vector<ProviderEvent> events;
  if (now_s - last_poll_s_ < opt_.poll_interval_s) {
    if (!last_poll_error_.ok()) return last_poll_error_;
    return events;
  }
  std::vector<std::string> ids;
  for (const auto& [id, inst] : instances_) {
    if (inst.view.state == InstanceState::kRunning) ids.push_back(inst.job_id);
  }
  last_poll_s_ = now_s;
  last_poll_error_ = Status::Ok();
  if (ids.empty()) return events;
  Result<std::map<std::string, SlurmJobState>> jobs = Query(ids);
  // The cluster did not answer: what happened meanwhile is seen at the next
  // poll that gets an answer (the caller decides how long to wait for one).
  if (!jobs.ok()) return last_poll_error_ = jobs.status().WithContext("Slurm poll");
  for (auto& [id, inst] : instances_) {
    if (inst.view.state != InstanceState::kRunning) continue;
    auto it = jobs->find(inst.job_id);
    if (it != jobs->end()) {
      Apply(inst, it->second, now_s, &events);
      continue;
    }
    // Neither squeue nor accounting knows it: purged long after it ended.
    End(inst, InstanceState::kTerminated, now_s);
    events.push_back(
        {ProviderEvent::Kind::kExited, id, now_s,
         fmt::format("Slurm job {} is gone (unknown to squeue and sacct)", inst.job_id)});
  }
  return events;
}

Status SlurmProvider::Adopt(const InstanceView& recorded, double now_s) {
  const std::string& id = recorded.spec.id;
  SPOT_ASSIGN_OR_RETURN(std::string job_id, DecodeSlurmInstanceData(recorded.provider_data));
  SPOT_ASSIGN_OR_RETURN(auto jobs, Query({job_id}));
  Instance inst;
  inst.view = recorded;
  inst.job_id = job_id;
  auto it = jobs.find(job_id);
  const bool live =
      it != jobs.end() && !SlurmStateEnded(it->second.state) && it->second.preempt_time.empty();
  if (!live) {
    End(inst, InstanceState::kLost, now_s);
    instances_[id] = std::move(inst);
    return NotFoundError(fmt::format(
        "Slurm: instance '{}' (job {}) is gone: {}", id, job_id,
        it == jobs.end()
            ? "unknown to Slurm"
            : it->second.state + (it->second.preempt_time.empty() ? "" : ", preempted")));
  }
  inst.view.state = InstanceState::kRunning;
  inst.view.ended_s = -1;
  inst.view.process_running = SlurmStateRunning(it->second.state);
  instances_[id] = std::move(inst);
  return Status::Ok();
}

Result<std::unique_ptr<Provider>> MakeSlurmProvider(const SlurmProviderOptions& options,
                                                    const ProviderContext& context) {
  SlurmProviderOptions o = options;
  if (!o.command) o.command = context.command;
  if (o.instances_dir.empty()) o.instances_dir = context.instances_dir;
  if (o.job.empty()) o.job = context.job_name;
  if (o.rendezvous_url.empty()) o.rendezvous_url = context.rendezvous_url;
  if (o.checkpoint_location.empty()) o.checkpoint_location = context.checkpoint_location;
  if (o.wall_epoch_unix_s <= 0) {
    o.wall_epoch_unix_s = context.wall_epoch_unix_s;
    o.time_compression = context.time_compression;
  }
  if (o.partition.empty()) {
    return InvalidArgumentError("provider slurm: partition: required (the partition to submit to)");
  }
  if (o.cpus_per_task < 1) {
    return InvalidArgumentError(
        fmt::format("provider slurm: cpus_per_task: {} is below 1", o.cpus_per_task));
  }
  if (!o.slurm_conf.empty() && access(o.slurm_conf.c_str(), R_OK) != 0) {
    return InvalidArgumentError("provider slurm: slurm_conf: cannot read '" + o.slurm_conf + "'");
  }
  for (const char* tool : {"sbatch", "squeue", "scancel"}) {
    const std::string path = o.bin_dir + "/" + tool;
    if (access(path.c_str(), X_OK) != 0) {
      return FailedPreconditionError("provider slurm: " + path +
                                     " is missing (Debian package slurm-client; bin_dir)");
    }
  }
  if (o.instances_dir.empty()) {
    return InvalidArgumentError("provider slurm: no instances directory");
  }
  if (!o.command) return InvalidArgumentError("provider slurm: no instance command");
  // sbatch --output and --chdir are read on the node: no relative paths.
  o.instances_dir = std::filesystem::absolute(o.instances_dir).lexically_normal().string();
  SPOT_RETURN_IF_ERROR(CreateDirectories(o.instances_dir));
  SPOT_ASSIGN_OR_RETURN(TempDir scratch, TempDir::Create("spot-slurm"));
  return std::unique_ptr<Provider>(new SlurmProvider(std::move(o), std::move(scratch)));
}

}  // namespace spot::cloud
