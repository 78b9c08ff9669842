#include "control/job_store.h"

#include <fmt/format.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sqlite3.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <fstream>
#include <map>
#include <set>
#include <thread>
#include <utility>

#include "core/temp_dir.h"

namespace spot::control {
namespace {

constexpr JobState kAllStates[] = {
    JobState::kPending,   JobState::kProvisioning, JobState::kRunning,  JobState::kRecovering,
    JobState::kSucceeded, JobState::kFailed,       JobState::kCancelled};

JobRecord MakeJob(const std::string& id, JobState state = JobState::kPending) {
  JobRecord j;
  j.id = id;
  j.spec_path = "/specs/" + id + ".yaml";
  j.spec_hash = "0123456789abcdef";
  j.state = state;
  j.message = "submitted";
  j.wall_epoch_unix_s = 1700000000.5;
  j.time_compression = 60;
  j.start_tick = 1234;
  return j;
}

InstanceRecord MakeInstance(const std::string& id, const std::string& job, double launched_s) {
  InstanceRecord r;
  r.id = id;
  r.job_id = job;
  r.zone = 1;
  r.zone_name = "us-east-1b";
  r.instance_type = "p3.2xlarge";
  r.provider_data = R"({"pid":4242,"metadata_port":18080})";
  r.launched_s = launched_s;
  return r;
}

LedgerEntry Row(double from, double to, double price = 3.6) {
  return LedgerEntry{"", from, to, price, 0};
}

class JobStoreTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto dir = TempDir::Create("spot_job_store_test");
    ASSERT_TRUE(dir.ok()) << dir.status().ToString();
    dir_.emplace(std::move(dir).value());
    path_ = (dir_->path() / "jobs.db").string();
    Reopen();
  }

  void Reopen() {
    store_.reset();
    auto store = JobStore::Open(path_);
    ASSERT_TRUE(store.ok()) << store.status().ToString();
    store_ = std::move(store).value();
  }

  std::optional<TempDir> dir_;
  std::string path_;
  std::unique_ptr<JobStore> store_;
};

TEST_F(JobStoreTest, CreatesGetsAndListsJobs) {
  ASSERT_TRUE(store_->CreateJob(MakeJob("a")).ok());
  ASSERT_TRUE(store_->CreateJob(MakeJob("b", JobState::kRunning)).ok());
  Status dup = store_->CreateJob(MakeJob("a"));
  EXPECT_EQ(dup.code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(dup.message().find(path_), std::string::npos) << dup.message();

  auto a = store_->GetJob("a");
  ASSERT_TRUE(a.ok() && a->has_value());
  const JobRecord& j = **a;
  EXPECT_EQ(j.spec_path, "/specs/a.yaml");
  EXPECT_EQ(j.spec_hash, "0123456789abcdef");
  EXPECT_EQ(j.state, JobState::kPending);
  EXPECT_EQ(j.message, "submitted");
  EXPECT_DOUBLE_EQ(j.wall_epoch_unix_s, 1700000000.5);
  EXPECT_DOUBLE_EQ(j.time_compression, 60);
  EXPECT_EQ(j.start_tick, 1234);
  EXPECT_GT(j.created_unix_s, 1e9);  // filled in with the wall clock
  EXPECT_GT(j.updated_unix_s, 1e9);

  auto missing = store_->GetJob("nope");
  ASSERT_TRUE(missing.ok());
  EXPECT_FALSE(missing->has_value());

  auto all = store_->ListJobs();
  ASSERT_TRUE(all.ok());
  ASSERT_EQ(all->size(), 2u);
  EXPECT_EQ((*all)[0].id, "a");
  EXPECT_EQ((*all)[1].id, "b");
  EXPECT_EQ((*all)[1].state, JobState::kRunning);
  EXPECT_EQ(store_->path(), path_);
}

TEST(JobStateTest, NamesRoundTripAndTerminalStates) {
  std::set<std::string_view> names;
  for (JobState s : kAllStates) {
    names.insert(JobStateName(s));
    auto parsed = ParseJobState(JobStateName(s));
    ASSERT_TRUE(parsed.ok());
    EXPECT_EQ(*parsed, s);
  }
  EXPECT_EQ(names.size(), 7u);
  EXPECT_EQ(JobStateName(JobState::kProvisioning), "PROVISIONING");
  EXPECT_EQ(ParseJobState("running").status().code(), StatusCode::kInvalidArgument);
  EXPECT_TRUE(IsTerminal(JobState::kSucceeded));
  EXPECT_TRUE(IsTerminal(JobState::kFailed));
  EXPECT_TRUE(IsTerminal(JobState::kCancelled));
  EXPECT_FALSE(IsTerminal(JobState::kPending));
  EXPECT_FALSE(IsTerminal(JobState::kProvisioning));
  EXPECT_FALSE(IsTerminal(JobState::kRunning));
  EXPECT_FALSE(IsTerminal(JobState::kRecovering));
}

// The legal moves, as the header lists them (self-moves aside).
const std::set<std::pair<JobState, JobState>>& LegalMoves() {
  using S = JobState;
  static const std::set<std::pair<S, S>> kMoves = {
      {S::kPending, S::kProvisioning},    {S::kPending, S::kCancelled},
      {S::kPending, S::kFailed},          {S::kProvisioning, S::kRunning},
      {S::kProvisioning, S::kRecovering}, {S::kProvisioning, S::kCancelled},
      {S::kProvisioning, S::kFailed},     {S::kRunning, S::kRecovering},
      {S::kRunning, S::kProvisioning},    {S::kRunning, S::kSucceeded},
      {S::kRunning, S::kCancelled},       {S::kRunning, S::kFailed},
      {S::kRecovering, S::kRunning},      {S::kRecovering, S::kProvisioning},
      {S::kRecovering, S::kCancelled},    {S::kRecovering, S::kFailed},
  };
  return kMoves;
}

TEST(JobStateTest, TransitionTableMatchesTheStateMachine) {
  for (JobState from : kAllStates) {
    for (JobState to : kAllStates) {
      bool want = from == to || LegalMoves().count({from, to}) > 0;
      EXPECT_EQ(CanTransition(from, to), want) << JobStateName(from) << " -> " << JobStateName(to);
      if (IsTerminal(from) && from != to) {
        EXPECT_FALSE(CanTransition(from, to));
      }
    }
  }
}

TEST_F(JobStoreTest, SetJobStateEnforcesTheStateMachineAndRecordsEvents) {
  int n = 0;
  for (JobState from : kAllStates) {
    for (JobState to : kAllStates) {
      std::string id = "job" + std::to_string(n++);
      std::string what = std::string(JobStateName(from)) + " -> " + std::string(JobStateName(to));
      ASSERT_TRUE(store_->CreateJob(MakeJob(id, from)).ok());
      Status s = store_->SetJobState(id, to, "because", 42.5);
      auto job = store_->GetJob(id);
      auto events = store_->Events(id);
      ASSERT_TRUE(job.ok() && job->has_value() && events.ok());
      if (from == to) {
        EXPECT_TRUE(s.ok()) << what;
        EXPECT_TRUE(events->empty()) << what;
      } else if (LegalMoves().count({from, to})) {
        ASSERT_TRUE(s.ok()) << what << ": " << s.ToString();
        EXPECT_EQ((*job)->state, to);
        EXPECT_EQ((*job)->message, "because");
        ASSERT_EQ(events->size(), 1u) << what;
        EXPECT_EQ((*events)[0].kind, "state");
        EXPECT_DOUBLE_EQ((*events)[0].sim_s, 42.5);
        EXPECT_EQ((*events)[0].detail, what + ": because");
      } else {
        EXPECT_EQ(s.code(), StatusCode::kFailedPrecondition) << what;
        EXPECT_NE(
            s.message().find(fmt::format("from {} to {}", JobStateName(from), JobStateName(to))),
            std::string::npos)
            << s.message();
        EXPECT_EQ((*job)->state, from) << what;
        EXPECT_EQ((*job)->message, "submitted");
        EXPECT_TRUE(events->empty()) << what;
      }
    }
  }
  EXPECT_EQ(store_->SetJobState("ghost", JobState::kRunning, "", 0).code(), StatusCode::kNotFound);
}

TEST_F(JobStoreTest, InstancesPutListAndEnd) {
  ASSERT_TRUE(store_->CreateJob(MakeJob("j")).ok());
  ASSERT_TRUE(store_->CreateJob(MakeJob("other")).ok());
  InstanceRecord a = MakeInstance("i-a", "j", 10);
  InstanceRecord b = MakeInstance("i-b", "j", 20);
  b.spot = false;
  b.zone = -1;
  ASSERT_TRUE(store_->PutInstance(a).ok());
  ASSERT_TRUE(store_->PutInstance(b).ok());
  ASSERT_TRUE(store_->PutInstance(MakeInstance("i-c", "other", 0)).ok());
  EXPECT_EQ(store_->PutInstance(MakeInstance("i-x", "ghost", 0)).code(), StatusCode::kNotFound);

  auto all = store_->Instances("j", false);
  ASSERT_TRUE(all.ok());
  ASSERT_EQ(all->size(), 2u);
  EXPECT_EQ((*all)[0].id, "i-a");
  EXPECT_EQ((*all)[0].zone_name, "us-east-1b");
  EXPECT_EQ((*all)[0].instance_type, "p3.2xlarge");
  EXPECT_EQ((*all)[0].provider_data, R"({"pid":4242,"metadata_port":18080})");
  EXPECT_TRUE((*all)[0].spot);
  EXPECT_FALSE((*all)[0].ended_s.has_value());
  EXPECT_DOUBLE_EQ((*all)[0].billed_until_s, 10);  // an empty ledger starts at launch
  EXPECT_FALSE((*all)[1].spot);
  EXPECT_EQ((*all)[1].zone, -1);

  ASSERT_TRUE(store_->EndInstance("i-a", 50, "preempted").ok());
  Status twice = store_->EndInstance("i-a", 60, "terminated");
  EXPECT_EQ(twice.code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(twice.message().find("EndInstance"), std::string::npos);
  EXPECT_EQ(store_->EndInstance("i-ghost", 1, "exited").code(), StatusCode::kNotFound);

  auto live = store_->Instances("j", true);
  ASSERT_TRUE(live.ok());
  ASSERT_EQ(live->size(), 1u);
  EXPECT_EQ((*live)[0].id, "i-b");
  all = store_->Instances("j", false);
  ASSERT_TRUE(all.ok());
  ASSERT_EQ(all->size(), 2u);
  EXPECT_DOUBLE_EQ(*(*all)[0].ended_s, 50);
  EXPECT_EQ((*all)[0].end_reason, "preempted");

  // A replace updates the fields but leaves the ledger's position alone.
  ASSERT_TRUE(store_->Bill("i-b", std::vector<LedgerEntry>{Row(20, 30)}).ok());
  InstanceRecord b2 = b;
  b2.provider_data = "i-7";
  b2.billed_until_s = 999;
  ASSERT_TRUE(store_->PutInstance(b2).ok());
  live = store_->Instances("j", true);
  ASSERT_TRUE(live.ok() && live->size() == 1u);
  EXPECT_EQ((*live)[0].provider_data, "i-7");
  EXPECT_DOUBLE_EQ((*live)[0].billed_until_s, 30);
}

class BillTest : public JobStoreTest {
 protected:
  void SetUp() override {
    JobStoreTest::SetUp();
    ASSERT_TRUE(store_->CreateJob(MakeJob("j")).ok());
    ASSERT_TRUE(store_->PutInstance(MakeInstance("i-1", "j", 100)).ok());
  }
  double BilledUntil() {
    auto all = store_->Instances("j", false);
    EXPECT_TRUE(all.ok() && all->size() == 1u);
    return (*all)[0].billed_until_s;
  }
  size_t Rows() {
    auto rows = store_->Ledger("j");
    EXPECT_TRUE(rows.ok());
    return rows->size();
  }
  // Bill must refuse `rows` and leave the ledger as it was.
  void ExpectRefused(std::vector<LedgerEntry> rows, const char* why) {
    double before = BilledUntil();
    size_t n = Rows();
    Status s = store_->Bill("i-1", rows);
    EXPECT_EQ(s.code(), StatusCode::kFailedPrecondition) << why << ": " << s.ToString();
    EXPECT_NE(s.message().find(path_), std::string::npos) << s.message();
    EXPECT_DOUBLE_EQ(BilledUntil(), before) << why;
    EXPECT_EQ(Rows(), n) << why;
  }
};

TEST_F(BillTest, AppendsContiguousRowsAndAdvancesBilledUntil) {
  std::vector<LedgerEntry> rows = {Row(100, 160, 3.6), Row(160, 3700, 1.8)};
  ASSERT_TRUE(store_->Bill("i-1", rows).ok());
  EXPECT_DOUBLE_EQ(BilledUntil(), 3700);
  ASSERT_TRUE(store_->Bill("i-1", std::vector<LedgerEntry>{Row(3700 + 5e-7, 3760)}).ok());
  EXPECT_DOUBLE_EQ(BilledUntil(), 3760);
  ASSERT_TRUE(store_->Bill("i-1", {}).ok());

  auto ledger = store_->Ledger("j");
  ASSERT_TRUE(ledger.ok());
  ASSERT_EQ(ledger->size(), 3u);
  EXPECT_EQ((*ledger)[0].instance_id, "i-1");
  EXPECT_DOUBLE_EQ((*ledger)[0].usd, 60.0 / 3600 * 3.6);
  EXPECT_DOUBLE_EQ((*ledger)[1].usd, 3540.0 / 3600 * 1.8);
  EXPECT_DOUBLE_EQ((*ledger)[2].from_s, 3700);  // snapped onto the previous row
  EXPECT_EQ(store_->Bill("i-ghost", rows).code(), StatusCode::kNotFound);
}

TEST_F(BillTest, BillAllIsOneTransactionAllOrNothing) {
  ASSERT_TRUE(store_->PutInstance(MakeInstance("i-2", "j", 100)).ok());
  std::vector<JobStore::InstanceBill> good = {{"i-1", {Row(100, 160)}}, {"i-2", {Row(100, 200)}}};
  ASSERT_TRUE(store_->BillAll(good).ok());
  EXPECT_EQ(Rows(), 2u);
  // The second bill leaves a gap: neither is written.
  std::vector<JobStore::InstanceBill> bad = {{"i-1", {Row(160, 220)}}, {"i-2", {Row(250, 300)}}};
  EXPECT_EQ(store_->BillAll(bad).code(), StatusCode::kFailedPrecondition);
  EXPECT_EQ(Rows(), 2u);
  auto all = store_->Instances("j", false);
  ASSERT_TRUE(all.ok());
  for (const InstanceRecord& r : *all) {
    EXPECT_DOUBLE_EQ(r.billed_until_s, r.id == "i-1" ? 160 : 200) << r.id;
  }
}

TEST_F(BillTest, RefusesRowsThatBreakContiguity) {
  ASSERT_TRUE(store_->Bill("i-1", std::vector<LedgerEntry>{Row(100, 200)}).ok());
  ExpectRefused({Row(201, 300)}, "gap before the first row");
  ExpectRefused({Row(199, 300)}, "overlap with the ledger");
  ExpectRefused({Row(200, 250), Row(260, 300)}, "gap between rows");
  ExpectRefused({Row(200, 250), Row(240, 300)}, "overlap between rows");
  ExpectRefused({Row(200, 200)}, "to == from");
  ExpectRefused({Row(200, 150)}, "to < from");
  ExpectRefused({Row(200, 250), Row(250, 250)}, "empty second row");
  ASSERT_TRUE(store_->EndInstance("i-1", 260, "preempted").ok());
  ExpectRefused({Row(200, 261)}, "past ended_s");
  ExpectRefused({Row(200, 250), Row(250, 270)}, "second row past ended_s");
  ASSERT_TRUE(store_->Bill("i-1", std::vector<LedgerEntry>{Row(200, 260)}).ok());
  EXPECT_DOUBLE_EQ(BilledUntil(), 260);
  EXPECT_EQ(store_->Bill("i-1", std::vector<LedgerEntry>{Row(260, 261, -1)}).code(),
            StatusCode::kInvalidArgument);
}

TEST_F(BillTest, TotalCostSumsTheJobsInstances) {
  ASSERT_TRUE(store_->PutInstance(MakeInstance("i-2", "j", 0)).ok());
  ASSERT_TRUE(store_->CreateJob(MakeJob("k")).ok());
  ASSERT_TRUE(store_->PutInstance(MakeInstance("i-3", "k", 0)).ok());
  auto zero = store_->TotalCost("j");
  ASSERT_TRUE(zero.ok());
  EXPECT_EQ(*zero, 0);
  ASSERT_TRUE(store_->Bill("i-1", std::vector<LedgerEntry>{Row(100, 3700, 2)}).ok());
  ASSERT_TRUE(
      store_->Bill("i-2", std::vector<LedgerEntry>{Row(0, 1800, 4), Row(1800, 3600, 1)}).ok());
  ASSERT_TRUE(store_->Bill("i-3", std::vector<LedgerEntry>{Row(0, 3600, 100)}).ok());
  auto j = store_->TotalCost("j");
  auto k = store_->TotalCost("k");
  ASSERT_TRUE(j.ok() && k.ok());
  EXPECT_NEAR(*j, 2 + 2 + 0.5, 1e-12);
  EXPECT_NEAR(*k, 100, 1e-12);
  EXPECT_EQ(store_->Ledger("j")->size(), 3u);
}

TEST_F(JobStoreTest, DecisionsEventsAndValues) {
  ASSERT_TRUE(store_->CreateJob(MakeJob("j")).ok());
  DecisionRecord d{3, 1237, 0.5, "spot:1", 0.1, true, "od"};
  ASSERT_TRUE(store_->AppendDecision("j", d).ok());
  ASSERT_TRUE(
      store_->AppendDecision("j", DecisionRecord{1, 1235, 0.1, "idle", 0, false, "spot:0"}).ok());
  Status dup = store_->AppendDecision("j", d);
  EXPECT_EQ(dup.code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(dup.message().find("tick 3"), std::string::npos) << dup.message();
  EXPECT_EQ(store_->AppendDecision("ghost", d).code(), StatusCode::kNotFound);
  auto decisions = store_->Decisions("j");
  ASSERT_TRUE(decisions.ok());
  ASSERT_EQ(decisions->size(), 2u);
  EXPECT_EQ((*decisions)[0].tick, 1);
  const DecisionRecord& got = (*decisions)[1];
  EXPECT_EQ(got.abs_tick, 1237);
  EXPECT_DOUBLE_EQ(got.progress_hours, 0.5);
  EXPECT_EQ(got.current, "spot:1");
  EXPECT_DOUBLE_EQ(got.changeover_left_hours, 0.1);
  EXPECT_TRUE(got.preempted);
  EXPECT_EQ(got.target, "od");

  ASSERT_TRUE(store_->AppendEvent("j", EventRecord{5, 1.7e9, "launch", "i-1", "spot zone 1"}).ok());
  ASSERT_TRUE(store_->AppendEvent("j", EventRecord{9, 1.7e9 + 1, "preempt", "i-1", ""}).ok());
  EXPECT_EQ(store_->AppendEvent("ghost", EventRecord{}).code(), StatusCode::kNotFound);
  auto events = store_->Events("j");
  ASSERT_TRUE(events.ok());
  ASSERT_EQ(events->size(), 2u);
  EXPECT_EQ((*events)[0].kind, "launch");
  EXPECT_EQ((*events)[0].instance_id, "i-1");
  EXPECT_EQ((*events)[0].detail, "spot zone 1");
  EXPECT_DOUBLE_EQ((*events)[1].sim_s, 9);

  auto none = store_->GetValue("j", "progress");
  ASSERT_TRUE(none.ok());
  EXPECT_FALSE(none->has_value());
  ASSERT_TRUE(store_->PutValue("j", "progress", R"({"step":1})").ok());
  ASSERT_TRUE(store_->PutValue("j", "progress", R"({"step":2})").ok());
  ASSERT_TRUE(store_->PutValue("j", "rdzv", std::string("a\0b", 3)).ok());
  EXPECT_EQ(**store_->GetValue("j", "progress"), R"({"step":2})");
  EXPECT_EQ(**store_->GetValue("j", "rdzv"), std::string("a\0b", 3));
  EXPECT_EQ(store_->PutValue("ghost", "k", "v").code(), StatusCode::kNotFound);
}

TEST_F(JobStoreTest, ReopenKeepsEverything) {
  ASSERT_TRUE(store_->CreateJob(MakeJob("j")).ok());
  ASSERT_TRUE(store_->SetJobState("j", JobState::kProvisioning, "launching", 1).ok());
  ASSERT_TRUE(store_->PutInstance(MakeInstance("i-1", "j", 0)).ok());
  ASSERT_TRUE(store_->Bill("i-1", std::vector<LedgerEntry>{Row(0, 3600, 2)}).ok());
  ASSERT_TRUE(store_->EndInstance("i-1", 3600, "terminated").ok());
  ASSERT_TRUE(store_->AppendDecision("j", DecisionRecord{0, 1234, 0, "idle", 0, false, "od"}).ok());
  ASSERT_TRUE(store_->PutValue("j", "progress", "{}").ok());
  Reopen();
  auto job = store_->GetJob("j");
  ASSERT_TRUE(job.ok() && job->has_value());
  EXPECT_EQ((*job)->state, JobState::kProvisioning);
  EXPECT_EQ((*job)->message, "launching");
  auto inst = store_->Instances("j", false);
  ASSERT_TRUE(inst.ok() && inst->size() == 1u);
  EXPECT_DOUBLE_EQ((*inst)[0].billed_until_s, 3600);
  EXPECT_EQ((*inst)[0].end_reason, "terminated");
  EXPECT_NEAR(*store_->TotalCost("j"), 2, 1e-12);
  EXPECT_EQ(store_->Decisions("j")->size(), 1u);
  EXPECT_EQ(store_->Events("j")->size(), 1u);
  EXPECT_EQ(**store_->GetValue("j", "progress"), "{}");
}

// Runs one statement on a second connection and returns the first column.
std::string QueryOther(const std::string& path, const char* sql) {
  sqlite3* db = nullptr;
  EXPECT_EQ(sqlite3_open_v2(path.c_str(), &db, SQLITE_OPEN_READWRITE, nullptr), SQLITE_OK);
  sqlite3_stmt* s = nullptr;
  std::string out;
  if (sqlite3_prepare_v2(db, sql, -1, &s, nullptr) == SQLITE_OK && sqlite3_step(s) == SQLITE_ROW &&
      sqlite3_column_text(s, 0) != nullptr) {
    out = reinterpret_cast<const char*>(sqlite3_column_text(s, 0));
  }
  sqlite3_finalize(s);
  sqlite3_close(db);
  return out;
}

TEST_F(JobStoreTest, UsesWriteAheadLogging) {
  ASSERT_TRUE(store_->CreateJob(MakeJob("j")).ok());
  EXPECT_EQ(QueryOther(path_, "PRAGMA journal_mode"), "wal");
  EXPECT_EQ(QueryOther(path_, "PRAGMA user_version"), "3");
  EXPECT_EQ(QueryOther(path_, "SELECT state FROM jobs WHERE id = 'j'"), "PENDING");
}

TEST_F(JobStoreTest, RefusesAFileThatIsNotADatabase) {
  std::string bogus = (dir_->path() / "notes.db").string();
  std::ofstream(bogus) << std::string(4096, 'x') << "not a database\n";
  auto store = JobStore::Open(bogus);
  ASSERT_FALSE(store.ok());
  EXPECT_EQ(store.status().code(), StatusCode::kDataLoss) << store.status().ToString();
  EXPECT_NE(store.status().message().find(bogus), std::string::npos);

  std::string small = (dir_->path() / "small.db").string();
  std::ofstream(small) << "hello";
  auto small_store = JobStore::Open(small);
  ASSERT_FALSE(small_store.ok());
  EXPECT_EQ(small_store.status().code(), StatusCode::kDataLoss);
}

TEST_F(JobStoreTest, RefusesAnotherSchemaVersion) {
  store_.reset();
  EXPECT_EQ(QueryOther(path_, "PRAGMA user_version = 99"), "");
  auto store = JobStore::Open(path_);
  ASSERT_FALSE(store.ok());
  EXPECT_EQ(store.status().code(), StatusCode::kDataLoss) << store.status().ToString();
  EXPECT_NE(store.status().message().find(path_), std::string::npos);
  EXPECT_NE(store.status().message().find("99"), std::string::npos);
}

TEST_F(JobStoreTest, SamplesAppendAndReadBySeriesPrefix) {
  ASSERT_TRUE(store_->CreateJob(MakeJob("j")).ok());
  std::vector<SamplePoint> points = {
      {"busy/i-2", 60, 0.5}, {"busy/i-1", 60, 0.75}, {"busy/i-1", 0, 1}, {"other", 0, 3}};
  ASSERT_TRUE(store_->AppendSamples("j", points).ok());
  auto busy = store_->Samples("j", "busy/");
  ASSERT_TRUE(busy.ok()) << busy.status().ToString();
  ASSERT_EQ(busy->size(), 3u);  // ordered by series, then time
  EXPECT_EQ((*busy)[0].series, "busy/i-1");
  EXPECT_EQ((*busy)[0].t_s, 0);
  EXPECT_EQ((*busy)[1].value, 0.75);
  EXPECT_EQ((*busy)[2].series, "busy/i-2");
  // A non-finite point writes nothing of the batch; an unknown job is NotFound.
  std::vector<SamplePoint> bad = {{"busy/i-3", 0, 1}, {"busy/i-3", 60, std::nan("")}};
  EXPECT_EQ(store_->AppendSamples("j", bad).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(store_->Samples("j", "busy/i-3")->size(), 0u);
  EXPECT_EQ(store_->AppendSamples("nope", points).code(), StatusCode::kNotFound);
  Reopen();
  EXPECT_EQ(store_->Samples("j", "")->size(), 4u);
}

// Turns the store's file back into the layout of schema version 2 (instances
// with the local provider's pid and metadata_port columns).
void MakeVersionTwo(const std::string& path) {
  EXPECT_EQ(QueryOther(path, "ALTER TABLE instances ADD COLUMN pid INTEGER NOT NULL DEFAULT 0"),
            "");
  EXPECT_EQ(
      QueryOther(path, "ALTER TABLE instances ADD COLUMN metadata_port INTEGER NOT NULL DEFAULT 0"),
      "");
  EXPECT_EQ(QueryOther(path, "ALTER TABLE instances DROP COLUMN provider_data"), "");
  EXPECT_EQ(QueryOther(path, "PRAGMA user_version = 2"), "");
}

// A store written by the first schema (no samples table) is upgraded in place.
TEST_F(JobStoreTest, UpgradesAVersionOneStore) {
  ASSERT_TRUE(store_->CreateJob(MakeJob("j")).ok());
  store_.reset();
  MakeVersionTwo(path_);
  EXPECT_EQ(QueryOther(path_, "DROP TABLE samples"), "");
  EXPECT_EQ(QueryOther(path_, "PRAGMA user_version = 1"), "");
  Reopen();
  EXPECT_EQ(QueryOther(path_, "PRAGMA user_version"), "3");
  auto job = store_->GetJob("j");
  ASSERT_TRUE(job.ok() && job->has_value());
  std::vector<SamplePoint> one = {{"busy/i", 0, 0.5}};
  EXPECT_TRUE(store_->AppendSamples("j", one).ok());
}

// Version 2 kept the local provider's pid and port in columns of their own;
// version 3 moves them into the provider's data, which adoption reads.
TEST_F(JobStoreTest, UpgradesAVersionTwoStoreKeepingTheInstancesData) {
  ASSERT_TRUE(store_->CreateJob(MakeJob("j")).ok());
  ASSERT_TRUE(store_->PutInstance(MakeInstance("i-1", "j", 0)).ok());
  InstanceRecord never = MakeInstance("i-2", "j", 0);
  never.provider_data.clear();  // recorded, never launched
  ASSERT_TRUE(store_->PutInstance(never).ok());
  store_.reset();
  MakeVersionTwo(path_);
  EXPECT_EQ(
      QueryOther(path_, "UPDATE instances SET pid = 4242, metadata_port = 18080 WHERE id = 'i-1'"),
      "");
  Reopen();
  EXPECT_EQ(QueryOther(path_, "PRAGMA user_version"), "3");
  auto all = store_->Instances("j", false);
  ASSERT_TRUE(all.ok()) << all.status().ToString();
  ASSERT_EQ(all->size(), 2u);
  EXPECT_EQ((*all)[0].provider_data, R"({"pid":4242,"metadata_port":18080})");
  EXPECT_EQ((*all)[1].provider_data, "");
}

TEST_F(JobStoreTest, RefusesAForeignDatabase) {
  std::string other = (dir_->path() / "other.db").string();
  sqlite3* db = nullptr;
  ASSERT_EQ(sqlite3_open(other.c_str(), &db), SQLITE_OK);
  ASSERT_EQ(sqlite3_exec(db, "CREATE TABLE t (x)", nullptr, nullptr, nullptr), SQLITE_OK);
  sqlite3_close(db);
  auto store = JobStore::Open(other);
  ASSERT_FALSE(store.ok());
  EXPECT_EQ(store.status().code(), StatusCode::kDataLoss);
}

// A child bills in a loop and is SIGKILLed mid-way: whatever it committed
// must be consistent, instance by instance.
TEST_F(JobStoreTest, SurvivesAWriterKilledMidway) {
  ASSERT_TRUE(store_->CreateJob(MakeJob("j")).ok());
  store_.reset();
  int ready[2];
  ASSERT_EQ(pipe(ready), 0);
  pid_t pid = fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    close(ready[0]);
    auto store = JobStore::Open(path_);
    if (!store.ok()) _exit(2);
    int commits = 0;
    for (int inst = 0; inst < 100000; ++inst) {
      std::string id = "i-" + std::to_string(inst);
      double t = inst * 100.0;
      if (!(*store)->PutInstance(MakeInstance(id, "j", t)).ok()) _exit(3);
      for (int k = 0; k < 10; ++k, t += 3) {
        std::vector<LedgerEntry> rows = {Row(t, t + 1), Row(t + 1, t + 2.5), Row(t + 2.5, t + 3)};
        if (!(*store)->Bill(id, rows).ok()) _exit(4);
        if (++commits == 20) (void)!write(ready[1], "r", 1);
      }
      if (!(*store)->EndInstance(id, t, "preempted").ok()) _exit(5);
    }
    _exit(0);
  }
  close(ready[1]);
  char c = 0;
  ASSERT_EQ(read(ready[0], &c, 1), 1) << "the writer died before committing";
  close(ready[0]);
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  ASSERT_EQ(kill(pid, SIGKILL), 0);
  int wstatus = 0;
  ASSERT_EQ(waitpid(pid, &wstatus, 0), pid);
  ASSERT_TRUE(WIFSIGNALED(wstatus)) << "the writer finished before the kill";

  Reopen();
  auto instances = store_->Instances("j", false);
  auto ledger = store_->Ledger("j");
  ASSERT_TRUE(instances.ok() && ledger.ok());
  ASSERT_FALSE(instances->empty());
  std::map<std::string, std::vector<LedgerEntry>> rows;
  for (const LedgerEntry& l : *ledger) rows[l.instance_id].push_back(l);
  EXPECT_GE(ledger->size(), 60u);
  for (const InstanceRecord& r : *instances) {
    double sum = 0, at = r.launched_s;
    for (const LedgerEntry& l : rows[r.id]) {
      EXPECT_DOUBLE_EQ(l.from_s, at) << r.id;
      sum += l.to_s - l.from_s;
      at = l.to_s;
    }
    EXPECT_NEAR(sum, r.billed_until_s - r.launched_s, 1e-9) << r.id;
    EXPECT_DOUBLE_EQ(at, r.billed_until_s) << r.id;
    EXPECT_EQ(rows[r.id].size() % 3, 0u) << r.id << ": a Bill call was split";
  }
  // The store still takes writes after the crash.
  std::string last = instances->back().id;
  double until = instances->back().billed_until_s;
  if (!instances->back().ended_s) {
    EXPECT_TRUE(store_->Bill(last, std::vector<LedgerEntry>{Row(until, until + 1)}).ok());
  }
}

}  // namespace
}  // namespace spot::control
