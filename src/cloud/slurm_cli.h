// How the Slurm provider speaks to Slurm: its command-line tools (sbatch,
// squeue, sacct, scancel), each run with a deadline, and the parsing of what
// they print. Pure functions except RunCli.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "core/status.h"

namespace spot::cloud {

// What a finished command printed.
struct CliOutput {
  int exit_code = -1;  // -1 when a signal ended it
  std::string out;
  std::string err;
};

// Runs argv (argv[0] an absolute path: no PATH search) with `env` added to
// ours, stdout and stderr captured through files under `scratch_dir` (an
// existing directory). DeadlineExceeded naming the command when it has not
// ended within `timeout_s` (it is then killed); Unavailable when it cannot be
// started. A non-zero exit is no error here: the caller reads exit_code.
// Thread-safe.
Result<CliOutput> RunCli(const std::vector<std::string>& argv,
                         const std::vector<std::pair<std::string, std::string>>& env,
                         const std::string& scratch_dir, double timeout_s);

// The fields the provider asks squeue for, in this order, "|"-terminated:
// squeue --states=all --noheader --Format=<kSqueueFormat>.
inline constexpr char kSqueueFormat[] =
    "JobID:|,State:|,Reason:|,NodeList:|,exit_code:|,PreemptTime:|,StartTime:|";

// One job as squeue reports it.
struct SlurmJobState {
  std::string job_id;
  std::string state;         // PENDING, RUNNING, COMPLETED, FAILED, PREEMPTED, ...
  std::string reason;        // why it pends or ended ("Resources", "PartitionDown"); "None"
  std::string nodes;         // where it runs or ran ("" while pending)
  int exit_code = -1;        // once ended by an exit: its code; -1 when killed or unknown
  int signal = 0;            // once ended by a signal: its number
  std::string preempt_time;  // "2026-12-03T13:36:21" once preemption began; "" none
  std::string start_time;    // "" while unknown
};
// Parses squeue output of kSqueueFormat (one job a line). InvalidArgument
// naming the line for one with the wrong number of fields.
Result<std::vector<SlurmJobState>> ParseSqueue(const std::string& text);
// Parses `sacct --noheader --parsable2 --allocations
// --format=JobIDRaw,State,ExitCode` ("12|COMPLETED|0:0"); preempt_time stays
// "" (sacct's State names PREEMPTED itself).
Result<std::vector<SlurmJobState>> ParseSacct(const std::string& text);

// Whether a job in this state has ended (its allocation is gone).
bool SlurmStateEnded(const std::string& state);
// Whether a job in this state holds nodes and runs its program.
bool SlurmStateRunning(const std::string& state);

// What a PENDING job's Reason says about its future.
enum class PendingOutlook {
  kWaits,   // Resources, Priority, limits: it starts when others end
  kNotNow,  // partition down or inactive, nodes unavailable: Unavailable
  kNever,   // the request does not fit the partition or account: FailedPrecondition
};
PendingOutlook ClassifyPendingReason(const std::string& reason);

// Maps a refused sbatch (its stderr) to a Status with Slurm's message:
// Unavailable for capacity, limits and an unreachable controller (retry
// later), FailedPrecondition for a request Slurm will never accept (invalid
// partition, account, QOS, a node configuration no node has). `what` names
// the launch ("Slurm sbatch of instance i-3 (partition spot)").
Status MapSbatchError(const std::string& what, const std::string& stderr_text);

// The job id sbatch --parsable printed ("123" or "123;cluster").
// InvalidArgument for anything else.
Result<std::string> ParseSbatchJobId(const std::string& out);

// Seconds since the Unix epoch of a Slurm timestamp ("2026-12-03T13:36:21",
// local time). InvalidArgument for "N/A", "NONE", "Unknown" or anything else.
Result<double> ParseSlurmTime(const std::string& text);

}  // namespace spot::cloud
