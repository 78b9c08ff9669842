// The controller tests' world (controller_test.cc, controller_restart_test.cc):
// a real LocalProvider whose instances are sleeping processes, a real
// JobStore, a registered policy, and a stand-in for the training (a thread
// that writes rank 0's progress file, advancing only while the controller
// holds a full gang). One simulated hour passes per wall second, so a job of
// a few hours takes a few seconds.
#pragma once

#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <functional>
#include <future>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "cloud/local_provider.h"
#include "control/controller.h"
#include "control/crashing_provider_testing.h"
#include "core/process.h"
#include "core/temp_dir.h"
#include "policy/registry.h"
#include "sim/spot_sim.h"

namespace spot::control::controller_testing {

namespace fs = std::filesystem;
using std::chrono::milliseconds;
using std::chrono::steady_clock;

constexpr double kGap = 60;            // simulated seconds per tick
constexpr double kCompression = 3600;  // one simulated hour per wall second
constexpr int kNodes = 2;
constexpr double kOnDemandPrice = 3.0;
constexpr int64_t kTotalSteps = 1000;
constexpr char kHash[] = "0123456789abcdef";

// The local provider's process of an instance (0 before it was launched).
inline int64_t Pid(const std::string& provider_data) {
  auto d = cloud::DecodeLocalInstanceData(provider_data);
  return d.ok() ? d->pid : 0;
}

inline double WallNow() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

template <typename Pred>
inline bool WaitFor(Pred pred, milliseconds timeout = milliseconds(20000)) {
  auto deadline = steady_clock::now() + timeout;
  while (!pred()) {
    if (steady_clock::now() > deadline) return false;
    std::this_thread::sleep_for(milliseconds(2));
  }
  return true;
}

// A zone of `ticks` ticks with a gang-sized capacity (4) except in `down`
// ([begin, end) tick ranges, capacity `down_capacity`: 1 takes one of a gang
// of 2, the newer, and the controller gives the other back), and a price of
// `price` + a small wobble (so that billing has to follow the series).
inline market::Trace Zone(const std::string& name, double price,
                          std::vector<std::pair<int, int>> down, int ticks = 300,
                          int down_capacity = 1) {
  market::Trace t;
  t.pool = {.cloud = "aws", .region = "us-east-1", .zone = name, .instance_type = "p3.2xlarge"};
  t.name = name;
  t.gap_seconds = kGap;
  t.available.assign(ticks, 4);
  for (auto [b, e] : down) {
    for (int i = b; i < e; ++i) t.available[i] = down_capacity;
  }
  for (int i = 0; i < ticks; ++i) t.price.push_back(price + 0.01 * (i % 5));
  return t;
}

// Stands in for the training: while the controller holds a full gang (its live
// instances in the store) of ready instances (each ready its changeover after
// its launch), work accrues one simulated hour per hour, as SpotSim models it. Writes
// the progress file as rank 0 does, until the work is done.
class FakeTraining {
 public:
  FakeTraining(JobStore* store, const RunSpec& spec, std::string path)
      : store_(store), spec_(spec), path_(std::move(path)) {
    thread_ = std::thread([this] { Loop(); });
  }
  ~FakeTraining() {
    stop_ = true;
    thread_.join();
  }

 private:
  void Loop() {
    const double total = spec_.compute_hours * 3600;
    const double changeover = spec_.resources.changeover_hours * 3600;
    double work = 0;
    double last = -1;
    while (!stop_) {
      std::this_thread::sleep_for(milliseconds(2));
      auto job = store_->GetJob(spec_.name);
      auto live = store_->Instances(spec_.name, true);
      if (!job.ok() || !job->has_value() || !live.ok()) continue;
      const double now = (WallNow() - (*job)->wall_epoch_unix_s) * (*job)->time_compression;
      // The time since which a full gang has been ready: the kNodes-th
      // earliest ready instance's (a gang started beside a running one, make
      // before break, leaves the running one working meanwhile).
      std::vector<double> ready;
      for (const InstanceRecord& r : *live) ready.push_back(r.launched_s + changeover);
      std::sort(ready.begin(), ready.end());
      const int world = static_cast<int>(live->size());
      if (last >= 0 && world >= kNodes && now > ready[kNodes - 1]) {
        work += now - std::max(last, ready[kNodes - 1]);
      }
      last = now;
      const bool done = work >= total;
      nlohmann::json j = {{"step", static_cast<int64_t>(std::min(1.0, work / total) * kTotalSteps)},
                          {"total_steps", kTotalSteps},
                          {"world", world},
                          {"done", done}};
      {
        std::ofstream out(path_ + ".tmp", std::ios::trunc);
        out << j.dump();
      }
      fs::rename(path_ + ".tmp", path_);
      if (done) break;
    }
  }

  JobStore* store_;
  const RunSpec spec_;
  const std::string path_;
  std::atomic<bool> stop_{false};
  std::thread thread_;
};

// Crashes the controller (crashing_provider_testing.h) once armed.
using testing::CrashingProvider;
using testing::SimulatedCrash;

class ControllerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    policy::RegisterBuiltinPolicies(registry_);
    auto dir = TempDir::Create("spot_controller_test");
    ASSERT_TRUE(dir.ok()) << dir.status().ToString();
    dir_.emplace(std::move(dir).value());
    auto store = JobStore::Open((dir_->path() / "jobs.db").string());
    ASSERT_TRUE(store.ok()) << store.status().ToString();
    store_ = std::move(store).value();
    progress_path_ = (dir_->path() / "progress.json").string();
  }

  void TearDown() override {
    training_.reset();
    providers_.clear();
    // Kill and reap every instance process still running (all are our children).
    auto all = store_->Instances(spec_.name, false);
    if (!all.ok()) return;
    for (const InstanceRecord& r : *all) {
      int64_t pid = Pid(r.provider_data);
      // Only our running child: a reaped pid may be someone else's by now.
      if (pid > 0 && ::waitpid(static_cast<pid_t>(pid), nullptr, WNOHANG) == 0) {
        (void)StopProcess(pid, 0);
      }
    }
  }

  void SetMarket(std::vector<market::Trace> traces) {
    traces_ = std::move(traces);
    zones_.clear();
    for (const market::Trace& t : traces_) zones_.push_back(&t);
  }

  // A job of `compute_hours` on a gang of 2 under `policy`.
  RunSpec Spec(double compute_hours, double deadline_hours, const std::string& policy = "greedy") {
    RunSpec s;
    s.source = "job.yaml";
    s.name = "job";
    s.policy.name = policy;
    s.compute_hours = compute_hours;
    s.deadline_hours = deadline_hours;
    s.resources.nodes = kNodes;
    s.resources.ondemand_price = kOnDemandPrice;
    s.resources.changeover_hours = 0.05;
    s.market.time_compression = kCompression;
    s.market.notice_seconds = 120;
    s.controller.reconcile_interval_s = 0.01;
    s.controller.terminate_grace_s = 2;
    return s;
  }

  // Instances sleep. Their command line names the instance (the executable is
  // a link to /bin/sleep in its local disk), as a worker's `--instance-id`
  // does: that is how a restarted provider recognizes them.
  // `command`, when set, is each launch's command line instead (its argument:
  // the launch's number, from 0).
  cloud::LocalProvider& NewProvider(double wall_epoch, bool failing_worker = false,
                                    std::function<std::vector<std::string>(int)> command = {}) {
    cloud::LocalProviderOptions o{.zones = zones_,
                                  .start_tick = spec_.market.start_tick,
                                  .notice_s = spec_.market.notice_seconds,
                                  .wall_epoch_unix_s = wall_epoch,
                                  .time_compression = spec_.market.time_compression,
                                  .instances_dir = (dir_->path() / "instances").string(),
                                  .terminate_grace_wall_s = spec_.controller.terminate_grace_s};
    o.command = [failing_worker, command, launches = std::make_shared<int>(0)](
                    const cloud::InstanceSpec&, const std::string& local_dir) {
      if (command) return command((*launches)++);
      if (failing_worker) return std::vector<std::string>{"/bin/false"};
      const std::string exe = local_dir + "/sleep";
      std::error_code ec;
      fs::create_symlink("/bin/sleep", exe, ec);
      return std::vector<std::string>{exe, "600"};
    };
    providers_.push_back(std::make_unique<cloud::LocalProvider>(std::move(o)));
    return *providers_.back();
  }

  ControllerDeps Deps(cloud::Provider* provider, cloud::LocalProvider* local) {
    auto policy = registry_.Create(spec_.policy);
    EXPECT_TRUE(policy.ok()) << policy.status().ToString();
    ControllerDeps d;
    d.store = store_.get();
    d.provider = provider;
    d.zones = zones_;
    d.policy = std::move(policy).value();
    d.progress_path = progress_path_;
    return d;
  }

  void StartTraining() {
    training_ = std::make_unique<FakeTraining>(store_.get(), spec_, progress_path_);
  }

  // Runs the controller to its end; cancels it (and fails) if it hangs.
  static Result<JobOutcome> RunToEnd(Controller& c, double timeout_s = 30) {
    auto run = std::async(std::launch::async, [&c] { return c.Run(kHash); });
    if (run.wait_for(std::chrono::duration<double>(timeout_s)) != std::future_status::ready) {
      ADD_FAILURE() << "the controller did not finish in " << timeout_s << " s; cancelling";
      (void)c.RequestCancel();
    }
    return run.get();
  }

  // A fresh job: provider, training, controller, run to the end.
  JobOutcome RunJob(bool training = true, bool failing_worker = false) {
    cloud::LocalProvider& p = NewProvider(WallNow(), failing_worker);
    if (training) StartTraining();
    Controller c(spec_, Deps(&p, &p));
    auto out = RunToEnd(c);
    EXPECT_TRUE(out.ok()) << out.status().ToString();
    return out.ok() ? *out : JobOutcome{};
  }

  // Runs a first controller until `crash_when` holds, then stops it abruptly
  // between two reconcile passes: its provider throws from Poll once armed
  // (see CrashingProvider), and the controller and its provider are destroyed
  // without terminating anything, as a kill -9 would leave them. The job,
  // then, as the store has it.
  std::optional<JobRecord> CrashFirstController(const std::function<bool()>& crash_when) {
    {
      cloud::LocalProvider& a = NewProvider(WallNow());
      CrashingProvider crashing(&a);
      Controller first(spec_, Deps(&crashing, &a));
      auto run = std::async(std::launch::async, [&] {
        try {
          (void)first.Run(kHash);
        } catch (const SimulatedCrash&) {
          return true;
        }
        return false;
      });
      EXPECT_TRUE(WaitFor(crash_when));
      crashing.Arm();
      EXPECT_TRUE(run.get()) << "the first controller ended instead of crashing";
    }
    providers_.clear();  // its metadata endpoints go with it; the processes stay
    auto job = store_->GetJob(spec_.name);
    EXPECT_TRUE(job.ok() && job->has_value());
    if (!job.ok() || !job->has_value()) return std::nullopt;
    EXPECT_FALSE(IsTerminal((*job)->state));
    return **job;
  }

  // Whether the job has made `decisions` decisions and its whole gang runs
  // (every live instance's process started): when to crash a first controller.
  bool GangRunsAfter(size_t decisions) {
    auto d = store_->Decisions(spec_.name);
    auto live = store_->Instances(spec_.name, true);
    if (!d.ok() || d->size() < decisions || !live.ok()) return false;
    if (live->size() != static_cast<size_t>(kNodes)) return false;
    for (const InstanceRecord& r : *live) {
      if (Pid(r.provider_data) <= 0) return false;
    }
    return true;
  }

  std::vector<std::string> StateChanges() {
    std::vector<std::string> out;
    auto events = store_->Events(spec_.name);
    EXPECT_TRUE(events.ok());
    for (const EventRecord& e : events.ok() ? *events : std::vector<EventRecord>{}) {
      if (e.kind == "state") out.push_back(e.detail.substr(0, e.detail.find(':')));
    }
    return out;
  }

  // The price of an instance's lifetime, tick by tick from the traces.
  double LifetimeCost(const InstanceRecord& r) const {
    const double end = r.ended_s.value_or(r.billed_until_s);
    double usd = 0;
    for (int64_t k = static_cast<int64_t>(r.launched_s / kGap); k * kGap < end; ++k) {
      const double overlap = std::min(end, (k + 1) * kGap) - std::max(r.launched_s, k * kGap);
      if (overlap <= 0) continue;
      const int64_t abs = std::min<int64_t>(spec_.market.start_tick + k, traces_[0].ticks() - 1);
      usd += overlap / 3600 * (r.spot ? traces_[r.zone].price[abs] : kOnDemandPrice);
    }
    return usd;
  }

  // Every instance's ledger covers [launched_s, ended_s) without a gap or an
  // overlap, at the traces' prices; reclaims happen where the market says.
  void ExpectLedgerExact() {
    auto all = store_->Instances(spec_.name, false);
    auto ledger = store_->Ledger(spec_.name);
    auto total = store_->TotalCost(spec_.name);
    ASSERT_TRUE(all.ok() && ledger.ok() && total.ok());
    std::map<std::string, std::vector<LedgerEntry>> rows;
    double ledger_usd = 0;
    for (const LedgerEntry& e : *ledger) {
      rows[e.instance_id].push_back(e);
      ledger_usd += e.usd;
    }
    double expected = 0;
    for (const InstanceRecord& r : *all) {
      SCOPED_TRACE(r.id + " " + r.end_reason);
      ASSERT_TRUE(r.ended_s.has_value());
      double at = r.launched_s;
      for (const LedgerEntry& e : rows[r.id]) {
        EXPECT_DOUBLE_EQ(e.from_s, at);
        EXPECT_GT(e.to_s, e.from_s);
        at = e.to_s;
      }
      EXPECT_DOUBLE_EQ(at, *r.ended_s);
      EXPECT_DOUBLE_EQ(r.billed_until_s, *r.ended_s);
      expected += LifetimeCost(r);
      if (r.end_reason == "preempted") {
        const double ticks = *r.ended_s / kGap;
        EXPECT_EQ(ticks, std::round(ticks)) << *r.ended_s;  // exactly on a boundary
        const int64_t end_tick = spec_.market.start_tick + static_cast<int64_t>(ticks);
        const int64_t launch_tick =
            spec_.market.start_tick + static_cast<int64_t>(r.launched_s / kGap);
        EXPECT_LT(traces_[r.zone].available[end_tick], kNodes);
        for (int64_t k = launch_tick; k < end_tick; ++k) {
          EXPECT_GE(traces_[r.zone].available[k], kNodes) << "tick " << k;
        }
      }
    }
    EXPECT_NEAR(ledger_usd, expected, 1e-9);
    EXPECT_NEAR(*total, expected, 1e-9);
  }

  policy::PolicyRegistry registry_;
  std::optional<TempDir> dir_;
  std::unique_ptr<JobStore> store_;
  std::string progress_path_;
  RunSpec spec_;
  std::vector<market::Trace> traces_;
  std::vector<const market::Trace*> zones_;
  std::vector<std::unique_ptr<cloud::LocalProvider>> providers_;
  std::unique_ptr<FakeTraining> training_;
};

// Zone a, the cheapest, is lost at tick 40 (the whole gang); zone b is always up.
inline std::vector<market::Trace> OneLoss() {
  return {Zone("us-east-1a", 0.9, {{40, 300}}, 300, 0), Zone("us-east-1b", 1.2, {})};
}

}  // namespace spot::control::controller_testing
