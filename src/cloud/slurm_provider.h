// SlurmProvider: instances are Slurm jobs, one node each, submitted to a
// partition (and QOS) of an on-premises cluster through Slurm's command-line
// tools (sbatch, squeue, sacct, scancel; SLURM_CONF names the cluster). A
// preemptible partition is the cluster's spot market: a job of a partition
// with a higher PriorityTier (or a higher QOS) preempts ours.
//
//  - Launch: renders a batch script (cloud/bootstrap.h: exports the
//    instance's variables, enters its local directory, execs the command of
//    `command`) and submits it: sbatch --parsable --no-requeue --nodes=1
//    --ntasks=1 --job-name=<prefix>-<id> --partition (`partition` for a spot
//    instance, `ondemand_partition` when set for an on-demand one) [--qos] [--account]
//    [--time] --cpus-per-task [--signal=B:TERM@<signal_before_s>] [extra].
//    provider_data: {"job_id": "123"}. A refused submission is
//    MapSbatchError's Status with Slurm's message; a job Slurm accepted but
//    whose Reason says it cannot start (PartitionConfig, PartitionDown, ...;
//    ClassifyPendingReason) is cancelled and reported the same way.
//    launched_s is the submission (the controller bills from there: a job
//    waiting in the queue counts as a booting VM); process_running is false
//    until Slurm runs it.
//  - Poll(now): at most one squeue per `poll_interval_s` for all our live
//    jobs (one call, by job id); jobs squeue no longer knows (purged after
//    MinJobAge) are asked of sacct when the cluster keeps accounting.
//      PENDING/CONFIGURING  waiting (a Reason saying it never can, or past
//                           start_timeout_s: cancelled, kPreempted with
//                           Slurm's Reason)
//      RUNNING              process_running; PreemptTime set -> kNotice once
//                           (the program has its SIGTERM, GraceTime to save)
//      ended, PreemptTime set or PREEMPTED
//                           -> kNotice (if not yet) then kPreempted
//      NODE_FAIL, BOOT_FAIL -> kPreempted (the machine went away)
//      COMPLETED, FAILED, CANCELLED (not by us), TIMEOUT, OUT_OF_MEMORY, ...
//                           -> kExited with the program's exit code; the
//                           instance ends there (a job's allocation is its
//                           machine), state kTerminated
//  - Terminate: scancel (billing ends at now_s). Adopt: squeue (then sacct)
//    by the recorded job id; NotFound when the job has ended or is unknown.
// Not thread-safe: the controller's loop is its only caller.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "cloud/provider.h"
#include "cloud/slurm_cli.h"
#include "core/config_fields.h"
#include "core/status.h"
#include "core/temp_dir.h"

namespace spot::cloud {

struct ProviderContext;

struct SlurmProviderOptions {
  // Where and how jobs are submitted.
  std::string partition;  // required (e.g. "spot"): where spot instances go
  // Where on-demand instances (InstanceSpec::spot false) go: a partition no
  // other job preempts (e.g. "batch"); "" = `partition` as well.
  std::string ondemand_partition;
  std::string qos;            // "" = the account's default
  std::string account;        // "" = the user's default
  std::string time_limit;     // sbatch --time ("4:00:00", "1-0"); "" = the partition's default
  int64_t cpus_per_task = 1;  // >= 1
  std::vector<std::string> sbatch_args;  // more sbatch options, each one word ("--gres=gpu:1")
  std::string slurm_conf;                // exported as SLURM_CONF to the tools; "" = theirs
  std::string bin_dir = "/usr/bin";      // where sbatch, squeue, sacct and scancel are
  std::string job_name_prefix = "spot";  // job names: <prefix>-<instance id>
  // sbatch --signal=B:TERM@N: the program gets SIGTERM N s before its time
  // limit and, where the cluster sets SlurmctldParameters=
  // preempt_send_user_signal, when a preemption begins (else when GraceTime
  // ends). 0: no --signal.
  int64_t signal_before_s = 60;
  double poll_interval_s = 10;    // simulated seconds between squeue calls
  double start_timeout_s = 600;   // simulated seconds a job may wait in the queue
  double command_timeout_s = 30;  // wall seconds each sbatch/squeue/sacct/scancel may take

  // What an instance runs (from the job; not job-file parameters).
  std::string instances_dir;  // each instance's directory <instances_dir>/<id> and its log
  std::function<std::vector<std::string>(const InstanceSpec&, const std::string& local_dir)>
      command;
  std::string job;                  // SPOT_JOB
  std::string rendezvous_url;       // SPOT_RENDEZVOUS ("" = not exported)
  std::string checkpoint_location;  // SPOT_CHECKPOINT ("" = not exported)
  double wall_epoch_unix_s = 0;     // wall time of simulated second 0 (0: notices at poll time)
  double time_compression = 1;      // simulated seconds per wall second
};

// The parameters a job file sets: partition, ondemand_partition, qos, account, time_limit,
// cpus_per_task, sbatch_args, slurm_conf, bin_dir, job_name_prefix,
// signal_before_s, poll_interval_s, start_timeout_s, command_timeout_s.
void DeclareFields(SlurmProviderOptions& o, FieldVisitor& v);

// What the Slurm provider keeps in InstanceView::provider_data.
std::string EncodeSlurmInstanceData(const std::string& job_id);  // {"job_id":"123"}
Result<std::string> DecodeSlurmInstanceData(const std::string& text);

class SlurmProvider final : public Provider {
 public:
  // REQUIRES: options checked by MakeSlurmProvider; `scratch` holds the
  // scripts and the tools' captured output.
  SlurmProvider(SlurmProviderOptions options, TempDir scratch);

  Result<InstanceView> Launch(const InstanceSpec& spec, double now_s) override;
  Status Terminate(const std::string& id, double now_s) override;
  std::vector<InstanceView> List() const override;
  Result<std::vector<ProviderEvent>> Poll(double now_s) override;
  Status Adopt(const InstanceView& recorded, double now_s) override;

  // Slurm commands run so far (sbatch, squeue, sacct, scancel).
  int64_t cli_calls() const { return cli_calls_; }

 private:
  struct Instance {
    InstanceView view;
    std::string job_id;
  };
  Result<CliOutput> Tool(const std::string& name, std::vector<std::string> args);
  // squeue for these job ids, then sacct for those squeue no longer knows.
  Result<std::map<std::string, SlurmJobState>> Query(const std::vector<std::string>& job_ids);
  // The simulated second of a Slurm timestamp, within [lo, hi].
  double SimTime(const std::string& slurm_time, double lo, double hi) const;
  void Apply(Instance& inst, const SlurmJobState& s, double now_s,
             std::vector<ProviderEvent>* events);
  void End(Instance& inst, InstanceState state, double now_s);

  SlurmProviderOptions opt_;
  TempDir scratch_;
  std::map<std::string, Instance> instances_;
  double last_poll_s_ = -1e300;
  // The last poll's error (OK when it got an answer): a Poll inside the
  // interval returns it again, since the fleet is still unseen.
  Status last_poll_error_;
  int64_t cli_calls_ = 0;
  bool accounting_ = true;  // until sacct says it is disabled
};

// Checks the options (partition set, the tools present, slurm_conf readable,
// instances_dir and command set) and makes the provider; `context` supplies
// what the job gives every provider (command, instances_dir, job name,
// rendezvous, checkpoint location, time line) where `options` leave them
// empty. InvalidArgument naming the field for bad options,
// FailedPrecondition when the Slurm tools are missing.
Result<std::unique_ptr<Provider>> MakeSlurmProvider(const SlurmProviderOptions& options,
                                                    const ProviderContext& context);

}  // namespace spot::cloud
