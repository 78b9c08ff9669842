// The controller end to end on this machine: a real LocalProvider whose
// instances are sleeping processes, a real JobStore, a registered policy, and
// a stand-in for the training (a thread that writes rank 0's progress file,
// advancing only while the controller holds a full gang). One simulated hour
// passes per wall second, so a job of a few hours takes a few seconds.
#include "control/controller.h"

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
#include "core/process.h"
#include "core/temp_dir.h"
#include "policy/registry.h"
#include "sim/spot_sim.h"

namespace spot::control {
namespace {

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
int64_t Pid(const std::string& provider_data) {
  auto d = cloud::DecodeLocalInstanceData(provider_data);
  return d.ok() ? d->pid : 0;
}

double WallNow() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

template <typename Pred>
bool WaitFor(Pred pred, milliseconds timeout = milliseconds(20000)) {
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
market::Trace Zone(const std::string& name, double price, std::vector<std::pair<int, int>> down,
                   int ticks = 300, int down_capacity = 1) {
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
// instances in the store), work accrues one simulated hour per hour from the
// newest instance's launch plus the changeover, as SpotSim models it. Writes
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
      double ready = 0;
      for (const InstanceRecord& r : *live) ready = std::max(ready, r.launched_s + changeover);
      const int world = static_cast<int>(live->size());
      if (last >= 0 && world >= kNodes && now > ready) work += now - std::max(last, ready);
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

// A provider that "crashes" the controller: once armed, its next Poll (the
// start of a reconcile pass) throws, unwinding the controller as a kill -9
// between two passes would stop it, its instances left running.
struct SimulatedCrash {};
class CrashingProvider final : public cloud::Provider {
 public:
  explicit CrashingProvider(cloud::Provider* inner) : inner_(inner) {}
  void Arm() { armed_ = true; }
  Result<cloud::InstanceView> Launch(const cloud::InstanceSpec& s, double now_s) override {
    return inner_->Launch(s, now_s);
  }
  Status Terminate(const std::string& id, double now_s) override {
    return inner_->Terminate(id, now_s);
  }
  std::vector<cloud::InstanceView> List() const override { return inner_->List(); }
  Result<std::vector<cloud::ProviderEvent>> Poll(double now_s) override {
    if (armed_) throw SimulatedCrash{};
    return inner_->Poll(now_s);
  }
  Status Adopt(const cloud::InstanceView& v, double now_s) override {
    return inner_->Adopt(v, now_s);
  }

 private:
  cloud::Provider* inner_;
  std::atomic<bool> armed_{false};
};

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
std::vector<market::Trace> OneLoss() {
  return {Zone("us-east-1a", 0.9, {{40, 300}}, 300, 0), Zone("us-east-1b", 1.2, {})};
}

TEST_F(ControllerTest, GreedyDecisionsMatchSpotSim) {
  // a (cheapest) goes at 20, back at 45, gone again 70..75; c goes 50..60;
  // every zone is down 70..75 (idle); b is the dearest.
  SetMarket({Zone("us-east-1a", 0.85, {{20, 45}, {70, 75}}), Zone("us-east-1b", 1.1, {{70, 75}}),
             Zone("us-east-1c", 1.0, {{50, 60}, {70, 75}})});
  spec_ = Spec(1.5, 12);  // the deadline is far: progress never matters to greedy
  JobOutcome out = RunJob();
  EXPECT_EQ(out.state, JobState::kSucceeded) << out.message;

  auto greedy = registry_.Create("greedy");
  ASSERT_TRUE(greedy.ok());
  sim::RunResult sim = sim::SimulateJob(**greedy, zones_, spec_.market.start_tick,
                                        ToPolicyJob(spec_), {.record_timeline = true});
  auto decisions = store_->Decisions(spec_.name);
  ASSERT_TRUE(decisions.ok());
  const size_t common = std::min(decisions->size(), sim.timeline.size());
  ASSERT_GT(common, 80u) << decisions->size() << " decisions, " << sim.timeline.size()
                         << " simulated ticks";
  int moves = 0;
  for (size_t t = 0; t < common; ++t) {
    const DecisionRecord& d = (*decisions)[t];
    const sim::TickRecord& s = sim.timeline[t];
    ASSERT_EQ(d.tick, static_cast<int64_t>(t));
    EXPECT_EQ(d.target, s.fleet) << "tick " << t;
    EXPECT_EQ(d.current, s.current) << "tick " << t;
    EXPECT_EQ(d.preempted, s.preempted) << "tick " << t;
    if (t > 0 && d.target != (*decisions)[t - 1].target) ++moves;
  }
  EXPECT_EQ(sim.preemptions, 3);
  EXPECT_EQ(out.preemptions, 3);
  EXPECT_GE(moves, 4);  // a -> c -> a -> idle -> a
  EXPECT_EQ((*decisions)[75].target, "spot:0");
  ExpectLedgerExact();
}

TEST_F(ControllerTest, LedgerIsContiguousAndPricedFromTheTraces) {
  // Both zones go at tick 10 for long: the safety net moves the job to on-demand.
  SetMarket({Zone("us-east-1a", 0.9, {{10, 300}}), Zone("us-east-1b", 1.0, {{10, 50}})});
  spec_ = Spec(1, 1.4);
  JobOutcome out = RunJob();
  EXPECT_EQ(out.state, JobState::kSucceeded) << out.message;
  auto all = store_->Instances(spec_.name, false);
  ASSERT_TRUE(all.ok());
  std::set<std::string> kinds;
  for (const InstanceRecord& r : *all) kinds.insert((r.spot ? "spot/" : "od/") + r.end_reason);
  EXPECT_TRUE(kinds.count("spot/preempted")) << ::testing::PrintToString(kinds);
  EXPECT_TRUE(kinds.count("od/terminated")) << ::testing::PrintToString(kinds);
  EXPECT_EQ(out.preemptions, 1);
  EXPECT_GT(out.cost_usd, 0);
  ExpectLedgerExact();
}

TEST_F(ControllerTest, StatesFollowALossAndTheRecovery) {
  SetMarket(OneLoss());
  spec_ = Spec(1, 12);
  JobOutcome out = RunJob();
  EXPECT_EQ(out.state, JobState::kSucceeded) << out.message;
  EXPECT_FALSE(out.resumed);
  EXPECT_EQ(out.preemptions, 1);
  EXPECT_EQ(out.instances_reclaimed, kNodes);  // the gang, instance by instance
  EXPECT_EQ(out.notices, kNodes);
  EXPECT_EQ(out.launches, 2 * kNodes);
  const std::vector<std::string> want = {"PENDING -> PROVISIONING", "PROVISIONING -> RUNNING",
                                         "RUNNING -> RECOVERING", "RECOVERING -> RUNNING",
                                         "RUNNING -> SUCCEEDED"};
  EXPECT_EQ(StateChanges(), want);
  // The gang of zone a was reclaimed at tick 40 (notice 2 ticks before), b's given back.
  auto all = store_->Instances(spec_.name, false);
  ASSERT_TRUE(all.ok());
  for (const InstanceRecord& r : *all) {
    EXPECT_EQ(r.end_reason, r.zone == 0 ? "preempted" : "terminated") << r.id;
    if (r.zone == 0) {
      EXPECT_EQ(*r.ended_s, 40 * kGap);
    }
  }
  auto events = store_->Events(spec_.name);
  ASSERT_TRUE(events.ok());
  int notices = 0;
  for (const EventRecord& e : *events) notices += e.kind == "notice" && e.sim_s == 38 * kGap;
  EXPECT_EQ(notices, kNodes);
  ExpectLedgerExact();
}

TEST_F(ControllerTest, TrainingThatEndsWhileRecoveringSucceeds) {
  // An elastic training can finish its last steps on the workers that are
  // left while the controller is still recovering the gang. Here the stand-in
  // reports a few steps while the job runs, and the end of the training as
  // soon as the job is RECOVERING (after the loss of zone a at tick 40).
  SetMarket(OneLoss());
  spec_ = Spec(3, 12);
  cloud::LocalProvider& p = NewProvider(WallNow());
  Controller c(spec_, Deps(&p, &p));
  std::atomic<bool> stop{false};
  std::thread training([&] {
    while (!stop) {
      std::this_thread::sleep_for(milliseconds(2));
      auto job = store_->GetJob(spec_.name);
      if (!job.ok() || !job->has_value()) continue;
      const JobState s = (*job)->state;
      const bool done = s == JobState::kRecovering;
      nlohmann::json j = {{"step", done ? kTotalSteps : 10},
                          {"total_steps", kTotalSteps},
                          {"world", s == JobState::kPending ? 0 : 1},
                          {"done", done}};
      std::ofstream(progress_path_ + ".tmp", std::ios::trunc) << j.dump();
      fs::rename(progress_path_ + ".tmp", progress_path_);
      if (done || IsTerminal(s)) break;
    }
  });
  auto out = RunToEnd(c);
  stop = true;
  training.join();
  ASSERT_TRUE(out.ok()) << out.status().ToString();
  EXPECT_EQ(out->state, JobState::kSucceeded) << out->message;
  const std::vector<std::string> want = {"PENDING -> PROVISIONING", "PROVISIONING -> RUNNING",
                                         "RUNNING -> RECOVERING", "RECOVERING -> RUNNING",
                                         "RUNNING -> SUCCEEDED"};
  EXPECT_EQ(StateChanges(), want);
  auto live = store_->Instances(spec_.name, true);
  ASSERT_TRUE(live.ok());
  EXPECT_TRUE(live->empty());
  ExpectLedgerExact();
}

// Issue 20: a straggler flagged by rank 0 was only reported. With
// controller.replace_stragglers its instance is terminated once and the fleet
// target launches a replacement; the job goes on and the ledger stays whole.
TEST_F(ControllerTest, AFlaggedStragglerIsReplacedOnce) {
  SetMarket({Zone("us-east-1a", 0.9, {}), Zone("us-east-1b", 1.2, {})});
  spec_ = Spec(3, 12);
  spec_.controller.replace_stragglers = true;
  cloud::LocalProvider& p = NewProvider(WallNow());
  Controller c(spec_, Deps(&p, &p));
  std::atomic<bool> stop{false};
  std::string flagged;
  std::thread training([&] {
    int64_t step = 0;
    bool replaced = false;
    while (!stop) {
      std::this_thread::sleep_for(milliseconds(2));
      auto job = store_->GetJob(spec_.name);
      auto live = store_->Instances(spec_.name, true);
      auto all = store_->Instances(spec_.name, false);
      if (!job.ok() || !job->has_value() || !live.ok() || !all.ok()) continue;
      if (IsTerminal((*job)->state)) break;
      // Rank 0 flags the first instance of the first full gang, for as long as
      // the training goes on (as a worker keeps listing it), and the training
      // ends once a gang without it has run a while.
      if (flagged.empty() && live->size() == kNodes) flagged = live->front().id;
      replaced = replaced || (all->size() > kNodes && live->size() == kNodes &&
                              std::none_of(live->begin(), live->end(),
                                           [&](const auto& r) { return r.id == flagged; }));
      step = std::min<int64_t>(kTotalSteps, step + (replaced ? 20 : 1));
      nlohmann::json j = {{"step", step},
                          {"total_steps", kTotalSteps},
                          {"world", static_cast<int>(live->size())},
                          {"generation", 1},
                          {"done", step >= kTotalSteps}};
      if (!flagged.empty()) j["stragglers"] = {flagged};
      std::ofstream(progress_path_ + ".tmp", std::ios::trunc) << j.dump();
      fs::rename(progress_path_ + ".tmp", progress_path_);
      if (step >= kTotalSteps) break;
    }
  });
  auto out = RunToEnd(c);
  stop = true;
  training.join();
  ASSERT_TRUE(out.ok()) << out.status().ToString();
  EXPECT_EQ(out->state, JobState::kSucceeded) << out->message;
  ASSERT_FALSE(flagged.empty());
  auto events = store_->Events(spec_.name);
  ASSERT_TRUE(events.ok());
  int straggler_events = 0;
  for (const EventRecord& e : *events) {
    if (e.kind != "straggler") continue;
    ++straggler_events;
    EXPECT_EQ(e.instance_id, flagged);
    EXPECT_NE(e.detail.find("flagged by rank 0"), std::string::npos) << e.detail;
  }
  EXPECT_EQ(straggler_events, 1) << "replaced once, though still listed";
  auto all = store_->Instances(spec_.name, false);
  ASSERT_TRUE(all.ok());
  EXPECT_EQ(all->size(), static_cast<size_t>(kNodes + 1)) << "one replacement launched";
  for (const InstanceRecord& r : *all) {
    if (r.id == flagged) EXPECT_EQ(r.end_reason, "terminated");
  }
  EXPECT_EQ(out->launches, kNodes + 1);
  ExpectLedgerExact();
}

TEST_F(ControllerTest, CancelFromAnotherThreadTerminatesEverything) {
  SetMarket(OneLoss());
  spec_ = Spec(3, 12);
  cloud::LocalProvider& p = NewProvider(WallNow());
  StartTraining();
  Controller c(spec_, Deps(&p, &p));
  std::thread canceller([&] {
    EXPECT_TRUE(WaitFor([&] {
      auto job = store_->GetJob(spec_.name);
      return job.ok() && job->has_value() && (*job)->state == JobState::kRunning;
    }));
    EXPECT_TRUE(c.RequestCancel().ok());
  });
  auto out = RunToEnd(c);
  canceller.join();
  ASSERT_TRUE(out.ok()) << out.status().ToString();
  EXPECT_EQ(out->state, JobState::kCancelled);
  EXPECT_EQ(StateChanges().back(), "RUNNING -> CANCELLED");
  auto live = store_->Instances(spec_.name, true);
  ASSERT_TRUE(live.ok());
  EXPECT_TRUE(live->empty());
  for (const cloud::InstanceView& v : p.List()) EXPECT_NE(v.state, cloud::InstanceState::kRunning);
  EXPECT_TRUE(WaitFor([&] {
    (void)p.Poll(out->sim_hours * 3600);
    for (const cloud::InstanceView& v : p.List()) {
      if (v.process_running) return false;
    }
    return true;
  })) << "instance processes still run";
  ExpectLedgerExact();
}

TEST_F(ControllerTest, BudgetStopsTheJob) {
  SetMarket(OneLoss());
  spec_ = Spec(2, 12);
  spec_.budget_usd = 0.3;  // ~1.8 $/h for the gang: about 10 simulated minutes
  JobOutcome out = RunJob();
  EXPECT_EQ(out.state, JobState::kFailed);
  EXPECT_NE(out.message.find("budget of $0.30"), std::string::npos) << out.message;
  // The job stops before the budget is spent, looking ahead twice the longest
  // recent time between passes: a pass is about 10 ms of wall time, 36
  // simulated seconds here, and a loaded machine's slow pass makes it stop
  // earlier. The exact bounds, in virtual time, are
  // VirtualTimeTest.ABudgetIsNeverOverspent's; here a tick's cost ($0.03) of
  // slack for a pass more than twice slower than any before it.
  EXPECT_GT(out.cost_usd, 0);
  EXPECT_LE(out.cost_usd, 0.3 + 0.03);
  auto live = store_->Instances(spec_.name, true);
  ASSERT_TRUE(live.ok());
  EXPECT_TRUE(live->empty());
  ExpectLedgerExact();
}

TEST_F(ControllerTest, RestartAdoptsTheFleetAndKeepsTheLedgerWhole) {
  SetMarket(OneLoss());
  spec_ = Spec(1.5, 12);
  StartTraining();
  // Crash once the gang was moved to zone b (tick 40) and runs there.
  auto job = CrashFirstController([&] {
    auto d = store_->Decisions(spec_.name);
    auto live = store_->Instances(spec_.name, true);
    return d.ok() && d->size() >= 50 && live.ok() && live->size() == kNodes &&
           Pid((*live)[0].provider_data) > 0 && Pid((*live)[1].provider_data) > 0;
  });
  ASSERT_TRUE(job.has_value());
  auto before = store_->Instances(spec_.name, true);
  ASSERT_TRUE(before.ok());
  ASSERT_EQ(before->size(), static_cast<size_t>(kNodes));
  for (const InstanceRecord& r : *before) {
    EXPECT_EQ(r.zone, 1);
    EXPECT_TRUE(CheckProcess(Pid(r.provider_data)).running) << r.id;
  }
  std::this_thread::sleep_for(milliseconds(150));  // nobody watches for a few ticks

  cloud::LocalProvider& b = NewProvider(job->wall_epoch_unix_s);
  Controller second(spec_, Deps(&b, &b));
  auto out = RunToEnd(second);
  ASSERT_TRUE(out.ok()) << out.status().ToString();
  EXPECT_TRUE(out->resumed);
  EXPECT_EQ(out->state, JobState::kSucceeded) << out->message;
  EXPECT_EQ(out->launches, 0);  // the adopted gang finished the job

  auto events = store_->Events(spec_.name);
  ASSERT_TRUE(events.ok());
  int resumes = 0;
  for (const EventRecord& e : *events) {
    EXPECT_NE(e.kind, "lost") << e.detail;
    if (e.kind == "resume") {
      ++resumes;
      EXPECT_EQ(e.detail, "2 instances adopted");
    }
  }
  EXPECT_EQ(resumes, 1);
  for (const InstanceRecord& r : *before) {
    bool adopted = false;
    for (const cloud::InstanceView& v : b.List()) {
      if (v.spec.id != r.id) continue;
      adopted = true;
      EXPECT_EQ(v.provider_data, r.provider_data);
      EXPECT_EQ(v.state, cloud::InstanceState::kTerminated);
    }
    EXPECT_TRUE(adopted) << r.id;
  }
  auto decisions = store_->Decisions(spec_.name);
  ASSERT_TRUE(decisions.ok());
  for (size_t t = 0; t < decisions->size(); ++t) {
    ASSERT_EQ((*decisions)[t].tick, static_cast<int64_t>(t));  // no tick lost or repeated
  }
  ExpectLedgerExact();
}

TEST_F(ControllerTest, RestartAfterAReclaimNobodyWatched) {
  // The first controller stops while the gang is in zone a; zone a is reclaimed
  // (tick 40) before the second starts. The second adopts the gang, learns of
  // the reclaim from its provider, bills it up to the boundary, and moves on.
  SetMarket(OneLoss());
  spec_ = Spec(1, 12);
  StartTraining();
  auto job = CrashFirstController([&] {
    auto d = store_->Decisions(spec_.name);
    auto live = store_->Instances(spec_.name, true);
    return d.ok() && d->size() >= 10 && live.ok() && live->size() == kNodes &&
           Pid((*live)[0].provider_data) > 0 && Pid((*live)[1].provider_data) > 0;
  });
  ASSERT_TRUE(job.has_value());
  auto before = store_->Instances(spec_.name, true);
  ASSERT_TRUE(before.ok());
  ASSERT_EQ(before->size(), static_cast<size_t>(kNodes));
  for (const InstanceRecord& r : *before) EXPECT_EQ(r.zone, 0);
  const double epoch = job->wall_epoch_unix_s;
  ASSERT_TRUE(WaitFor([&] { return (WallNow() - epoch) * kCompression > 45 * kGap; }));

  cloud::LocalProvider& b = NewProvider(epoch);
  Controller second(spec_, Deps(&b, &b));
  auto out = RunToEnd(second);
  ASSERT_TRUE(out.ok()) << out.status().ToString();
  EXPECT_TRUE(out->resumed);
  EXPECT_EQ(out->state, JobState::kSucceeded) << out->message;
  EXPECT_EQ(out->launches, kNodes);  // the new gang in zone b
  EXPECT_EQ(out->preemptions, 1);
  for (const InstanceRecord& r : *before) {
    auto all = store_->Instances(spec_.name, false);
    ASSERT_TRUE(all.ok());
    for (const InstanceRecord& now : *all) {
      if (now.id != r.id) continue;
      EXPECT_EQ(now.end_reason, "preempted");
      EXPECT_EQ(now.ended_s, 40 * kGap);
    }
    EXPECT_FALSE(CheckProcess(Pid(r.provider_data)).running);  // the reclaim killed it
  }
  const std::vector<std::string> want = {"PENDING -> PROVISIONING", "PROVISIONING -> RUNNING",
                                         "RUNNING -> RECOVERING", "RECOVERING -> RUNNING",
                                         "RUNNING -> SUCCEEDED"};
  EXPECT_EQ(StateChanges(), want);
  ExpectLedgerExact();
}

TEST_F(ControllerTest, WorkersThatKeepFailingFailTheJob) {
  SetMarket(OneLoss());
  spec_ = Spec(1, 12);
  JobOutcome out = RunJob(/*training=*/false, /*failing_worker=*/true);
  EXPECT_EQ(out.state, JobState::kFailed);
  EXPECT_NE(out.message.find("workers failed"), std::string::npos) << out.message;
  EXPECT_NE(out.message.find("training progress"), std::string::npos) << out.message;
  EXPECT_GT(out.launches, 3 * kNodes + 3);
  auto live = store_->Instances(spec_.name, true);
  ASSERT_TRUE(live.ok());
  EXPECT_TRUE(live->empty());
  ExpectLedgerExact();
}

// The give-up message keeps the last error a worker wrote (a full disk, say)
// when the failures after it say less (a worker that left no words).
TEST_F(ControllerTest, GivingUpNamesTheLastErrorAWorkerWrote) {
  SetMarket(OneLoss());
  spec_ = Spec(1, 12);
  cloud::LocalProvider& p = NewProvider(WallNow(), /*failing_worker=*/true);
  ControllerDeps d = Deps(&p, &p);
  std::set<std::string> asked;
  d.last_error = [&asked](const std::string& instance_id) {
    asked.insert(instance_id);
    return asked.size() == 1 ? std::string("writing step 5: No space left on device")
                             : std::string();
  };
  Controller c(spec_, std::move(d));
  auto out = RunToEnd(c);
  ASSERT_TRUE(out.ok()) << out.status().ToString();
  EXPECT_EQ(out->state, JobState::kFailed);
  EXPECT_GT(asked.size(), 2u);
  EXPECT_NE(out->message.find("the last error a worker wrote: writing step 5: No space left"),
            std::string::npos)
      << out->message;
}

// A command workload ends when its program has finished on every node (rank
// 0 may still evaluate), and a node that finished first gets no replacement.
TEST_F(ControllerTest, ACommandWorkloadEndsWhenItsProgramFinishedOnEveryNode) {
  SetMarket({Zone("us-east-1a", 0.9, {}), Zone("us-east-1b", 1.2, {})});
  spec_ = Spec(1, 12);
  spec_.command.run = "python3 train.py";
  spec_.controller.terminate_grace_s = 30;
  const fs::path last_output = dir_->path() / "last-output";
  // The second node's program ends 1.5 s after the first's, with output.
  cloud::LocalProvider& p = NewProvider(WallNow(), false, [last_output](int launch) {
    if (launch == 0) return std::vector<std::string>{"/bin/sh", "-c", "sleep 0.3"};
    return std::vector<std::string>{
        "/bin/sh", "-c", "sleep 1.8; echo 'test accuracy 0.9' > " + last_output.string()};
  });
  Controller c(spec_, Deps(&p, &p));
  auto out = RunToEnd(c);
  ASSERT_TRUE(out.ok()) << out.status().ToString();
  EXPECT_EQ(out->state, JobState::kSucceeded) << out->message;
  EXPECT_EQ(out->launches, 2);
  EXPECT_TRUE(fs::exists(last_output)) << "the job ended before the second node's program did";
  auto events = store_->Events(spec_.name);
  ASSERT_TRUE(events.ok());
  EXPECT_EQ(std::count_if(events->begin(), events->end(),
                          [](const EventRecord& e) { return e.kind == "program-finished"; }),
            2);
}

}  // namespace
}  // namespace spot::control
