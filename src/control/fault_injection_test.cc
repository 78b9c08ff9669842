// The controller under scripted faults, over days of simulated time: the
// fake provider's market preempts the job dozens of times while the provider's
// API fails and crawls, the job store's disk fills up (a real tmpfs, a real
// SQLITE_FULL), the wall clock steps forward hours and back minutes, a crowd
// floods the real HTTP API, and notices race the controller's terminations and
// the workers' departures. After each run the same invariants are checked:
//   - no lost step: the progress the controller saw never went back, and the
//     job reached all its steps (or failed with a reason naming the fault);
//   - no ledger gap: every instance-second the provider billed is in the
//     ledger exactly once, rows contiguous, none negative;
//   - no hang: the run ends within a bound of virtual time (else it is
//     cancelled and fails), and a wall-clock watchdog fails the test binary
//     rather than let a blocked controller hang it;
//   - no storm: one decision per tick of the market, each tick once.
// SPOT_FAULT_TRIALS (`make fault`: 24) sets how many markets (seeds) each
// scenario runs, a quarter of it, at least one; beyond one the markets are a
// week long instead of three days.
#include "cloud/fault_injection.h"

#include <errno.h>
#include <fcntl.h>
#include <fmt/format.h>
#include <gtest/gtest.h>
#include <httplib.h>
#include <sys/mount.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <future>
#include <map>
#include <random>
#include <thread>

#include "cloud/fake_provider.h"
#include "control/api_server.h"
#include "control/controller.h"
#include "control/markov_zone_testing.h"
#include "core/clock.h"
#include "core/temp_dir.h"
#include "policy/registry.h"
#include "sim/spot_sim.h"

namespace spot::control {
namespace {

using cloud::ProviderCall;

constexpr double kGap = testing::kMarkovZoneGap;
constexpr double kInterval = 65;  // three reconcile passes a tick
constexpr double kHour = 3600;
constexpr double kDay = 24 * kHour;
constexpr char kHash[] = "faults";
// A run that has not ended after this much wall time is a blocked controller.
constexpr auto kWallLimit = std::chrono::seconds(300);

int Trials() {
  const char* v = std::getenv("SPOT_FAULT_TRIALS");
  return v ? std::max(1, std::atoi(v) / 4) : 1;
}

// A tmpfs of `mb` megabytes mounted on `dir` (needs CAP_SYS_ADMIN), that a
// filler file fills to the last byte and frees again: the job store's disk.
class SmallDisk {
 public:
  static Result<std::unique_ptr<SmallDisk>> Mount(const std::filesystem::path& dir, int mb) {
    std::filesystem::create_directories(dir);
    const std::string opts = "size=" + std::to_string(mb) + "m";
    if (::mount("tmpfs", dir.c_str(), "tmpfs", 0, opts.c_str()) != 0) {
      return UnavailableError(
          fmt::format("mounting a {} MB tmpfs on {}: {}", mb, dir.string(), std::strerror(errno)));
    }
    return std::unique_ptr<SmallDisk>(new SmallDisk(dir));
  }
  ~SmallDisk() { ::umount2(dir_.c_str(), MNT_DETACH); }

  // Writes the filler until the file system refuses (ENOSPC).
  void Fill() {
    const int fd = ::open(filler().c_str(), O_WRONLY | O_CREAT | O_APPEND, 0600);
    ASSERT_GE(fd, 0) << std::strerror(errno);
    std::vector<char> block(4096, 'x');
    while (::write(fd, block.data(), block.size()) > 0) {
    }
    EXPECT_EQ(errno, ENOSPC);
    ::close(fd);
    ++fills_;
  }
  void Free() { std::filesystem::remove(filler()); }
  int fills() const { return fills_; }

 private:
  explicit SmallDisk(std::filesystem::path dir) : dir_(std::move(dir)) {}
  std::filesystem::path filler() const { return dir_ / "filler"; }
  std::filesystem::path dir_;
  int fills_ = 0;
};

// The floods of the real API server: `threads` clients asking, as fast as
// they can, for the job, its ledger and decisions, the health check, and
// cancelling it with a wrong token, until stopped.
class ApiFlood {
 public:
  ApiFlood(std::string url, std::string job, int threads) {
    for (int k = 0; k < threads; ++k) {
      threads_.emplace_back([this, url, job, k] {
        httplib::Client c(url);
        // Once the controller has created the job (a 404 before is right).
        while (!stop_.load()) {
          httplib::Result r = c.Get("/api/v1/jobs/" + job);
          if (r && r->status == 200) break;
        }
        const std::string paths[] = {"/api/v1/jobs/" + job, "/api/v1/jobs/" + job + "/ledger",
                                     "/api/v1/jobs/" + job + "/decisions", "/api/v1/healthz",
                                     "/api/v1/jobs"};
        for (int i = 0; !stop_.load(); ++i) {
          httplib::Result r = (i + k) % 6 == 5
                                  ? c.Post("/api/v1/jobs/" + job + "/cancel",
                                           {{"Authorization", "Bearer wrong"}}, "", "text/plain")
                                  : c.Get(paths[(i + k) % 6]);
          std::lock_guard<std::mutex> l(mu_);
          ++answers_[r ? r->status : -1];
        }
      });
    }
  }
  ~ApiFlood() { Stop(); }
  void Stop() {
    stop_ = true;
    for (std::thread& t : threads_) t.join();
    threads_.clear();
  }
  std::map<int, int64_t> answers() {
    std::lock_guard<std::mutex> l(mu_);
    return answers_;
  }

 private:
  std::atomic<bool> stop_{false};
  std::vector<std::thread> threads_;
  std::mutex mu_;
  std::map<int, int64_t> answers_;  // HTTP status (-1: no answer) -> count
};

struct Died {};

class FaultInjectionTest : public ::testing::Test {
 protected:
  void SetUp() override {
    policy::RegisterBuiltinPolicies(registry_);
    // The store's fsyncs (synchronous=FULL) would take most of a run's time:
    // keep its files in memory where the system has a tmpfs for that.
    std::error_code ec;
    if (std::filesystem::is_directory("/dev/shm", ec)) ::setenv("TMPDIR", "/dev/shm", 1);
    auto dir = TempDir::Create("spot_fault_injection_test");
    ASSERT_TRUE(dir.ok());
    dir_.emplace(std::move(dir).value());
    OpenStore(dir_->path() / "jobs.db");
    spec_.source = "job.yaml";
    spec_.name = "faults";
    spec_.resources.ondemand_price = 3.06;
    spec_.resources.changeover_hours = 0.2;
    spec_.market.time_compression = 1;
    spec_.market.start_tick = 17;
    spec_.controller.reconcile_interval_s = kInterval;
    spec_.controller.terminate_grace_s = 0;
  }
  void TearDown() override {
    store_.reset();
    disk_.reset();
  }

  // A fresh store at `path` (the job starts now), counters at zero.
  void NextRun(const std::filesystem::path& path) {
    OpenStore(path);
    epoch_ = clock_.NowUnixS();
    overran_ = false;
    max_step_ = steps_back_ = 0;
  }
  void NextRun(int trial) { NextRun(dir_->path() / fmt::format("jobs-{}.db", trial)); }

  void OpenStore(const std::filesystem::path& path) {
    store_.reset();
    auto store = JobStore::Open(path.string());
    ASSERT_TRUE(store.ok()) << store.status().ToString();
    store_ = std::move(store).value();
  }

  // A market of `days` (the job needs about half of it on a gang of `nodes`).
  void Market(uint64_t seed, double days, int nodes) {
    const auto ticks = static_cast<int64_t>(days * kDay / kGap) + 40;
    traces_ = {testing::MarkovZone(seed, "us-east-1a", ticks, 30, 6, nodes),
               testing::MarkovZone(seed + 1, "us-east-1b", ticks, 20, 10, nodes)};
    zones_.clear();
    for (const market::Trace& t : traces_) zones_.push_back(&t);
    spec_.resources.nodes = nodes;
    spec_.compute_hours = days * 24 * 0.5;
    spec_.deadline_hours = days * 24 * 0.75;
    world_.reset();
  }

  cloud::FakeProvider& World(double notice_s = 0) {
    if (!world_) {
      world_ = std::make_unique<cloud::FakeProvider>(
          cloud::FakeProviderOptions{.zones = zones_,
                                     .job = policy::ToFleetJob(ToPolicyJob(spec_)),
                                     .start_tick = spec_.market.start_tick,
                                     .notice_s = notice_s});
    }
    return *world_;
  }

  // Runs the job to its end on `provider` and `clock`, cancelling it when
  // its virtual time passes `bound_s` (recorded in overran_) and failing the
  // whole binary when its wall time passes kWallLimit.
  Result<JobOutcome> Run(cloud::Provider* provider, Clock* clock, double bound_s) {
    auto p = registry_.Create("up");
    EXPECT_TRUE(p.ok());
    ControllerDeps d{.store = store_.get(),
                     .provider = provider,
                     .zones = zones_,
                     .policy = std::move(p).value(),
                     .clock = clock,
                     .new_job_epoch_unix_s = epoch_};
    Controller* self = nullptr;
    d.read_progress = [this, clock, bound_s, &self] {
      const double now = clock->NowUnixS() - epoch_;
      if (now > bound_s && !overran_) {
        overran_ = true;
        (void)self->RequestCancel();
      }
      const ProgressReport r = World().Progress(now);
      if (now >= cancel_at_s_ && r.world > 0) (void)self->RequestCancel();
      if (now >= die_at_s_ && r.world > 0) {
        die_at_s_ = 1e18;
        throw Died{};  // out of the controller, as a kill -9 between two passes
      }
      if (r.step < max_step_) steps_back_ = std::max(steps_back_, max_step_ - r.step);
      max_step_ = std::max(max_step_, r.step);
      return KnownProgress(r);
    };
    Controller c(spec_, std::move(d));
    self = &c;
    auto run = std::async(std::launch::async, [&c] { return c.Run(kHash); });
    if (run.wait_for(kWallLimit) != std::future_status::ready) {
      std::fprintf(stderr, "watchdog: the controller has not finished after %lld s of wall time\n",
                   static_cast<long long>(kWallLimit.count()));
      std::fflush(stderr);
      std::_Exit(1);
    }
    return run.get();
  }

  // How a run must end.
  struct Expect {
    JobState state = JobState::kSucceeded;
    std::string reason;  // FAILED: a part of the message
    // The ledger may pass the provider's end of an instance by this much
    // (a reclaim the controller learned late: it billed until it knew).
    double late_news_s = 0;
  };

  // The invariants of every scenario (the file's comment).
  void CheckInvariants(const Result<JobOutcome>& out, const Expect& want) {
    ASSERT_TRUE(out.ok()) << out.status().ToString();
    EXPECT_FALSE(overran_) << "the run passed its bound of virtual time";
    EXPECT_EQ(out->state, want.state) << out->message;
    if (!want.reason.empty()) {
      EXPECT_NE(out->message.find(want.reason), std::string::npos) << out->message;
    }
    // No lost step.
    EXPECT_EQ(steps_back_, 0) << "the training's progress went back";
    if (want.state == JobState::kSucceeded) {
      EXPECT_EQ(max_step_, 1000000);
    }
    auto decisions = store_->Decisions(spec_.name);
    ASSERT_TRUE(decisions.ok());
    double progress = 0;
    for (size_t t = 0; t < decisions->size(); ++t) {
      const DecisionRecord& d = (*decisions)[t];
      ASSERT_EQ(d.tick, static_cast<int64_t>(t)) << "a tick missing or decided twice";
      EXPECT_GE(d.progress_hours, progress - 1e-9) << "tick " << t;
      progress = d.progress_hours;
    }
    // No storm: one decision per tick the job lasted (to its last event).
    auto events = store_->Events(spec_.name);
    ASSERT_TRUE(events.ok());
    double end_s = 0;
    for (const EventRecord& e : *events) end_s = std::max(end_s, e.sim_s);
    EXPECT_LE(static_cast<double>(decisions->size()), end_s / kGap + 2);
    // The job's time never went back: instances were launched in the order
    // they were recorded.
    auto all = store_->Instances(spec_.name, false);
    ASSERT_TRUE(all.ok());
    for (size_t k = 1; k < all->size(); ++k) {
      EXPECT_GE((*all)[k].launched_s, (*all)[k - 1].launched_s)
          << (*all)[k].id << " launched before " << (*all)[k - 1].id;
    }
    CheckLedger(want.late_news_s);
  }

  // Every instance-second the provider billed is in the ledger once.
  void CheckLedger(double late_news_s) {
    auto all = store_->Instances(spec_.name, false);
    auto ledger = store_->Ledger(spec_.name);
    ASSERT_TRUE(all.ok() && ledger.ok());
    std::map<std::string, const InstanceRecord*> records;
    for (const InstanceRecord& r : *all) records[r.id] = &r;
    std::map<std::string, std::vector<const LedgerEntry*>> rows;
    for (const LedgerEntry& e : *ledger) {
      ASSERT_GT(e.to_s, e.from_s) << e.instance_id << ": a row of no or negative length";
      ASSERT_GE(e.usd, 0) << e.instance_id;
      rows[e.instance_id].push_back(&e);
    }
    int billed = 0;
    for (const cloud::InstanceView& v : world_->List()) {
      ASSERT_NE(v.state, cloud::InstanceState::kRunning) << v.spec.id << " left running";
      ASSERT_TRUE(records.count(v.spec.id)) << v.spec.id << " launched but not recorded";
      const InstanceRecord& r = *records[v.spec.id];
      ASSERT_TRUE(r.ended_s.has_value()) << r.id;
      double at = v.launched_s;
      for (const LedgerEntry* e : rows[r.id]) {
        ASSERT_NEAR(e->from_s, at, 1e-6) << r.id << ": a gap or an overlap";
        at = e->to_s;
      }
      EXPECT_GE(at, v.ended_s - 1e-6) << r.id << ": billed by the provider, not in the ledger";
      EXPECT_LE(at, v.ended_s + late_news_s + 1e-6) << r.id << ": billed past its end";
      EXPECT_NEAR(at, *r.ended_s, 1e-6) << r.id;
      ++billed;
      rows.erase(r.id);
    }
    for (const auto& [iid, r] : rows) ADD_FAILURE() << iid << ": ledger rows, never launched";
    EXPECT_GT(billed, 0);
  }

  int EventCount(const std::string& kind) {
    auto events = store_->Events(spec_.name);
    EXPECT_TRUE(events.ok());
    int n = 0;
    for (const EventRecord& e : *events) n += e.kind == kind ? 1 : 0;
    return n;
  }

  void Report(const char* scenario, uint64_t seed, const JobOutcome& out) {
    std::printf(
        "[ faults   ] %s (seed %llu): %s after %.1f simulated hours, %d preemptions, %d notices, "
        "%d launches, %d decisions, $%.2f\n",
        scenario, static_cast<unsigned long long>(seed),
        std::string(JobStateName(out.state)).c_str(), out.sim_hours, out.preemptions, out.notices,
        out.launches, out.decisions, out.cost_usd);
  }

  double Days() const { return Trials() > 1 ? 7 : 3; }

  policy::PolicyRegistry registry_;
  std::optional<TempDir> dir_;
  std::unique_ptr<SmallDisk> disk_;
  std::unique_ptr<JobStore> store_;
  std::vector<market::Trace> traces_;
  std::vector<const market::Trace*> zones_;
  RunSpec spec_;
  ManualClock clock_{1.7e9};
  double epoch_ = 1.7e9;
  std::unique_ptr<cloud::FakeProvider> world_;
  bool overran_ = false;
  double die_at_s_ = 1e18;     // the controller dies from this simulated time, on a fleet that runs
  double cancel_at_s_ = 1e18;  // the API's cancel from this simulated time, on a fleet that runs
  int64_t max_step_ = 0;
  int64_t steps_back_ = 0;
};

TEST_F(FaultInjectionTest, ProviderErrorsAndSlownessForStretches) {
  for (int trial = 0; trial < Trials(); ++trial) {
    const uint64_t seed = 100 + trial;
    NextRun(trial);
    Market(seed, Days(), 2);
    const Status capacity = UnavailableError("InsufficientInstanceCapacity: no capacity");
    const Status throttled = UnavailableError("RequestLimitExceeded: request limit exceeded");
    const double d = Days() / 3;  // a third of the market
    cloud::FaultyProvider faulty({
        .inner = &World(),
        .clock = &clock_,
        .faults = {{ProviderCall::kLaunch, 0.3 * d * kDay, 2 * kHour, capacity},
                   {ProviderCall::kTerminate, 0.6 * d * kDay, 3 * kHour, throttled},
                   {ProviderCall::kPoll, 0.9 * d * kDay, 0.5 * kHour, throttled},
                   {ProviderCall::kList, 0.9 * d * kDay, 0.5 * kHour, throttled},
                   {ProviderCall::kLaunch, 1.2 * d * kDay, 6 * kHour, Status::Ok(), 300},
                   {ProviderCall::kTerminate, 1.2 * d * kDay, 6 * kHour, Status::Ok(), 300},
                   {ProviderCall::kPoll, 1.5 * d * kDay, 4 * kHour, Status::Ok(), 120},
                   {ProviderCall::kLaunch, 1.8 * d * kDay, 1 * kHour, throttled, 60}},
    });
    auto out = Run(&faulty, &clock_, spec_.deadline_hours * kHour + 12 * kHour);
    // A reclaim seen late (the describe outage) is billed until it was seen.
    CheckInvariants(out, {.late_news_s = 0.5 * kHour + kInterval});
    EXPECT_GT(faulty.counts().failed_calls, 0);
    EXPECT_GT(faulty.counts().slow_calls, 0);
    // The half-hour describe outage, shorter than controller.provider_outage_s,
    // was waited out and recorded once.
    EXPECT_EQ(EventCount("provider-outage"), 1);
    if (out.ok()) Report("provider errors", seed, *out);
  }
}

// The provider cannot see the fleet (its describe API down) from hour 10 on,
// longer than controller.provider_outage_s (2 hours): the job fails then,
// naming the provider's error, and its fleet (terminations still work) is
// terminated and billed until then.
TEST_F(FaultInjectionTest, AProviderOutageLongerThanItsLimitFailsTheJobWithTheProvidersError) {
  Market(260, Days(), 2);
  spec_.controller.provider_outage_s = 2 * kHour;
  cloud::FaultyProvider faulty({
      .inner = &World(),
      .faults = {{ProviderCall::kPoll, 10 * kHour, 30 * kDay,
                  UnavailableError("RequestLimitExceeded: describe throttled")}},
  });
  auto out = Run(&faulty, &clock_, spec_.deadline_hours * kHour);
  CheckInvariants(out, {.state = JobState::kFailed,
                        .reason = "RequestLimitExceeded: describe throttled",
                        .late_news_s = 2 * kHour + 2 * kInterval});
  ASSERT_TRUE(out.ok());
  EXPECT_NE(out->message.find("controller.provider_outage_s"), std::string::npos) << out->message;
  // It failed at the limit: 10 hours, then 2 of outage (a reconcile pass late at most).
  EXPECT_GE(out->sim_hours, 12 - 1e-9);
  EXPECT_LE(out->sim_hours, 12 + 2 * kInterval / kHour);
  EXPECT_EQ(EventCount("provider-outage"), 0);  // never seen again
}

// Cancelled while the provider refuses every termination for 45 minutes: the
// controller asks again (billing the fleet meanwhile) and ends the job once
// the fleet is gone.
TEST_F(FaultInjectionTest, ACancelWhileTerminationsAreRefusedEndsOnceTheFleetIsGone) {
  Market(250, Days(), 2);
  cancel_at_s_ = 12 * kHour;
  cloud::FaultyProvider faulty({
      .inner = &World(),
      .faults = {{ProviderCall::kTerminate, 11.9 * kHour, 0.75 * kHour,
                  UnavailableError("RequestLimitExceeded: request limit exceeded")}},
  });
  auto out = Run(&faulty, &clock_, spec_.deadline_hours * kHour);
  CheckInvariants(out, {.state = JobState::kCancelled, .reason = "cancelled"});
  EXPECT_GE(EventCount("terminate-failed"), 1);
  ASSERT_TRUE(out.ok());
  EXPECT_GE(out->sim_hours, 12.65 - kInterval / kHour) << "billed until the fleet was terminated";
  if (out.ok()) Report("cancel while terminations are refused", 250, *out);
}

// The controller dies with a fleet running; the one started in its place
// finds the provider refusing to adopt for an hour: it asks again rather
// than take running instances for lost (which would leave them running,
// billed and unwatched).
TEST_F(FaultInjectionTest, AControllerRestartedWhileAdoptionsAreRefusedTakesItsFleetBack) {
  Market(800, Days(), 2);
  die_at_s_ = 20 * kHour;
  cloud::FaultyProvider faulty({
      .inner = &World(),
      .faults = {{ProviderCall::kAdopt, 20 * kHour, 1 * kHour,
                  UnavailableError("RequestLimitExceeded: request limit exceeded")}},
  });
  const double bound = spec_.deadline_hours * kHour + 12 * kHour;
  EXPECT_THROW((void)Run(&faulty, &clock_, bound), Died);
  clock_.Advance(3 * kInterval);  // the world goes on while no controller watches
  auto out = Run(&faulty, &clock_, bound);
  // An instance reclaimed while adoption was refused is billed until the
  // controller could see it was gone.
  CheckInvariants(out, {.late_news_s = 1 * kHour + kGap});
  ASSERT_TRUE(out.ok());
  EXPECT_TRUE(out->resumed);
  EXPECT_GT(faulty.counts().failed_calls, 0);
  if (out.ok()) Report("restart while adoptions are refused", 800, *out);
}

TEST_F(FaultInjectionTest, LaunchesThatNeverSucceedFailTheJobWithTheCloudsReason) {
  Market(200, Days(), 2);
  cloud::FaultyProvider faulty({
      .inner = &World(),
      .faults = {{ProviderCall::kLaunch, 0.5 * kDay, 1e9,
                  UnavailableError("InsufficientInstanceCapacity: no capacity")}},
  });
  auto out = Run(&faulty, &clock_, spec_.deadline_hours * kHour + 24 * kHour);
  CheckInvariants(out, {.state = JobState::kFailed, .reason = "InsufficientInstanceCapacity"});
  if (out.ok()) Report("launches never succeed", 200, *out);
}

TEST_F(FaultInjectionTest, AFullDiskStopsNoLedgerRowAndTheJobGoesOnWhenFreed) {
  auto disk = SmallDisk::Mount(dir_->path() / "disk", 8);
  if (!disk.ok()) GTEST_SKIP() << disk.status().ToString();
  disk_ = std::move(disk).value();
  for (int trial = 0; trial < Trials(); ++trial) {
    const uint64_t seed = 300 + trial;
    NextRun(dir_->path() / "disk" / fmt::format("jobs-{}.db", trial));
    Market(seed, Days(), 2);
    cloud::ScriptedClock clock(&clock_);
    // While the write-ahead log still grows (once it has reached its 1000
    // pages SQLite reuses its space, and a full disk goes unnoticed until a
    // checkpoint needs more).
    clock.At(1 * kHour, [this] { disk_->Fill(); });
    clock.At(1.75 * kHour, [this] { disk_->Free(); });
    clock.At(5 * kHour, [this] { disk_->Fill(); });
    clock.At(5 * kHour + 20 * 60, [this] { disk_->Free(); });
    auto out = Run(&World(), &clock, spec_.deadline_hours * kHour + 12 * kHour);
    // A reclaim that fell while the controller waited for the disk is billed
    // until it could write again.
    CheckInvariants(out, {.late_news_s = 0.75 * kHour + kInterval});
    EXPECT_EQ(disk_->fills(), 2 * (trial + 1));
    EXPECT_GE(EventCount("store-unavailable"), 1) << "the wait for the disk is not on record";
    if (out.ok()) Report("full disk", seed, *out);
  }
}

// A disk that stays full: the controller gives up after its store retry
// limit with the store's error (it cannot record an end), and leaves the
// instances running for a controller started again to adopt.
TEST_F(FaultInjectionTest, ADiskThatStaysFullStopsTheControllerWithTheStoresError) {
  auto disk = SmallDisk::Mount(dir_->path() / "disk", 8);
  if (!disk.ok()) GTEST_SKIP() << disk.status().ToString();
  disk_ = std::move(disk).value();
  NextRun(dir_->path() / "disk" / "jobs.db");
  Market(700, Days(), 2);
  cloud::ScriptedClock clock(&clock_);
  clock.At(1 * kHour, [this] { disk_->Fill(); });
  auto out = Run(&World(), &clock, spec_.deadline_hours * kHour);
  ASSERT_FALSE(out.ok());
  EXPECT_EQ(out.status().code(), StatusCode::kUnavailable);
  EXPECT_NE(out.status().message().find("refused writes for 3600 s"), std::string::npos)
      << out.status().ToString();
  EXPECT_NE(out.status().message().find("full"), std::string::npos) << out.status().ToString();
  EXPECT_FALSE(overran_);
  // Nothing recorded was lost: every instance the store knows as ended is
  // billed to its end, and the live ones to where the ledger stopped.
  auto all = store_->Instances(spec_.name, false);
  auto ledger = store_->Ledger(spec_.name);
  ASSERT_TRUE(all.ok() && ledger.ok());
  for (const InstanceRecord& r : *all) {
    double at = r.launched_s;
    for (const LedgerEntry& e : *ledger) {
      if (e.instance_id != r.id) continue;
      ASSERT_NEAR(e.from_s, at, 1e-6) << r.id;
      at = e.to_s;
    }
    EXPECT_NEAR(at, r.ended_s.value_or(r.billed_until_s), 1e-6) << r.id;
  }
}

TEST_F(FaultInjectionTest, WallClockStepsForwardHoursAndBackMinutes) {
  for (int trial = 0; trial < Trials(); ++trial) {
    const uint64_t seed = 400 + trial;
    NextRun(trial);
    Market(seed, Days(), 2);
    cloud::ScriptedClock clock(&clock_);
    clock.StepWallAt(0.3 * kDay, 3 * kHour);
    // Back 5 minutes every 50 minutes for a day (an NTP that keeps
    // correcting a fast clock), once twice within 30 s.
    for (double at = 0.4 * kDay; at < 1.4 * kDay; at += 50 * 60) clock.StepWallAt(at, -5 * 60);
    clock.StepWallAt(1.4 * kDay + 30, -2 * 60);
    clock.StepWallAt(1.7 * kDay, 40 * 60);
    auto out = Run(&World(), &clock, spec_.deadline_hours * kHour + 12 * kHour);
    CheckInvariants(out, {});
    if (out.ok()) Report("clock steps", seed, *out);
  }
}

TEST_F(FaultInjectionTest, AnApiFloodChangesNoDecisionAndNoLedgerRow) {
  Market(500, Days(), 2);
  ApiOptions options;
  options.token_path = (dir_->path() / "api.token").string();
  std::atomic<int> cancels{0};
  auto server = ApiServer::Start(store_.get(), options, [&](const std::string&) {
    ++cancels;
    return Status::Ok();
  });
  ASSERT_TRUE(server.ok()) << server.status().ToString();
  std::optional<ApiFlood> flood;
  flood.emplace((*server)->url(), spec_.name, 6);
  auto out = Run(&World(), &clock_, spec_.deadline_hours * kHour + 12 * kHour);
  const std::map<int, int64_t> answers = flood->answers();
  flood.reset();
  CheckInvariants(out, {});
  // Decision for decision what SpotSim decides on the same market.
  auto p = registry_.Create("up");
  ASSERT_TRUE(p.ok());
  const sim::RunResult sim = sim::SimulateJob(**p, zones_, spec_.market.start_tick,
                                              ToPolicyJob(spec_), {.record_timeline = true});
  auto decisions = store_->Decisions(spec_.name);
  ASSERT_TRUE(decisions.ok());
  ASSERT_EQ(decisions->size(), sim.timeline.size());
  for (size_t t = 0; t < sim.timeline.size(); ++t) {
    ASSERT_EQ((*decisions)[t].target, sim.timeline[t].fleet) << "tick " << t;
  }
  EXPECT_EQ(out->preemptions, sim.preemptions);
  EXPECT_EQ(cancels.load(), 0) << "a cancel with a wrong token got through";
  int64_t total = 0;
  for (const auto& [status, n] : answers) {
    EXPECT_TRUE(status == 200 || status == 403) << n << " answers with status " << status;
    total += n;
  }
  EXPECT_GT(answers.count(403) ? answers.at(403) : 0, 0);
  std::printf("[ faults   ] api flood: %lld requests answered during the run\n",
              static_cast<long long>(total));
  if (out.ok()) Report("api flood", 500, *out);
}

TEST_F(FaultInjectionTest, NoticesRaceTerminationsAndDepartures) {
  for (int trial = 0; trial < Trials(); ++trial) {
    const uint64_t seed = 600 + trial;
    NextRun(trial);
    Market(seed, Days(), 4);
    cloud::FaultyProvider faulty({
        .inner = &World(/*notice_s=*/120),
        .notice_on_terminate = {{0, 1e9}},
        .depart_on_notice = {{0, 1e9}},
        .depart_after_s = 0,
        .exit_before_notice = true,
    });
    auto out = Run(&faulty, &clock_, spec_.deadline_hours * kHour + 12 * kHour);
    CheckInvariants(out, {});
    EXPECT_GT(faulty.counts().raced_notices, 0);
    EXPECT_GT(faulty.counts().departures, 0);
    // A notice for an instance the controller had already given back is
    // recorded, not counted as an interruption.
    // (Those raced at the job's end are never polled.)
    EXPECT_GT(EventCount("notice-after-end"), 0);
    EXPECT_LE(EventCount("notice-after-end"), faulty.counts().raced_notices);
    EXPECT_EQ(out->notices, EventCount("notice"));
    EXPECT_GE(faulty.counts().most_notices_in_a_poll, 4) << "a whole gang noticed at once";
    // A worker that left on its notice is no failure: no instance was given
    // back for a worker's exit.
    auto events = store_->Events(spec_.name);
    ASSERT_TRUE(events.ok());
    for (const EventRecord& e : *events) {
      if (e.kind == "terminate") {
        EXPECT_EQ(e.detail.find("worker"), std::string::npos) << e.detail;
      }
    }
    if (out.ok()) Report("notices racing departures", seed, *out);
  }
}

}  // namespace
}  // namespace spot::control
