// The controller's durable state: one SQLite database (WAL, synchronous=FULL)
// holding jobs, their instances, the cost ledger, the decision log and events.
// Every mutation is one transaction, so a controller killed at any instant
// restarts from a consistent state: an instance's ledger rows and its
// billed_until_s move together, which is what makes billing gap-free and
// never double-counted across restarts.
//
// Times: `*_s` fields are simulated seconds since the job's start (the
// market's clock); `*_unix_s` are wall-clock Unix seconds.
// Thread-safe (one connection behind a mutex): the API server reads while the
// reconcile loop writes.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "core/clock.h"
#include "core/status.h"

namespace spot::control {

enum class JobState {
  kPending,
  kProvisioning,
  kRunning,
  kRecovering,
  kSucceeded,
  kFailed,
  kCancelled
};
// "PENDING", "PROVISIONING", ... (the API's and the database's spelling).
std::string_view JobStateName(JobState s);
Result<JobState> ParseJobState(std::string_view name);
bool IsTerminal(JobState s);  // SUCCEEDED, FAILED, CANCELLED
// The state machine (docs/controller.md):
//   PENDING -> PROVISIONING | CANCELLED | FAILED
//   PROVISIONING -> RUNNING | RECOVERING | CANCELLED | FAILED
//   RUNNING -> RECOVERING | PROVISIONING | SUCCEEDED | CANCELLED | FAILED
//   RECOVERING -> RUNNING | PROVISIONING | CANCELLED | FAILED
// (PROVISIONING also re-entered after a planned move between pools.) A state
// to itself is allowed (a no-op). Terminal states have no way out.
bool CanTransition(JobState from, JobState to);

struct JobRecord {
  std::string id;  // the job's name (unique in the database)
  std::string spec_path;
  std::string spec_hash;  // XXH3 of the spec file's bytes, hex
  JobState state = JobState::kPending;
  std::string message;           // why the last transition happened
  double wall_epoch_unix_s = 0;  // wall time at which the simulated clock read 0
  double time_compression = 1;   // simulated seconds per wall second
  int64_t start_tick = 0;        // absolute tick of the job's start in the market
  double created_unix_s = 0;
  double updated_unix_s = 0;
};

struct InstanceRecord {
  std::string id;  // "i-" + 17 hex digits
  std::string job_id;
  int zone = -1;  // index into the job's zones; -1 on-demand
  std::string zone_name;
  std::string instance_type;
  bool spot = true;
  // The provider's own data about the instance (cloud::InstanceView); empty
  // until the provider has launched it.
  std::string provider_data;
  double launched_s = 0;
  std::optional<double> ended_s;  // unset while it runs
  std::string end_reason;         // preempted | terminated | failed | exited
  double billed_until_s = 0;      // the ledger covers [launched_s, billed_until_s)
};

struct LedgerEntry {
  std::string instance_id;
  double from_s = 0;
  double to_s = 0;
  double usd_per_hour = 0;  // the price of every second in [from_s, to_s)
  double usd = 0;           // (to_s - from_s) / 3600 * usd_per_hour
};

// One reconcile tick, as the policy saw and answered it.
struct DecisionRecord {
  int64_t tick = 0;      // ticks since the job's start
  int64_t abs_tick = 0;  // tick in the market traces
  double progress_hours = 0;
  std::string current;  // "idle" | "spot:Z" | "od" (after any preemption)
  double changeover_left_hours = 0;
  bool preempted = false;
  std::string target;  // the decision, same spelling
};

struct EventRecord {
  double sim_s = 0;
  double wall_unix_s = 0;
  std::string kind;         // launch, notice, preempt, terminate, state, ...
  std::string instance_id;  // "" when not about one instance
  std::string detail;
};

// One point of a per-job time series ("busy/<instance id>": the fraction of a
// market tick a worker spent computing, ...).
struct SamplePoint {
  std::string series;
  double t_s = 0;
  double value = 0;
};

class JobStore {
 public:
  // Opens or creates the database (parent directory must exist). The schema
  // is versioned with PRAGMA user_version; a database of another version or
  // not a database at all is DataLoss naming the file.
  // `clock` stamps created/updated times (nullptr: the real clock).
  static Result<std::unique_ptr<JobStore>> Open(const std::string& path, Clock* clock = nullptr);
  virtual ~JobStore() = default;

  virtual const std::string& path() const = 0;

  // AlreadyExists-style FailedPrecondition when the id is taken.
  virtual Status CreateJob(const JobRecord& job) = 0;
  virtual Result<std::optional<JobRecord>> GetJob(const std::string& id) = 0;
  virtual Result<std::vector<JobRecord>> ListJobs() = 0;
  // FailedPrecondition (naming both states) when CanTransition is false;
  // NotFound for an unknown job. Records a "state" event in the same transaction.
  // A move to the current state changes nothing and records no event.
  virtual Status SetJobState(const std::string& id, JobState to, const std::string& message,
                             double sim_s) = 0;

  // Insert, or replace the row with the same id. NotFound for an unknown job.
  // A new row's billed_until_s starts at launched_s (its ledger is empty); a
  // replace keeps the stored launched_s and billed_until_s, which only Bill() moves.
  virtual Status PutInstance(const InstanceRecord& instance) = 0;
  virtual Result<std::vector<InstanceRecord>> Instances(const std::string& job_id,
                                                        bool live_only) = 0;
  // Sets ended_s and end_reason (FailedPrecondition if already ended).
  virtual Status EndInstance(const std::string& instance_id, double ended_s,
                             const std::string& reason) = 0;

  // Appends ledger rows for one instance and advances its billed_until_s to
  // the last row's to_s, atomically. The rows must be contiguous, start at the
  // instance's billed_until_s, have to_s > from_s, and not pass ended_s when
  // set; otherwise FailedPrecondition and nothing is written. Each row is
  // stored starting exactly where the previous one ended, with usd computed
  // from its times and price (InvalidArgument for a negative or non-finite price).
  virtual Status Bill(const std::string& instance_id, std::span<const LedgerEntry> rows) = 0;
  // Bill() for several instances in one transaction: all of it or none (one
  // commit a reconcile pass, whatever the fleet's size).
  struct InstanceBill {
    std::string instance_id;
    std::vector<LedgerEntry> rows;
  };
  virtual Status BillAll(std::span<const InstanceBill> bills) = 0;
  virtual Result<std::vector<LedgerEntry>> Ledger(const std::string& job_id) = 0;
  virtual Result<double> TotalCost(const std::string& job_id) = 0;

  // FailedPrecondition when the tick is already recorded for the job.
  virtual Status AppendDecision(const std::string& job_id, const DecisionRecord& d) = 0;
  virtual Result<std::vector<DecisionRecord>> Decisions(const std::string& job_id) = 0;

  virtual Status AppendEvent(const std::string& job_id, const EventRecord& e) = 0;
  virtual Result<std::vector<EventRecord>> Events(const std::string& job_id) = 0;

  // Appends time-series points in one transaction (InvalidArgument for a
  // non-finite time or value; NotFound for an unknown job).
  virtual Status AppendSamples(const std::string& job_id, std::span<const SamplePoint> points) = 0;
  // The points of every series whose name starts with `series_prefix`,
  // ordered by series, then time.
  virtual Result<std::vector<SamplePoint>> Samples(const std::string& job_id,
                                                   const std::string& series_prefix) = 0;

  // Small per-job values (progress JSON, rendezvous address, ...).
  virtual Status PutValue(const std::string& job_id, const std::string& key,
                          const std::string& value) = 0;
  virtual Result<std::optional<std::string>> GetValue(const std::string& job_id,
                                                      const std::string& key) = 0;
};

}  // namespace spot::control
