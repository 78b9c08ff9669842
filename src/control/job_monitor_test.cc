// The controller side of SpotMonitor on a hand-made job: a real JobStore, a
// real worker /metrics endpoint (monitor::MetricsServer) to scrape, a fixed
// wall clock. Checks the metrics against the records they come from, the
// predicted preemption risk against a Kaplan-Meier estimate done by hand, and
// the dashboard data (cost curve, epochs, utilization, progress).
#include "control/job_monitor.h"

#include <gtest/gtest.h>
#include <prometheus/counter.h>
#include <prometheus/registry.h>

#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <nlohmann/json.hpp>

#include "control/dashboard_data.h"
#include "core/temp_dir.h"
#include "monitor/metrics.h"
#include "monitor/metrics_server.h"

namespace spot::control {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

constexpr double kGap = 60;
constexpr double kEpoch = 1'700'000'000;  // wall time of simulated time 0
constexpr double kCompression = 60;       // one tick per wall second

market::Trace Zone(const std::string& name, std::vector<int32_t> available, double price) {
  market::Trace t;
  t.pool = {.cloud = "aws", .region = "us-east-1", .zone = name, .instance_type = "p3.2xlarge"};
  t.name = name;
  t.gap_seconds = kGap;
  t.available = std::move(available);
  t.price.assign(t.available.size(), price);
  return t;
}

TEST(PreemptionRiskTest, KaplanMeierOverThePoolsPast) {
  // Runs of capacity (>= 2) before tick 40: lengths 5, 10 and 5 ticks, each
  // ended by an outage; the run in progress started at tick 30.
  std::vector<int32_t> a(60, 2);
  for (int t : {5, 16, 17, 23, 24, 29}) a[t] = 0;
  // up runs: [0,5) 5, [6,16) 10, [18,23) 5, [25,29) 4, [30,...) open.
  market::Trace z = Zone("z", a, 1.0);
  // At tick 32 the run is 2 ticks old. Lifetimes (hours at 60 s ticks):
  // 5, 10, 5, 4 ticks ended, 2 censored at tick 32.
  // S just after 4 ticks: 1 - 1/4... computed by hand below with the same
  // convention as market::KaplanMeier: at t=4: n=4 (the censored 2-tick run
  // left before), d=1 -> 3/4; t=5: n=3, d=2 -> 3/4 * 1/3 = 1/4; t=10: n=1, d=1 -> 0.
  const double h = 60.0 / 3600;
  // Age 2 ticks, horizon 3.5 ticks (5.5 reached): S(5.5) / S(2) = (1/4) / 1.
  EXPECT_NEAR(PreemptionRisk(z, 32, 2, 3.5 * h), 1 - 0.25, 1e-12);
  // Horizon 1.5 ticks: S(3.5) / S(2) = 1: no lifetime ended by 3.5 ticks.
  EXPECT_NEAR(PreemptionRisk(z, 32, 2, 1.5 * h), 0.0, 1e-12);
  // No capacity now: unknown.
  EXPECT_EQ(PreemptionRisk(z, 29, 2, h), -1);
  // A gang of 3 never had capacity: nothing to learn from.
  EXPECT_EQ(PreemptionRisk(z, 32, 3, h), -1);
}

class JobMonitorTest : public ::testing::Test {
 protected:
  void SetUp() override {
    tmp_.emplace(TempDir::Create("job_monitor_test").value());
    dir_ = tmp_->path();
    store_ = JobStore::Open((dir_ / "state.db").string()).value();
    zones_.push_back(Zone("zone-a", std::vector<int32_t>(100, 4), 0.9));
    std::vector<int32_t> b(100, 4);
    b[3] = 0;
    zones_.push_back(Zone("zone-b", b, 1.2));
    spec_.name = "job";
    spec_.policy.name = "greedy";
    spec_.compute_hours = 1;
    spec_.deadline_hours = 3;
    spec_.resources.nodes = 2;
    spec_.resources.ondemand_price = 3.0;
    spec_.resources.changeover_hours = 0.05;
    ASSERT_TRUE(store_
                    ->CreateJob({.id = "job",
                                 .spec_hash = "h",
                                 .state = JobState::kPending,
                                 .wall_epoch_unix_s = kEpoch,
                                 .time_compression = kCompression,
                                 .start_tick = 0})
                    .ok());
  }

  JobMonitor Monitor(std::function<std::string(const std::string&)> metrics_address = {}) {
    return JobMonitor({.spec = spec_,
                       .store = store_.get(),
                       .zones = {&zones_[0], &zones_[1]},
                       .job_dir = dir_.string(),
                       .progress_path = (dir_ / "progress.json").string(),
                       .epochs = 2,
                       .tensorboard_dir = (dir_ / "tensorboard").string(),
                       .clock = &clock_,
                       .metrics_address = std::move(metrics_address)});
  }
  void Launch(const std::string& id, int zone, double at_s) {
    ASSERT_TRUE(store_
                    ->PutInstance({.id = id,
                                   .job_id = "job",
                                   .zone = zone,
                                   .zone_name = zone < 0 ? "on-demand" : zones_[zone].pool.zone,
                                   .spot = zone >= 0,
                                   .launched_s = at_s,
                                   .billed_until_s = at_s})
                    .ok());
    ASSERT_TRUE(
        store_->AppendEvent("job", {.sim_s = at_s, .kind = "launch", .instance_id = id}).ok());
  }
  void Bill(const std::string& id, double from, double to, double price) {
    std::vector<LedgerEntry> rows;
    for (double t = from; t < to; t += kGap) rows.push_back({id, t, t + kGap, price, 0});
    ASSERT_TRUE(store_->Bill(id, rows).ok());
  }
  void Progress(int64_t step, int64_t epoch, double accuracy) {
    std::ofstream(dir_ / "progress.json") << json{
        {"step", step},
        {"total_steps", 1000},
        {"epoch", epoch},
        {"loss", 0.5},
        {"test_accuracy", accuracy},
        {"world", 2},
        {"generation", 3},
        {"done", false}}.dump();
  }
  double At(double sim_s) { return kEpoch + sim_s / kCompression; }

  std::optional<TempDir> tmp_;
  fs::path dir_;
  std::unique_ptr<JobStore> store_;
  std::vector<market::Trace> zones_;
  RunSpec spec_;
  ManualClock clock_{kEpoch};
};

TEST_F(JobMonitorTest, MetricsFollowTheRecords) {
  JobMonitor m = Monitor();
  Launch("i-a1", 1, 0);
  Launch("i-a2", 1, 0);
  Bill("i-a1", 0, 180, 1.2);
  Bill("i-a2", 0, 180, 1.2);
  // zone-b loses its capacity at tick 3: both instances reclaimed.
  for (const char* id : {"i-a1", "i-a2"}) {
    ASSERT_TRUE(
        store_->AppendEvent("job", {.sim_s = 120, .kind = "notice", .instance_id = id}).ok());
    ASSERT_TRUE(store_->EndInstance(id, 180, "preempted").ok());
    ASSERT_TRUE(
        store_->AppendEvent("job", {.sim_s = 180, .kind = "preempt", .instance_id = id}).ok());
  }
  Launch("i-b1", -1, 180);
  Bill("i-b1", 180, 300, 3.0);
  Progress(400, 0, -1);
  clock_.AdvanceTo(At(300));
  ASSERT_TRUE(m.Refresh().ok());
  auto parsed = monitor::ParseText(m.MetricsText());
  ASSERT_TRUE(parsed.ok()) << parsed.status().ToString();
  const auto& p = *parsed;
  EXPECT_EQ(p.Value("spot_instances", {{"pool", "on-demand"}, {"lifecycle", "on_demand"}}), 1);
  EXPECT_EQ(p.Value("spot_instances", {{"pool", "zone-b"}}), 0);
  EXPECT_EQ(p.Value("spot_preemptions_total", {{"pool", "zone-b"}}), 2);
  EXPECT_EQ(p.Value("spot_interruption_notices_total", {{"pool", "zone-b"}}), 2);
  EXPECT_EQ(p.Value("spot_instance_launches_total", {{"pool", "zone-b"}}), 2);
  EXPECT_NEAR(*p.Value("spot_cost_dollars_total", {{"lifecycle", "spot"}}), 2 * 1.2 * 180 / 3600,
              1e-9);
  EXPECT_NEAR(*p.Value("spot_cost_dollars_total", {{"lifecycle", "on_demand"}}), 3.0 * 120 / 3600,
              1e-9);
  EXPECT_NEAR(*p.Value("spot_ondemand_cost_dollars"), 2 * 3.0 * 1.05, 1e-9);
  EXPECT_NEAR(*p.Value("spot_job_progress_ratio"), 0.4, 1e-12);
  EXPECT_NEAR(*p.Value("spot_job_work_done_seconds"), 0.4 * 3600, 1e-9);
  EXPECT_NEAR(*p.Value("spot_job_deadline_remaining_seconds"), 3 * 3600 - 300, 1e-6);
  EXPECT_EQ(p.Value("spot_training_workers"), 2);
  EXPECT_EQ(p.Value("spot_training_generation"), 3);
  EXPECT_EQ(p.Value("spot_pool_price_dollars_per_hour", {{"pool", "zone-a"}}), 0.9);
  EXPECT_EQ(p.Value("spot_pool_capacity_instances", {{"pool", "zone-b"}}), 4);
  EXPECT_EQ(p.Value("spot_job_state", {{"state", "PENDING"}}), 1);
  // Counters only grow, by what the records grew by.
  Bill("i-b1", 300, 360, 3.0);
  clock_.AdvanceTo(At(360));
  ASSERT_TRUE(m.Refresh().ok());
  parsed = monitor::ParseText(m.MetricsText());
  ASSERT_TRUE(parsed.ok());
  EXPECT_NEAR(*parsed->Value("spot_cost_dollars_total", {{"lifecycle", "on_demand"}}),
              3.0 * 180 / 3600, 1e-9);
  EXPECT_EQ(parsed->Value("spot_preemptions_total", {{"pool", "zone-b"}}), 2);
}

TEST_F(JobMonitorTest, ScrapesWorkersForUtilizationPerTick) {
  JobMonitor m = Monitor();
  // A worker's /metrics: its compute-seconds counter, advanced by the test.
  auto registry = std::make_shared<prometheus::Registry>();
  prometheus::Counter& compute =
      monitor::AddCounter(*registry, "spot_train_compute_seconds_total", "busy").Add({});
  auto server = monitor::MetricsServer::Start(registry, {});
  ASSERT_TRUE(server.ok()) << server.status().ToString();
  Launch("i-w", 0, 0);
  ASSERT_TRUE(
      store_->PutValue("job", MetricsPortKey("i-w"), std::to_string((*server)->port())).ok());
  // Scrapes every half second (a tick is one wall second). Each interval
  // counts in the tick of its middle: tick 0 is busy half the time, tick 1
  // 80% of it; the scrape at 2.5 s closes tick 1.
  for (auto [t, busy] : std::vector<std::pair<double, double>>{
           {0.0, 0}, {0.5, 0.25}, {1.0, 0.25}, {1.5, 0.4}, {2.0, 0.4}, {2.5, 0.1}}) {
    compute.Increment(busy);
    clock_.AdvanceTo(kEpoch + t);
    ASSERT_TRUE(m.Refresh().ok());
  }
  auto samples = store_->Samples("job", "busy/");
  ASSERT_TRUE(samples.ok());
  ASSERT_GE(samples->size(), 2u);
  EXPECT_EQ((*samples)[0].series, "busy/i-w");
  EXPECT_EQ((*samples)[0].t_s, 0);
  EXPECT_NEAR((*samples)[0].value, 0.5, 1e-9);
  EXPECT_EQ((*samples)[1].t_s, kGap);
  EXPECT_NEAR((*samples)[1].value, 0.8, 1e-9);
  json targets = json::parse(m.TargetsJson());
  ASSERT_EQ(targets.size(), 1u);
  EXPECT_EQ(targets[0]["targets"][0], "127.0.0.1:" + std::to_string((*server)->port()));
  EXPECT_EQ(targets[0]["labels"]["pool"], "zone-a");
  EXPECT_EQ(targets[0]["labels"]["lifecycle"], "spot");
}

// A worker on another network publishes where it serves /metrics (its
// address toward the rendezvous): the monitor scrapes it there, not at
// 127.0.0.1 (here 127.0.0.2, where nothing else listens on that port).
TEST_F(JobMonitorTest, ScrapesAWorkerAtTheAddressItPublished) {
  auto registry = std::make_shared<prometheus::Registry>();
  prometheus::Counter& compute =
      monitor::AddCounter(*registry, "spot_train_compute_seconds_total", "busy").Add({});
  auto server = monitor::MetricsServer::Start(registry, {.host = "127.0.0.2"});
  ASSERT_TRUE(server.ok()) << server.status().ToString();
  const std::string at = "127.0.0.2:" + std::to_string((*server)->port());
  std::map<std::string, std::string> published;
  JobMonitor m = Monitor([&](const std::string& id) { return published[id]; });
  Launch("i-r", 0, 0);
  clock_.AdvanceTo(kEpoch);
  ASSERT_TRUE(m.Refresh().ok());
  EXPECT_EQ(json::parse(m.TargetsJson()).size(), 0u);  // nothing known yet
  published["i-r"] = at;
  for (double t : {0.5, 1.0}) {
    compute.Increment(0.25);
    clock_.AdvanceTo(kEpoch + t);
    ASSERT_TRUE(m.Refresh().ok());
  }
  json targets = json::parse(m.TargetsJson());
  ASSERT_EQ(targets.size(), 1u);
  EXPECT_EQ(targets[0]["targets"][0], at);
  auto parsed = monitor::ParseText(m.MetricsText());
  ASSERT_TRUE(parsed.ok());
  EXPECT_NEAR(*parsed->Value("spot_worker_busy_ratio", {{"worker_id", "i-r"}}), 0.5, 1e-9);
}

// What the store or the rendezvous holds is parsed strictly: a port that is
// not an integer in 1..65535, or an address that is not HOST:PORT, is not
// scraped (and is logged), where atoi would have made a port of "12ab".
TEST_F(JobMonitorTest, ABadPortOrAddressIsNotScraped) {
  JobMonitor m = Monitor([](const std::string& id) {
    return id == "i-addr" ? std::string("10.0.0.2:9x") : std::string();
  });
  Launch("i-port", 0, 0);
  Launch("i-addr", 0, 0);
  ASSERT_TRUE(store_->PutValue("job", MetricsPortKey("i-port"), "12ab").ok());
  ASSERT_TRUE(store_->PutValue("job", MetricsPortKey("i-addr"), "9100").ok());
  clock_.AdvanceTo(kEpoch + 1);
  ASSERT_TRUE(m.Refresh().ok());
  EXPECT_EQ(json::parse(m.TargetsJson()).size(), 0u) << m.TargetsJson();
}

TEST(MetricsAddressTest, ParsesHostAndPortStrictly) {
  auto v4 = ParseMetricsAddress("10.213.40.2:9100");
  ASSERT_TRUE(v4.ok()) << v4.status().ToString();
  EXPECT_EQ(v4->first, "10.213.40.2");
  EXPECT_EQ(v4->second, 9100);
  auto v6 = ParseMetricsAddress("[fd00::2]:80");
  ASSERT_TRUE(v6.ok()) << v6.status().ToString();
  EXPECT_EQ(v6->first, "fd00::2");
  EXPECT_EQ(v6->second, 80);
  for (const char* bad : {"", "10.0.0.2", "10.0.0.2:", ":80", "10.0.0.2:0", "10.0.0.2:65536",
                          "10.0.0.2:12ab", "10.0.0.2: 80", "10.0.0.2:-1"}) {
    auto r = ParseMetricsAddress(bad);
    EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument) << bad;
    if (!r.ok()) {
      EXPECT_NE(r.status().message().find(bad), std::string::npos) << bad;
    }
  }
  EXPECT_EQ(MetricsAddressKey("job", "i-1"), "job/metrics_address/i-1");
}

TEST_F(JobMonitorTest, DashboardDataTellsTheStory) {
  JobMonitor m = Monitor();
  Launch("i-a", 0, 0);
  Bill("i-a", 0, 600, 0.9);
  ASSERT_TRUE(
      store_
          ->AppendDecision("job",
                           {.tick = 0, .progress_hours = 0, .current = "idle", .target = "spot:0"})
          .ok());
  ASSERT_TRUE(
      store_
          ->AppendDecision(
              "job", {.tick = 5, .progress_hours = 0.05, .current = "spot:0", .target = "spot:0"})
          .ok());
  std::ofstream(dir_ / "steps.csv") << "1,0,2.3,0.001\n2,0,2.1,0.002\n3,0,1.9,0.002\n";
  // Epoch 1 ends at 300 s.
  Progress(500, 1, 0.8);
  clock_.AdvanceTo(At(300));
  ASSERT_TRUE(m.Refresh().ok());
  Progress(700, 1, 0.8);
  clock_.AdvanceTo(At(600));
  ASSERT_TRUE(m.Refresh().ok());
  auto text = m.DashboardJson(true);
  ASSERT_TRUE(text.ok()) << text.status().ToString();
  json d = json::parse(*text);
  EXPECT_EQ(d["version"], 1);
  EXPECT_EQ(d["live"], true);
  EXPECT_NEAR(d["job"]["now_s"].get<double>(), 600, 1e-6);
  EXPECT_NEAR(d["summary"]["cost_usd"].get<double>(), 0.9 * 600 / 3600, 1e-9);
  EXPECT_NEAR(d["summary"]["ondemand_usd"].get<double>(), 2 * 3.0 * 1.05, 1e-9);
  EXPECT_EQ(d["summary"]["step"], 700);
  ASSERT_EQ(d["pools"].size(), 2u);
  EXPECT_EQ(d["pools"][1]["capacity"].size(), 11u);  // ticks 0..10, none ahead of now
  EXPECT_EQ(d["pools"][1]["capacity"][3], 0);
  ASSERT_EQ(d["epochs"].size(), 2u);  // the finished one and the one in progress
  EXPECT_EQ(d["epochs"][0]["epoch"], 1);
  EXPECT_NEAR(d["epochs"][0]["end_s"].get<double>(), 300, 1e-6);
  EXPECT_NEAR(d["epochs"][0]["usd"].get<double>(), 0.9 * 300 / 3600, 1e-9);
  EXPECT_NEAR(d["epochs"][0]["test_accuracy"].get<double>(), 0.8, 1e-12);
  EXPECT_EQ(d["epochs"][1]["ongoing"], true);
  EXPECT_NEAR(d["epochs"][1]["usd"].get<double>(), 0.9 * 300 / 3600, 1e-9);
  // The cost curve: cumulative at each tick, against the on-demand line.
  const json& cost = d["cost"];
  ASSERT_EQ(cost["t_s"].size(), cost["usd"].size());
  for (size_t i = 0; i < cost["t_s"].size(); ++i) {
    const double t = cost["t_s"][i];
    EXPECT_NEAR(cost["usd"][i].get<double>(), 0.9 * t / 3600, 1e-9) << t;
    EXPECT_NEAR(cost["ondemand_usd"][i].get<double>(), 2 * 3.0 * t / 3600, 1e-9) << t;
  }
  EXPECT_EQ(d["progress"]["t_s"].back(), 600);
  EXPECT_NEAR(d["progress"]["hours"].back().get<double>(), 0.7, 1e-12);
  EXPECT_EQ(d["training"]["step"].size(), 3u);
  EXPECT_EQ(d["training"]["loss"][2], 1.9);
  EXPECT_EQ(d["evaluation"]["step"][0], 500);
  EXPECT_EQ(d["instances"][0]["ended_s"], nullptr);
  // Unknown job: NotFound.
  RunSpec other = spec_;
  other.name = "nope";
  auto missing =
      DashboardData({.spec = &other, .store = store_.get(), .wall_now_unix_s = clock_.NowUnixS()});
  EXPECT_EQ(missing.status().code(), StatusCode::kNotFound);
}

}  // namespace
}  // namespace spot::control
