#include "control/job_store.h"

#include <fmt/format.h>
#include <sqlite3.h>

#include <chrono>
#include <cmath>
#include <mutex>
#include <utility>

#include "control/sqlite_stmt.h"

namespace spot::control {
namespace {

using internal::CodeForSqlite;
using internal::Stmt;

constexpr int kSchemaVersion = 3;
// Ledger rows may meet within this many seconds (doubles summed over a long job).
constexpr double kBillTolerance = 1e-6;

// Constant text only; values always go through bound parameters.
constexpr const char* kSchema = R"sql(
CREATE TABLE jobs (
  id TEXT PRIMARY KEY NOT NULL,
  spec_path TEXT NOT NULL,
  spec_hash TEXT NOT NULL,
  state TEXT NOT NULL,
  message TEXT NOT NULL,
  wall_epoch_unix_s REAL NOT NULL,
  time_compression REAL NOT NULL,
  start_tick INTEGER NOT NULL,
  created_unix_s REAL NOT NULL,
  updated_unix_s REAL NOT NULL);
CREATE TABLE instances (
  id TEXT PRIMARY KEY NOT NULL,
  job_id TEXT NOT NULL REFERENCES jobs(id),
  zone INTEGER NOT NULL,
  zone_name TEXT NOT NULL,
  instance_type TEXT NOT NULL,
  spot INTEGER NOT NULL,
  pid INTEGER NOT NULL,
  metadata_port INTEGER NOT NULL,
  launched_s REAL NOT NULL,
  ended_s REAL,
  end_reason TEXT NOT NULL,
  billed_until_s REAL NOT NULL);
CREATE INDEX instances_by_job ON instances(job_id);
CREATE TABLE ledger (
  seq INTEGER PRIMARY KEY,
  instance_id TEXT NOT NULL REFERENCES instances(id),
  from_s REAL NOT NULL,
  to_s REAL NOT NULL,
  usd_per_hour REAL NOT NULL,
  usd REAL NOT NULL);
CREATE INDEX ledger_by_instance ON ledger(instance_id);
CREATE TABLE decisions (
  job_id TEXT NOT NULL REFERENCES jobs(id),
  tick INTEGER NOT NULL,
  abs_tick INTEGER NOT NULL,
  progress_hours REAL NOT NULL,
  current TEXT NOT NULL,
  changeover_left_hours REAL NOT NULL,
  preempted INTEGER NOT NULL,
  target TEXT NOT NULL,
  PRIMARY KEY (job_id, tick));
CREATE TABLE events (
  seq INTEGER PRIMARY KEY,
  job_id TEXT NOT NULL REFERENCES jobs(id),
  sim_s REAL NOT NULL,
  wall_unix_s REAL NOT NULL,
  kind TEXT NOT NULL,
  instance_id TEXT NOT NULL,
  detail TEXT NOT NULL);
CREATE INDEX events_by_job ON events(job_id, seq);
CREATE TABLE job_values (
  job_id TEXT NOT NULL REFERENCES jobs(id),
  key TEXT NOT NULL,
  value TEXT NOT NULL,
  PRIMARY KEY (job_id, key));
)sql";

// Version 2 adds per-job time series (a worker's utilization, ...).
constexpr const char* kSchemaV2 = R"sql(
CREATE TABLE samples (
  job_id TEXT NOT NULL REFERENCES jobs(id),
  series TEXT NOT NULL,
  t_s REAL NOT NULL,
  value REAL NOT NULL);
CREATE INDEX samples_by_series ON samples(job_id, series, t_s);
PRAGMA user_version = 2;
)sql";

// Version 3: an instance's provider-owned data (opaque here: the local
// provider's pid and metadata port, a cloud's instance id) replaces the two
// local-provider columns; what they held moves into it.
constexpr const char* kSchemaV3 = R"sql(
ALTER TABLE instances ADD COLUMN provider_data TEXT NOT NULL DEFAULT '';
UPDATE instances SET provider_data = json_object('pid', pid, 'metadata_port', metadata_port)
  WHERE pid > 0;
ALTER TABLE instances DROP COLUMN pid;
ALTER TABLE instances DROP COLUMN metadata_port;
PRAGMA user_version = 3;
)sql";

constexpr const char* kJobColumns =
    "id, spec_path, spec_hash, state, message, wall_epoch_unix_s, time_compression, start_tick, "
    "created_unix_s, updated_unix_s";
constexpr const char* kInstanceColumns =
    "id, job_id, zone, zone_name, instance_type, spot, provider_data, launched_s, ended_s, "
    "end_reason, billed_until_s";

JobRecord JobFromRow(const Stmt& s) {
  JobRecord j;
  j.id = s.Text(0);
  j.spec_path = s.Text(1);
  j.spec_hash = s.Text(2);
  auto state = ParseJobState(s.Text(3));
  j.state = state.ok() ? *state : JobState::kFailed;
  j.message = s.Text(4);
  j.wall_epoch_unix_s = s.Double(5);
  j.time_compression = s.Double(6);
  j.start_tick = s.Int(7);
  j.created_unix_s = s.Double(8);
  j.updated_unix_s = s.Double(9);
  return j;
}

InstanceRecord InstanceFromRow(const Stmt& s) {
  InstanceRecord r;
  r.id = s.Text(0);
  r.job_id = s.Text(1);
  r.zone = static_cast<int>(s.Int(2));
  r.zone_name = s.Text(3);
  r.instance_type = s.Text(4);
  r.spot = s.Int(5) != 0;
  r.provider_data = s.Text(6);
  r.launched_s = s.Double(7);
  r.ended_s = s.OptDouble(8);
  r.end_reason = s.Text(9);
  r.billed_until_s = s.Double(10);
  return r;
}

class SqliteJobStore final : public JobStore {
 public:
  SqliteJobStore(std::string path, sqlite3* db, Clock* clock)
      : path_(std::move(path)), db_(db), clock_(clock) {}
  ~SqliteJobStore() override { sqlite3_close_v2(db_); }

  Status Init();
  const std::string& path() const override { return path_; }

  Status CreateJob(const JobRecord& job) override;
  Result<std::optional<JobRecord>> GetJob(const std::string& id) override;
  Result<std::vector<JobRecord>> ListJobs() override;
  Status SetJobState(const std::string& id, JobState to, const std::string& message,
                     double sim_s) override;
  Status PutInstance(const InstanceRecord& instance) override;
  Result<std::vector<InstanceRecord>> Instances(const std::string& job_id, bool live_only) override;
  Status EndInstance(const std::string& instance_id, double ended_s,
                     const std::string& reason) override;
  Status Bill(const std::string& instance_id, std::span<const LedgerEntry> rows) override;
  Status BillAll(std::span<const InstanceBill> bills) override;
  Result<std::vector<LedgerEntry>> Ledger(const std::string& job_id) override;
  Result<double> TotalCost(const std::string& job_id) override;
  Status AppendDecision(const std::string& job_id, const DecisionRecord& d) override;
  Result<std::vector<DecisionRecord>> Decisions(const std::string& job_id) override;
  Status AppendEvent(const std::string& job_id, const EventRecord& e) override;
  Result<std::vector<EventRecord>> Events(const std::string& job_id) override;
  Status AppendSamples(const std::string& job_id, std::span<const SamplePoint> points) override;
  Result<std::vector<SamplePoint>> Samples(const std::string& job_id,
                                           const std::string& series_prefix) override;
  Status PutValue(const std::string& job_id, const std::string& key,
                  const std::string& value) override;
  Result<std::optional<std::string>> GetValue(const std::string& job_id,
                                              const std::string& key) override;

 private:
  // "job store PATH: OP: what".
  Status Fail(StatusCode code, std::string_view op, std::string_view what) const {
    return Status(code, fmt::format("job store {}: {}: {}", path_, op, what));
  }
  Status SqliteError(std::string_view op, int rc) const {
    return Fail(CodeForSqlite(rc), op, fmt::format("{} (sqlite code {})", sqlite3_errmsg(db_), rc));
  }
  Result<Stmt> Prepare(std::string_view op, std::string_view sql);
  Status Exec(std::string_view op, const char* sql);
  // Steps a statement that returns no rows.
  Status Run(std::string_view op, Stmt& s) {
    int rc = s.Step();
    return rc == SQLITE_DONE ? Status::Ok() : SqliteError(op, rc);
  }
  // Runs `body` in BEGIN IMMEDIATE ... COMMIT, rolling back on any error.
  template <typename Body>
  Status Write(std::string_view op, Body&& body);
  // Collects one value per row with `from_row`.
  template <typename T, typename FromRow>
  Result<std::vector<T>> Collect(std::string_view op, Stmt& s, FromRow from_row);

  // The helpers below REQUIRE mu_ held.
  Result<int64_t> UserVersion(std::string_view op);
  Status CheckVersion();
  Result<std::optional<JobRecord>> FindJob(std::string_view op, const std::string& id);
  Result<std::optional<InstanceRecord>> FindInstance(std::string_view op, const std::string& id);
  Status RequireJob(std::string_view op, const std::string& job_id);
  Status InsertEvent(std::string_view op, const std::string& job_id, const EventRecord& e);
  Status CheckBill(std::string_view op, const InstanceRecord& inst,
                   std::span<const LedgerEntry> rows) const;

  const std::string path_;
  std::mutex mu_;
  sqlite3* const db_;  // GUARDED_BY(mu_)
  Clock* const clock_;
};

Result<Stmt> SqliteJobStore::Prepare(std::string_view op, std::string_view sql) {
  sqlite3_stmt* s = nullptr;
  int rc = sqlite3_prepare_v2(db_, sql.data(), static_cast<int>(sql.size()), &s, nullptr);
  if (rc != SQLITE_OK) {
    sqlite3_finalize(s);
    return SqliteError(op, rc);
  }
  return Stmt(s);
}

Status SqliteJobStore::Exec(std::string_view op, const char* sql) {
  int rc = sqlite3_exec(db_, sql, nullptr, nullptr, nullptr);
  return rc == SQLITE_OK ? Status::Ok() : SqliteError(op, rc);
}

template <typename Body>
Status SqliteJobStore::Write(std::string_view op, Body&& body) {
  std::lock_guard<std::mutex> l(mu_);
  SPOT_RETURN_IF_ERROR(Exec(op, "BEGIN IMMEDIATE"));
  Status s = body();
  if (s.ok()) s = Exec(op, "COMMIT");
  // A failed COMMIT may already have rolled back (autocommit is on again then).
  if (!s.ok() && sqlite3_get_autocommit(db_) == 0) {
    sqlite3_exec(db_, "ROLLBACK", nullptr, nullptr, nullptr);
  }
  return s;
}

template <typename T, typename FromRow>
Result<std::vector<T>> SqliteJobStore::Collect(std::string_view op, Stmt& s, FromRow from_row) {
  std::vector<T> out;
  int rc;
  while ((rc = s.Step()) == SQLITE_ROW) out.push_back(from_row(s));
  if (rc != SQLITE_DONE) return SqliteError(op, rc);
  return out;
}

Result<int64_t> SqliteJobStore::UserVersion(std::string_view op) {
  SPOT_ASSIGN_OR_RETURN(Stmt s, Prepare(op, "PRAGMA user_version"));
  int rc = s.Step();
  if (rc != SQLITE_ROW) return SqliteError(op, rc);
  return s.Int(0);
}

// A new file gets the schema; a file of another version is refused.
Status SqliteJobStore::CheckVersion() {
  constexpr std::string_view kOp = "opening";
  SPOT_ASSIGN_OR_RETURN(int64_t version, UserVersion(kOp));
  if (version >= 1 && version <= kSchemaVersion) return Status::Ok();  // upgraded in Init
  if (version != 0) {
    return Fail(
        StatusCode::kDataLoss, kOp,
        fmt::format("schema version {}, this build reads version {}", version, kSchemaVersion));
  }
  SPOT_ASSIGN_OR_RETURN(Stmt count, Prepare(kOp, "SELECT count(*) FROM sqlite_master"));
  int rc = count.Step();
  if (rc != SQLITE_ROW) return SqliteError(kOp, rc);
  if (count.Int(0) != 0) {
    return Fail(StatusCode::kDataLoss, kOp, "a SQLite database, but not a SpotTrain job store");
  }
  return Status::Ok();
}

Status SqliteJobStore::Init() {
  constexpr std::string_view kOp = "opening";
  sqlite3_extended_result_codes(db_, 1);
  sqlite3_busy_timeout(db_, 5000);
  std::lock_guard<std::mutex> l(mu_);
  // Reading the header first: a file that is not a database fails here.
  SPOT_RETURN_IF_ERROR(CheckVersion());
  {
    SPOT_ASSIGN_OR_RETURN(Stmt s, Prepare(kOp, "PRAGMA journal_mode=WAL"));
    int rc = s.Step();
    if (rc != SQLITE_ROW) return SqliteError(kOp, rc);
    if (s.Text(0) != "wal") {
      return Fail(StatusCode::kFailedPrecondition, kOp,
                  fmt::format("WAL journal mode refused (journal_mode is {})", s.Text(0)));
    }
  }
  SPOT_RETURN_IF_ERROR(Exec(kOp, "PRAGMA synchronous=FULL"));
  SPOT_RETURN_IF_ERROR(Exec(kOp, "PRAGMA foreign_keys=ON"));
  SPOT_RETURN_IF_ERROR(Exec(kOp, "BEGIN IMMEDIATE"));
  // Another process may have created the schema since the check above.
  auto version = UserVersion(kOp);
  Status s = version.status();
  if (s.ok() && *version == 0) s = Exec("creating the schema", kSchema);
  if (s.ok() && *version < 2) s = Exec("upgrading the schema to version 2", kSchemaV2);
  if (s.ok() && *version < 3) s = Exec("upgrading the schema to version 3", kSchemaV3);
  if (s.ok()) s = Exec(kOp, "COMMIT");
  if (!s.ok() && sqlite3_get_autocommit(db_) == 0) {
    sqlite3_exec(db_, "ROLLBACK", nullptr, nullptr, nullptr);
  }
  return s;
}

Result<std::optional<JobRecord>> SqliteJobStore::FindJob(std::string_view op,
                                                         const std::string& id) {
  SPOT_ASSIGN_OR_RETURN(Stmt s,
                        Prepare(op, fmt::format("SELECT {} FROM jobs WHERE id = ?", kJobColumns)));
  s.Bind(id);
  int rc = s.Step();
  if (rc == SQLITE_DONE) return std::optional<JobRecord>();
  if (rc != SQLITE_ROW) return SqliteError(op, rc);
  return std::optional<JobRecord>(JobFromRow(s));
}

Result<std::optional<InstanceRecord>> SqliteJobStore::FindInstance(std::string_view op,
                                                                   const std::string& id) {
  SPOT_ASSIGN_OR_RETURN(
      Stmt s, Prepare(op, fmt::format("SELECT {} FROM instances WHERE id = ?", kInstanceColumns)));
  s.Bind(id);
  int rc = s.Step();
  if (rc == SQLITE_DONE) return std::optional<InstanceRecord>();
  if (rc != SQLITE_ROW) return SqliteError(op, rc);
  return std::optional<InstanceRecord>(InstanceFromRow(s));
}

Status SqliteJobStore::RequireJob(std::string_view op, const std::string& job_id) {
  SPOT_ASSIGN_OR_RETURN(std::optional<JobRecord> job, FindJob(op, job_id));
  if (!job) return Fail(StatusCode::kNotFound, op, fmt::format("no job {}", job_id));
  return Status::Ok();
}

Status SqliteJobStore::InsertEvent(std::string_view op, const std::string& job_id,
                                   const EventRecord& e) {
  SPOT_ASSIGN_OR_RETURN(Stmt s, Prepare(op,
                                        "INSERT INTO events (job_id, sim_s, wall_unix_s, kind, "
                                        "instance_id, detail) VALUES (?, ?, ?, ?, ?, ?)"));
  s.Bind(job_id).Bind(e.sim_s).Bind(e.wall_unix_s).Bind(e.kind).Bind(e.instance_id).Bind(e.detail);
  return Run(op, s);
}

Status SqliteJobStore::CreateJob(const JobRecord& job) {
  constexpr std::string_view kOp = "CreateJob";
  return Write(kOp, [&]() -> Status {
    SPOT_ASSIGN_OR_RETURN(std::optional<JobRecord> old, FindJob(kOp, job.id));
    if (old)
      return Fail(StatusCode::kFailedPrecondition, kOp, fmt::format("job {} exists", job.id));
    SPOT_ASSIGN_OR_RETURN(
        Stmt s, Prepare(kOp, fmt::format("INSERT INTO jobs ({}) VALUES (?, ?, ?, ?, ?, ?, ?, ?, "
                                         "?, ?)",
                                         kJobColumns)));
    double now = clock_->NowUnixS();
    s.Bind(job.id)
        .Bind(job.spec_path)
        .Bind(job.spec_hash)
        .Bind(std::string(JobStateName(job.state)));
    s.Bind(job.message).Bind(job.wall_epoch_unix_s).Bind(job.time_compression).Bind(job.start_tick);
    s.Bind(job.created_unix_s != 0 ? job.created_unix_s : now);
    s.Bind(job.updated_unix_s != 0 ? job.updated_unix_s : now);
    return Run(kOp, s);
  });
}

Result<std::optional<JobRecord>> SqliteJobStore::GetJob(const std::string& id) {
  std::lock_guard<std::mutex> l(mu_);
  return FindJob("GetJob", id);
}

Result<std::vector<JobRecord>> SqliteJobStore::ListJobs() {
  constexpr std::string_view kOp = "ListJobs";
  std::lock_guard<std::mutex> l(mu_);
  SPOT_ASSIGN_OR_RETURN(
      Stmt s,
      Prepare(kOp, fmt::format("SELECT {} FROM jobs ORDER BY created_unix_s, rowid", kJobColumns)));
  return Collect<JobRecord>(kOp, s, JobFromRow);
}

Status SqliteJobStore::SetJobState(const std::string& id, JobState to, const std::string& message,
                                   double sim_s) {
  constexpr std::string_view kOp = "SetJobState";
  return Write(kOp, [&]() -> Status {
    SPOT_ASSIGN_OR_RETURN(std::optional<JobRecord> job, FindJob(kOp, id));
    if (!job) return Fail(StatusCode::kNotFound, kOp, fmt::format("no job {}", id));
    if (job->state == to) return Status::Ok();
    if (!CanTransition(job->state, to)) {
      return Fail(StatusCode::kFailedPrecondition, kOp,
                  fmt::format("job {} cannot go from {} to {}", id, JobStateName(job->state),
                              JobStateName(to)));
    }
    double now = clock_->NowUnixS();
    SPOT_ASSIGN_OR_RETURN(Stmt s,
                          Prepare(kOp,
                                  "UPDATE jobs SET state = ?, message = ?, updated_unix_s = ? "
                                  "WHERE id = ?"));
    s.Bind(std::string(JobStateName(to))).Bind(message).Bind(now).Bind(id);
    SPOT_RETURN_IF_ERROR(Run(kOp, s));
    EventRecord e;
    e.sim_s = sim_s;
    e.wall_unix_s = now;
    e.kind = "state";
    e.detail = fmt::format("{} -> {}", JobStateName(job->state), JobStateName(to));
    if (!message.empty()) e.detail += ": " + message;
    return InsertEvent(kOp, id, e);
  });
}

Status SqliteJobStore::PutInstance(const InstanceRecord& r) {
  constexpr std::string_view kOp = "PutInstance";
  return Write(kOp, [&]() -> Status {
    SPOT_RETURN_IF_ERROR(RequireJob(kOp, r.job_id));
    // launched_s and billed_until_s stay as stored on a replace: only Bill()
    // moves the ledger, so the two can never disagree.
    SPOT_ASSIGN_OR_RETURN(
        Stmt s,
        Prepare(kOp, fmt::format("INSERT INTO instances ({}) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, "
                                 "?) ON CONFLICT(id) DO UPDATE SET job_id = excluded.job_id, "
                                 "zone = excluded.zone, zone_name = excluded.zone_name, "
                                 "instance_type = excluded.instance_type, spot = excluded.spot, "
                                 "provider_data = excluded.provider_data, "
                                 "ended_s = excluded.ended_s, end_reason = excluded.end_reason",
                                 kInstanceColumns)));
    s.Bind(r.id).Bind(r.job_id).Bind(r.zone).Bind(r.zone_name).Bind(r.instance_type).Bind(r.spot);
    s.Bind(r.provider_data).Bind(r.launched_s).Bind(r.ended_s).Bind(r.end_reason);
    s.Bind(r.launched_s);
    return Run(kOp, s);
  });
}

Result<std::vector<InstanceRecord>> SqliteJobStore::Instances(const std::string& job_id,
                                                              bool live_only) {
  constexpr std::string_view kOp = "Instances";
  std::lock_guard<std::mutex> l(mu_);
  SPOT_ASSIGN_OR_RETURN(Stmt s,
                        Prepare(kOp, fmt::format("SELECT {} FROM instances WHERE job_id = ? AND "
                                                 "(? = 0 OR ended_s IS NULL) ORDER BY rowid",
                                                 kInstanceColumns)));
  s.Bind(job_id).Bind(live_only);
  return Collect<InstanceRecord>(kOp, s, InstanceFromRow);
}

Status SqliteJobStore::EndInstance(const std::string& instance_id, double ended_s,
                                   const std::string& reason) {
  constexpr std::string_view kOp = "EndInstance";
  return Write(kOp, [&]() -> Status {
    SPOT_ASSIGN_OR_RETURN(std::optional<InstanceRecord> inst, FindInstance(kOp, instance_id));
    if (!inst) return Fail(StatusCode::kNotFound, kOp, fmt::format("no instance {}", instance_id));
    if (inst->ended_s) {
      return Fail(StatusCode::kFailedPrecondition, kOp,
                  fmt::format("instance {} already ended at {} s ({})", instance_id, *inst->ended_s,
                              inst->end_reason));
    }
    SPOT_ASSIGN_OR_RETURN(
        Stmt s, Prepare(kOp, "UPDATE instances SET ended_s = ?, end_reason = ? WHERE id = ?"));
    s.Bind(ended_s).Bind(reason).Bind(instance_id);
    return Run(kOp, s);
  });
}

Status SqliteJobStore::CheckBill(std::string_view op, const InstanceRecord& inst,
                                 std::span<const LedgerEntry> rows) const {
  double expect = inst.billed_until_s;
  for (size_t i = 0; i < rows.size(); ++i) {
    const LedgerEntry& r = rows[i];
    if (!r.instance_id.empty() && r.instance_id != inst.id) {
      return Fail(StatusCode::kInvalidArgument, op,
                  fmt::format("row {} names instance {}, billing {}", i, r.instance_id, inst.id));
    }
    if (!(r.usd_per_hour >= 0) || !std::isfinite(r.usd_per_hour)) {
      return Fail(StatusCode::kInvalidArgument, op,
                  fmt::format("row {} of {}: price {} $/h", i, inst.id, r.usd_per_hour));
    }
    std::string bad;
    if (!(std::fabs(r.from_s - expect) <= kBillTolerance)) {
      bad = fmt::format("starts at {} s, the ledger is at {} s", r.from_s, expect);
    } else if (!(r.to_s > r.from_s) || !std::isfinite(r.to_s)) {
      bad = fmt::format("is empty or reversed ([{}, {}) s)", r.from_s, r.to_s);
    } else if (inst.ended_s && r.to_s > *inst.ended_s + kBillTolerance) {
      bad = fmt::format("ends at {} s, past the instance's end at {} s", r.to_s, *inst.ended_s);
    }
    if (!bad.empty()) {
      return Fail(StatusCode::kFailedPrecondition, op,
                  fmt::format("row {} for instance {} {}; nothing billed", i, inst.id, bad));
    }
    expect = r.to_s;
  }
  return Status::Ok();
}

Status SqliteJobStore::Bill(const std::string& instance_id, std::span<const LedgerEntry> rows) {
  if (rows.empty()) return Status::Ok();
  const InstanceBill one[] = {{instance_id, {rows.begin(), rows.end()}}};
  return BillAll(one);
}

Status SqliteJobStore::BillAll(std::span<const InstanceBill> bills) {
  constexpr std::string_view kOp = "Bill";
  return Write(kOp, [&]() -> Status {
    SPOT_ASSIGN_OR_RETURN(Stmt ins, Prepare(kOp,
                                            "INSERT INTO ledger (instance_id, from_s, to_s, "
                                            "usd_per_hour, usd) VALUES (?, ?, ?, ?, ?)"));
    SPOT_ASSIGN_OR_RETURN(Stmt up,
                          Prepare(kOp, "UPDATE instances SET billed_until_s = ? WHERE id = ?"));
    for (const InstanceBill& b : bills) {
      if (b.rows.empty()) continue;
      SPOT_ASSIGN_OR_RETURN(std::optional<InstanceRecord> inst, FindInstance(kOp, b.instance_id));
      if (!inst) {
        return Fail(StatusCode::kNotFound, kOp, fmt::format("no instance {}", b.instance_id));
      }
      SPOT_RETURN_IF_ERROR(CheckBill(kOp, *inst, b.rows));
      // Each row starts exactly where the last ended, so the rows sum to
      // billed_until_s - launched_s without drift.
      double from = inst->billed_until_s;
      for (const LedgerEntry& r : b.rows) {
        ins.Reset();
        ins.Bind(b.instance_id).Bind(from).Bind(r.to_s).Bind(r.usd_per_hour);
        ins.Bind((r.to_s - from) / 3600.0 * r.usd_per_hour);
        SPOT_RETURN_IF_ERROR(Run(kOp, ins));
        from = r.to_s;
      }
      up.Reset();
      up.Bind(from).Bind(b.instance_id);
      SPOT_RETURN_IF_ERROR(Run(kOp, up));
    }
    return Status::Ok();
  });
}

Result<std::vector<LedgerEntry>> SqliteJobStore::Ledger(const std::string& job_id) {
  constexpr std::string_view kOp = "Ledger";
  std::lock_guard<std::mutex> l(mu_);
  SPOT_ASSIGN_OR_RETURN(Stmt s,
                        Prepare(kOp,
                                "SELECT l.instance_id, l.from_s, l.to_s, l.usd_per_hour, l.usd "
                                "FROM ledger l JOIN instances i ON l.instance_id = i.id "
                                "WHERE i.job_id = ? ORDER BY l.seq"));
  s.Bind(job_id);
  return Collect<LedgerEntry>(kOp, s, [](const Stmt& row) {
    return LedgerEntry{row.Text(0), row.Double(1), row.Double(2), row.Double(3), row.Double(4)};
  });
}

Result<double> SqliteJobStore::TotalCost(const std::string& job_id) {
  constexpr std::string_view kOp = "TotalCost";
  std::lock_guard<std::mutex> l(mu_);
  SPOT_ASSIGN_OR_RETURN(Stmt s,
                        Prepare(kOp,
                                "SELECT COALESCE(SUM(l.usd), 0.0) FROM ledger l "
                                "JOIN instances i ON l.instance_id = i.id WHERE i.job_id = ?"));
  s.Bind(job_id);
  int rc = s.Step();
  if (rc != SQLITE_ROW) return SqliteError(kOp, rc);
  return s.Double(0);
}

Status SqliteJobStore::AppendDecision(const std::string& job_id, const DecisionRecord& d) {
  constexpr std::string_view kOp = "AppendDecision";
  return Write(kOp, [&]() -> Status {
    SPOT_RETURN_IF_ERROR(RequireJob(kOp, job_id));
    SPOT_ASSIGN_OR_RETURN(Stmt q,
                          Prepare(kOp, "SELECT 1 FROM decisions WHERE job_id = ? AND tick = ?"));
    q.Bind(job_id).Bind(d.tick);
    int rc = q.Step();
    if (rc == SQLITE_ROW) {
      return Fail(StatusCode::kFailedPrecondition, kOp,
                  fmt::format("job {} already has a decision for tick {}", job_id, d.tick));
    }
    if (rc != SQLITE_DONE) return SqliteError(kOp, rc);
    SPOT_ASSIGN_OR_RETURN(Stmt s,
                          Prepare(kOp,
                                  "INSERT INTO decisions (job_id, tick, abs_tick, progress_hours, "
                                  "current, changeover_left_hours, preempted, target) "
                                  "VALUES (?, ?, ?, ?, ?, ?, ?, ?)"));
    s.Bind(job_id).Bind(d.tick).Bind(d.abs_tick).Bind(d.progress_hours).Bind(d.current);
    s.Bind(d.changeover_left_hours).Bind(d.preempted).Bind(d.target);
    return Run(kOp, s);
  });
}

Result<std::vector<DecisionRecord>> SqliteJobStore::Decisions(const std::string& job_id) {
  constexpr std::string_view kOp = "Decisions";
  std::lock_guard<std::mutex> l(mu_);
  SPOT_ASSIGN_OR_RETURN(Stmt s, Prepare(kOp,
                                        "SELECT tick, abs_tick, progress_hours, current, "
                                        "changeover_left_hours, preempted, target FROM decisions "
                                        "WHERE job_id = ? ORDER BY tick"));
  s.Bind(job_id);
  return Collect<DecisionRecord>(kOp, s, [](const Stmt& row) {
    return DecisionRecord{row.Int(0),    row.Int(1),      row.Double(2), row.Text(3),
                          row.Double(4), row.Int(5) != 0, row.Text(6)};
  });
}

Status SqliteJobStore::AppendEvent(const std::string& job_id, const EventRecord& e) {
  constexpr std::string_view kOp = "AppendEvent";
  return Write(kOp, [&]() -> Status {
    SPOT_RETURN_IF_ERROR(RequireJob(kOp, job_id));
    return InsertEvent(kOp, job_id, e);
  });
}

Status SqliteJobStore::AppendSamples(const std::string& job_id,
                                     std::span<const SamplePoint> points) {
  constexpr std::string_view kOp = "AppendSamples";
  return Write(kOp, [&]() -> Status {
    SPOT_RETURN_IF_ERROR(RequireJob(kOp, job_id));
    SPOT_ASSIGN_OR_RETURN(
        Stmt s,
        Prepare(kOp, "INSERT INTO samples (job_id, series, t_s, value) VALUES (?, ?, ?, ?)"));
    for (const SamplePoint& p : points) {
      if (!std::isfinite(p.t_s) || !std::isfinite(p.value)) {
        return Fail(
            StatusCode::kInvalidArgument, kOp,
            fmt::format("series {}: a non-finite point ({}, {})", p.series, p.t_s, p.value));
      }
      s.Reset();
      s.Bind(job_id).Bind(p.series).Bind(p.t_s).Bind(p.value);
      SPOT_RETURN_IF_ERROR(Run(kOp, s));
    }
    return Status::Ok();
  });
}

Result<std::vector<SamplePoint>> SqliteJobStore::Samples(const std::string& job_id,
                                                         const std::string& series_prefix) {
  constexpr std::string_view kOp = "Samples";
  std::lock_guard<std::mutex> l(mu_);
  SPOT_ASSIGN_OR_RETURN(Stmt s, Prepare(kOp,
                                        "SELECT series, t_s, value FROM samples WHERE job_id = ? "
                                        "AND substr(series, 1, ?) = ? ORDER BY series, t_s"));
  s.Bind(job_id).Bind(static_cast<int64_t>(series_prefix.size())).Bind(series_prefix);
  return Collect<SamplePoint>(kOp, s, [](const Stmt& row) {
    return SamplePoint{row.Text(0), row.Double(1), row.Double(2)};
  });
}

Result<std::vector<EventRecord>> SqliteJobStore::Events(const std::string& job_id) {
  constexpr std::string_view kOp = "Events";
  std::lock_guard<std::mutex> l(mu_);
  SPOT_ASSIGN_OR_RETURN(Stmt s, Prepare(kOp,
                                        "SELECT sim_s, wall_unix_s, kind, instance_id, "
                                        "detail FROM events WHERE job_id = ? ORDER BY seq"));
  s.Bind(job_id);
  return Collect<EventRecord>(kOp, s, [](const Stmt& row) {
    return EventRecord{row.Double(0), row.Double(1), row.Text(2), row.Text(3), row.Text(4)};
  });
}

Status SqliteJobStore::PutValue(const std::string& job_id, const std::string& key,
                                const std::string& value) {
  constexpr std::string_view kOp = "PutValue";
  return Write(kOp, [&]() -> Status {
    SPOT_RETURN_IF_ERROR(RequireJob(kOp, job_id));
    SPOT_ASSIGN_OR_RETURN(Stmt s,
                          Prepare(kOp,
                                  "INSERT INTO job_values (job_id, key, value) VALUES (?, ?, ?) "
                                  "ON CONFLICT(job_id, key) DO UPDATE SET value = excluded.value"));
    s.Bind(job_id).Bind(key).Bind(value);
    return Run(kOp, s);
  });
}

Result<std::optional<std::string>> SqliteJobStore::GetValue(const std::string& job_id,
                                                            const std::string& key) {
  constexpr std::string_view kOp = "GetValue";
  std::lock_guard<std::mutex> l(mu_);
  SPOT_ASSIGN_OR_RETURN(Stmt s,
                        Prepare(kOp, "SELECT value FROM job_values WHERE job_id = ? AND key = ?"));
  s.Bind(job_id).Bind(key);
  int rc = s.Step();
  if (rc == SQLITE_DONE) return std::optional<std::string>();
  if (rc != SQLITE_ROW) return SqliteError(kOp, rc);
  return std::optional<std::string>(s.Text(0));
}

}  // namespace

std::string_view JobStateName(JobState s) {
  switch (s) {
    case JobState::kPending:
      return "PENDING";
    case JobState::kProvisioning:
      return "PROVISIONING";
    case JobState::kRunning:
      return "RUNNING";
    case JobState::kRecovering:
      return "RECOVERING";
    case JobState::kSucceeded:
      return "SUCCEEDED";
    case JobState::kFailed:
      return "FAILED";
    case JobState::kCancelled:
      return "CANCELLED";
  }
  return "UNKNOWN";
}

Result<JobState> ParseJobState(std::string_view name) {
  for (JobState s :
       {JobState::kPending, JobState::kProvisioning, JobState::kRunning, JobState::kRecovering,
        JobState::kSucceeded, JobState::kFailed, JobState::kCancelled}) {
    if (JobStateName(s) == name) return s;
  }
  return InvalidArgumentError(fmt::format("unknown job state \"{}\"", name));
}

bool IsTerminal(JobState s) {
  return s == JobState::kSucceeded || s == JobState::kFailed || s == JobState::kCancelled;
}

bool CanTransition(JobState from, JobState to) {
  if (from == to) return true;
  using S = JobState;
  switch (from) {
    case S::kPending:
      return to == S::kProvisioning || to == S::kCancelled || to == S::kFailed;
    case S::kProvisioning:
      return to == S::kRunning || to == S::kRecovering || to == S::kCancelled || to == S::kFailed;
    case S::kRunning:
      return to == S::kRecovering || to == S::kProvisioning || to == S::kSucceeded ||
             to == S::kCancelled || to == S::kFailed;
    case S::kRecovering:
      return to == S::kRunning || to == S::kProvisioning || to == S::kCancelled || to == S::kFailed;
    case S::kSucceeded:
    case S::kFailed:
    case S::kCancelled:
      return false;
  }
  return false;
}

Result<std::unique_ptr<JobStore>> JobStore::Open(const std::string& path, Clock* clock) {
  sqlite3* db = nullptr;
  int rc =
      sqlite3_open_v2(path.c_str(), &db,
                      SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE | SQLITE_OPEN_FULLMUTEX, nullptr);
  if (rc != SQLITE_OK) {
    std::string what = db ? sqlite3_errmsg(db) : sqlite3_errstr(rc);
    sqlite3_close_v2(db);
    return Status(CodeForSqlite(rc), fmt::format("job store {}: opening: {}", path, what));
  }
  auto store = std::make_unique<SqliteJobStore>(path, db, clock ? clock : RealClock());
  SPOT_RETURN_IF_ERROR(store->Init());
  return std::unique_ptr<JobStore>(std::move(store));
}

}  // namespace spot::control
