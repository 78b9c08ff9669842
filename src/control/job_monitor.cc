#include "control/job_monitor.h"

#include <fmt/format.h>
#include <httplib.h>
#include <prometheus/counter.h>
#include <prometheus/gauge.h>
#include <prometheus/histogram.h>
#include <prometheus/registry.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <map>
#include <mutex>
#include <nlohmann/json.hpp>

#include "control/controller.h"
#include "control/dashboard_data.h"
#include "core/net.h"
#include "core/number_text.h"
#include "market/hazard.h"
#include "monitor/metrics.h"
#include "monitor/tensorboard.h"
#include "policy/lifetime_stats.h"

namespace spot::control {
namespace {

namespace pm = prometheus;
using json = nlohmann::json;

std::string Lifecycle(bool spot) { return spot ? "spot" : "on_demand"; }

// A worker's busy time, followed between scrapes and summed per market tick.
struct BusyTracker {
  double last_wall = -1;
  double last_compute = 0;
  int64_t tick = -1;
  double busy = 0;  // compute seconds in `tick`
  double wall = 0;  // wall seconds observed in `tick`
};

}  // namespace

std::string MetricsPortKey(const std::string& instance_id) { return "metrics_port/" + instance_id; }

std::string MetricsAddressKey(const std::string& job, const std::string& instance_id) {
  return job + "/metrics_address/" + instance_id;
}

Result<std::pair<std::string, int>> ParseMetricsAddress(const std::string& text) {
  const size_t colon = text.rfind(':');
  std::string host = colon == std::string::npos ? "" : text.substr(0, colon);
  if (host.size() > 2 && host.front() == '[' && host.back() == ']') {
    host = host.substr(1, host.size() - 2);
  }
  auto port = ParseInteger(colon == std::string::npos ? "" : text.substr(colon + 1));
  if (host.empty() || !port.ok() || *port < 1 || *port > 65535) {
    return InvalidArgumentError(
        fmt::format("metrics address '{}': expected HOST:PORT with a port in 1..65535", text));
  }
  return std::pair{host, static_cast<int>(*port)};
}

double PreemptionRisk(const market::Trace& trace, int64_t abs_tick, int nodes, double horizon_h) {
  if (abs_tick <= 0 || abs_tick >= trace.ticks()) return -1;
  if (trace.available[abs_tick] < nodes) return -1;
  market::Trace past;
  past.gap_seconds = trace.gap_seconds;
  past.available.assign(trace.available.begin(), trace.available.begin() + abs_tick);
  market::SurvivalCurve s = market::LifetimeSurvival(past, {.min_count = nodes});
  if (s.time_h.empty()) return -1;
  const double age_h =
      static_cast<double>(policy::CurrentRunAge(past.available, nodes)) * trace.gap_seconds / 3600;
  const double now = s.At(age_h);
  if (now <= 0) return 1;
  return std::clamp(1 - s.At(age_h + horizon_h) / now, 0.0, 1.0);
}

struct JobMonitor::Impl {
  JobMonitorOptions o;
  double gap_s = 1;
  std::shared_ptr<pm::Registry> registry = std::make_shared<pm::Registry>();
  pm::Family<pm::Gauge>* job_state = nullptr;
  pm::Family<pm::Gauge>* instances = nullptr;
  pm::Family<pm::Counter>* launches = nullptr;
  pm::Family<pm::Counter>* preemptions = nullptr;
  pm::Family<pm::Counter>* notices = nullptr;
  pm::Family<pm::Counter>* cost = nullptr;
  pm::Family<pm::Gauge>* price = nullptr;
  pm::Family<pm::Gauge>* capacity = nullptr;
  pm::Family<pm::Gauge>* risk = nullptr;
  pm::Family<pm::Gauge>* busy = nullptr;
  pm::Gauge* ondemand_cost = nullptr;
  pm::Gauge* work_done = nullptr;
  pm::Gauge* work_needed = nullptr;
  pm::Gauge* deadline_left = nullptr;
  pm::Gauge* sim_time = nullptr;
  pm::Gauge* progress_ratio = nullptr;
  pm::Gauge* step = nullptr;
  pm::Gauge* total_steps = nullptr;
  pm::Gauge* workers = nullptr;
  pm::Gauge* generation = nullptr;
  pm::Gauge* loss = nullptr;
  pm::Gauge* accuracy = nullptr;
  pm::Histogram* reconcile = nullptr;

  mutable std::mutex mu;                  // everything below, and Refresh against the readers
  std::map<std::string, double> counted;  // counter key -> value already added
  std::map<std::string, BusyTracker> busy_by_instance;
  std::map<std::string, int> metrics_ports;  // instance -> its worker's /metrics port
  // instance -> where its worker serves /metrics, as it published it
  std::map<std::string, std::pair<std::string, int>> metrics_at;
  std::map<std::string, bool> refused;  // instance -> a bad port or address was logged
  std::vector<double> pool_risk;
  int64_t risk_tick = -1;
  int64_t epochs_recorded = -1;
  int64_t tb_step = -1;
  std::unique_ptr<monitor::EventWriter> tb;
  bool tb_failed = false;
  std::string targets = "[]";

  void Build() {
    pm::Registry& r = *registry;
    const pm::Labels job{{"job_id", o.spec.name}};
    monitor::AddGauge(r, "spot_job_info", "The job: its policy and instance type (value 1)")
        .Add({{"job_id", o.spec.name},
              {"policy", o.spec.policy.name},
              {"instance_type", o.spec.resources.instance_type},
              {"region", o.spec.resources.region}})
        .Set(1);
    job_state = &monitor::AddGauge(r, "spot_job_state", "1 for the job's current state, else 0");
    instances = &monitor::AddGauge(r, "spot_instances", "Instances running, by pool and lifecycle");
    launches = &monitor::AddCounter(r, "spot_instance_launches_total", "Instances launched");
    preemptions =
        &monitor::AddCounter(r, "spot_preemptions_total", "Spot instances reclaimed by the market");
    notices = &monitor::AddCounter(r, "spot_interruption_notices_total",
                                   "Interruption notices given to instances");
    cost = &monitor::AddCounter(r, "spot_cost_dollars_total",
                                "Dollars billed for the job's instances, by lifecycle");
    ondemand_cost = &monitor::AddGauge(r, "spot_ondemand_cost_dollars",
                                       "What the whole job costs on demand (the anchor)")
                         .Add(job);
    price = &monitor::AddGauge(r, "spot_pool_price_dollars_per_hour",
                               "Spot price of one instance in each pool now");
    capacity = &monitor::AddGauge(r, "spot_pool_capacity_instances",
                                  "Spot instances obtainable in each pool now");
    risk = &monitor::AddGauge(
        r, "spot_pool_preemption_risk_ratio",
        "Predicted probability that a gang entering the pool now is reclaimed within the horizon "
        "(Kaplan-Meier on the pool's past); -1 when unknown");
    work_done = &monitor::AddGauge(r, "spot_job_work_done_seconds",
                                   "Compute done, in seconds of one gang's work")
                     .Add(job);
    work_needed = &monitor::AddGauge(r, "spot_job_work_needed_seconds",
                                     "Compute the job needs (compute_hours)")
                       .Add(job);
    deadline_left = &monitor::AddGauge(r, "spot_job_deadline_remaining_seconds",
                                       "Simulated seconds left until the deadline")
                         .Add(job);
    sim_time = &monitor::AddGauge(r, "spot_job_simulated_time_seconds",
                                  "Simulated seconds since the job's start")
                    .Add(job);
    progress_ratio =
        &monitor::AddGauge(r, "spot_job_progress_ratio", "Committed steps over total steps")
             .Add(job);
    step = &monitor::AddGauge(r, "spot_training_step", "The training's committed steps").Add(job);
    total_steps =
        &monitor::AddGauge(r, "spot_training_total_steps", "The training's steps in all").Add(job);
    workers = &monitor::AddGauge(r, "spot_training_workers",
                                 "Workers in the training's current generation")
                   .Add(job);
    generation = &monitor::AddGauge(r, "spot_training_generation",
                                    "The training's current rendezvous generation")
                      .Add(job);
    loss = &monitor::AddGauge(r, "spot_training_loss", "The last reported training loss").Add(job);
    accuracy = &monitor::AddGauge(r, "spot_training_test_accuracy_ratio",
                                  "Test accuracy of the last evaluation (0 to 1)")
                    .Add(job);
    busy = &monitor::AddGauge(r, "spot_worker_busy_ratio",
                              "Fraction of the last scrape interval a worker spent computing");
    reconcile =
        &monitor::AddHistogram(r, "spot_reconcile_seconds", "Controller time per reconcile pass")
             .Add(job, monitor::ExponentialBuckets(0.0001, 2, 14));
    work_needed->Set(o.spec.compute_hours * 3600);
    ondemand_cost->Set(static_cast<double>(o.spec.resources.nodes) *
                       o.spec.resources.ondemand_price *
                       (o.spec.compute_hours + o.spec.resources.changeover_hours));
  }

  // Adds to a counter what `total` has grown by since the last call.
  void CountTo(pm::Family<pm::Counter>* family, const pm::Labels& labels, double total) {
    std::string key = family->GetName();
    for (const auto& [k, v] : labels) key += "|" + k + "=" + v;
    double& seen = counted[key];
    pm::Counter& c = family->Add(labels);
    if (total > seen) c.Increment(total - seen);
    seen = std::max(seen, total);
  }

  void ScrapeWorkers(const std::vector<InstanceRecord>& live, const JobRecord& job, double wall);
  // Where the instance's worker serves /metrics: the address it published,
  // else 127.0.0.1 at the port the store holds; nullopt when neither is
  // known yet, or what is known is not an address (logged once).
  std::optional<std::pair<std::string, int>> MetricsEndpoint(const std::string& id);
  void RecordEpochs(const TrainingProgress& p, const std::vector<EventRecord>& events,
                    double now_s);
  void WriteCost(const TrainingProgress& p, double usd);
  Status Refresh();
};

std::optional<std::pair<std::string, int>> JobMonitor::Impl::MetricsEndpoint(
    const std::string& id) {
  // Both are fixed at the worker's start: kept once known.
  if (auto it = metrics_at.find(id); it != metrics_at.end()) return it->second;
  if (o.metrics_address) {
    if (const std::string published = o.metrics_address(id); !published.empty()) {
      auto parsed = ParseMetricsAddress(published);
      if (parsed.ok()) return metrics_at[id] = *parsed;
      if (!refused[id]) spdlog::warn("instance {}: {}; not scraped", id, parsed.status().message());
      refused[id] = true;
      return std::nullopt;
    }
  }
  int& port = metrics_ports[id];
  if (port <= 0) {
    auto text = o.store->GetValue(o.spec.name, MetricsPortKey(id));
    if (!text.ok() || !*text) return std::nullopt;
    auto parsed = ParseInteger(**text);
    if (!parsed.ok() || *parsed < 1 || *parsed > 65535) {
      if (!refused[id]) {
        spdlog::warn(
            "instance {}: metrics port '{}' in the job store is not a port (1..65535); "
            "not scraped",
            id, **text);
      }
      refused[id] = true;
      return std::nullopt;
    }
    port = static_cast<int>(*parsed);
  }
  return std::pair<std::string, int>{"127.0.0.1", port};
}

void JobMonitor::Impl::ScrapeWorkers(const std::vector<InstanceRecord>& live, const JobRecord& job,
                                     double wall) {
  json targets_json = json::array();
  std::vector<SamplePoint> points;
  std::map<std::string, bool> alive;
  for (const InstanceRecord& r : live) {
    alive[r.id] = true;
    const std::optional<std::pair<std::string, int>> at = MetricsEndpoint(r.id);
    if (!at) continue;
    const auto& [host, port] = *at;
    targets_json.push_back({{"targets", {HostPort(host, port)}},
                            {"labels",
                             {{"spot_job", o.spec.name},
                              {"spot_instance", r.id},
                              {"pool", r.zone_name},
                              {"lifecycle", Lifecycle(r.spot)}}}});
    httplib::Client client(host, port);
    client.set_connection_timeout(0, 300000);
    client.set_read_timeout(0, 500000);
    auto res = client.Get("/metrics");
    if (!res || res->status != 200) continue;
    auto parsed = monitor::ParseText(res->body);
    if (!parsed.ok()) continue;
    std::optional<double> compute = parsed->Value("spot_train_compute_seconds_total");
    if (!compute) continue;
    BusyTracker& b = busy_by_instance[r.id];
    if (b.last_wall >= 0 && wall > b.last_wall && *compute >= b.last_compute) {
      const double dt = wall - b.last_wall;
      // The interval counts in the market tick of its middle.
      const double mid_s =
          ((wall + b.last_wall) / 2 - job.wall_epoch_unix_s) * job.time_compression;
      const int64_t tick = static_cast<int64_t>(std::floor(mid_s / gap_s));
      const double frac = std::clamp((*compute - b.last_compute) / dt, 0.0, 1.0);
      busy->Add({{"job_id", o.spec.name}, {"worker_id", r.id}}).Set(frac);
      if (b.tick >= 0 && b.tick != tick && b.wall > 0) {
        points.push_back({"busy/" + r.id, static_cast<double>(b.tick) * gap_s, b.busy / b.wall});
        b.busy = b.wall = 0;
      }
      b.tick = tick;
      b.busy += std::min(*compute - b.last_compute, dt);
      b.wall += dt;
    }
    b.last_wall = wall;
    b.last_compute = *compute;
  }
  std::erase_if(metrics_ports, [&](const auto& kv) { return !alive.count(kv.first); });
  std::erase_if(metrics_at, [&](const auto& kv) { return !alive.count(kv.first); });
  std::erase_if(refused, [&](const auto& kv) { return !alive.count(kv.first); });
  // Instances gone since the last scrape: their last tick is complete.
  for (auto it = busy_by_instance.begin(); it != busy_by_instance.end();) {
    if (alive.count(it->first)) {
      ++it;
      continue;
    }
    const BusyTracker& b = it->second;
    if (b.tick >= 0 && b.wall > 0) {
      points.push_back({"busy/" + it->first, static_cast<double>(b.tick) * gap_s, b.busy / b.wall});
    }
    busy->Remove(&busy->Add({{"job_id", o.spec.name}, {"worker_id", it->first}}));
    it = busy_by_instance.erase(it);
  }
  targets = targets_json.dump();
  if (!points.empty()) {
    Status s = o.store->AppendSamples(o.spec.name, points);
    if (!s.ok()) spdlog::warn("utilization samples: {}", s.message());
  }
}

void JobMonitor::Impl::RecordEpochs(const TrainingProgress& p,
                                    const std::vector<EventRecord>& events, double now_s) {
  if (epochs_recorded < 0) {  // a restarted controller counts what an earlier one recorded
    epochs_recorded = 0;
    for (const EventRecord& e : events) epochs_recorded += e.kind == "epoch" ? 1 : 0;
  }
  if (!p.known) return;
  while (epochs_recorded < p.epoch) {
    ++epochs_recorded;
    json detail = {{"epoch", epochs_recorded}, {"step", p.step}};
    if (p.test_accuracy >= 0) detail["test_accuracy"] = p.test_accuracy;
    Status s = o.store->AppendEvent(o.spec.name, {.sim_s = now_s,
                                                  .wall_unix_s = o.clock->NowUnixS(),
                                                  .kind = "epoch",
                                                  .detail = detail.dump()});
    if (!s.ok()) spdlog::warn("epoch event: {}", s.message());
  }
}

void JobMonitor::Impl::WriteCost(const TrainingProgress& p, double usd) {
  if (o.tensorboard_dir.empty() || tb_failed || !p.known || p.step <= tb_step) return;
  if (!tb) {
    auto w = monitor::EventWriter::Open(o.tensorboard_dir);
    if (!w.ok()) {
      spdlog::warn("TensorBoard cost events off: {}", w.status().message());
      tb_failed = true;
      return;
    }
    tb = std::move(w).value();
  }
  tb_step = p.step;
  const double done_h = p.total_steps > 0 ? o.spec.compute_hours * static_cast<double>(p.step) /
                                                static_cast<double>(p.total_steps)
                                          : 0;
  Status s = tb->AddScalars(
      p.step, {{"cost/usd", usd},
               {"cost/ondemand_usd_for_same_work", static_cast<double>(o.spec.resources.nodes) *
                                                       o.spec.resources.ondemand_price * done_h}});
  if (!s.ok()) {
    spdlog::warn("TensorBoard cost events off: {}", s.message());
    tb_failed = true;
  }
}

Status JobMonitor::Impl::Refresh() {
  SPOT_ASSIGN_OR_RETURN(std::optional<JobRecord> job, o.store->GetJob(o.spec.name));
  if (!job) return Status::Ok();  // not created yet
  SPOT_ASSIGN_OR_RETURN(std::vector<InstanceRecord> all, o.store->Instances(o.spec.name, false));
  SPOT_ASSIGN_OR_RETURN(std::vector<EventRecord> events, o.store->Events(o.spec.name));
  SPOT_ASSIGN_OR_RETURN(std::vector<LedgerEntry> ledger, o.store->Ledger(o.spec.name));
  const double wall = o.clock->NowUnixS();
  const double now_s = JobNowSeconds(*job, all, wall);
  TrainingProgress p = ReadTrainingProgress(o.progress_path);
  std::lock_guard<std::mutex> l(mu);
  for (JobState s :
       {JobState::kPending, JobState::kProvisioning, JobState::kRunning, JobState::kRecovering,
        JobState::kSucceeded, JobState::kFailed, JobState::kCancelled}) {
    job_state->Add({{"job_id", o.spec.name}, {"state", std::string(JobStateName(s))}})
        .Set(s == job->state ? 1 : 0);
  }
  // Instances by pool and lifecycle; pools of the market always show.
  std::map<std::pair<std::string, bool>, int> running;
  for (const market::Trace* z : o.zones) running[{z->pool.zone, true}] = 0;
  running[{"on-demand", false}] = 0;
  std::vector<InstanceRecord> live;
  std::map<std::string, const InstanceRecord*> by_id;
  for (const InstanceRecord& r : all) {
    by_id[r.id] = &r;
    if (!r.ended_s) {
      ++running[{r.zone_name, r.spot}];
      live.push_back(r);
    }
  }
  for (const auto& [key, n] : running) {
    instances
        ->Add({{"job_id", o.spec.name}, {"pool", key.first}, {"lifecycle", Lifecycle(key.second)}})
        .Set(n);
  }
  std::map<std::pair<std::string, std::string>, double> counts;  // (kind, pool) -> n
  for (const EventRecord& e : events) {
    auto it = by_id.find(e.instance_id);
    if (it == by_id.end()) continue;
    counts[{e.kind, it->second->zone_name}] += 1;
  }
  for (const auto& [key, n] : running) {
    const std::string& pool = key.first;
    const pm::Labels pool_labels{{"job_id", o.spec.name}, {"pool", pool}};
    CountTo(launches,
            {{"job_id", o.spec.name}, {"pool", pool}, {"lifecycle", Lifecycle(key.second)}},
            counts[{"launch", pool}]);
    if (key.second) {
      CountTo(preemptions, pool_labels, counts[{"preempt", pool}]);
      CountTo(notices, pool_labels, counts[{"notice", pool}]);
    }
  }
  double spot_usd = 0, od_usd = 0;
  for (const LedgerEntry& e : ledger) {
    auto it = by_id.find(e.instance_id);
    (it != by_id.end() && !it->second->spot ? od_usd : spot_usd) += e.usd;
  }
  CountTo(cost, {{"job_id", o.spec.name}, {"lifecycle", "spot"}}, spot_usd);
  CountTo(cost, {{"job_id", o.spec.name}, {"lifecycle", "on_demand"}}, od_usd);
  // The market now.
  const int64_t abs = job->start_tick + static_cast<int64_t>(std::floor(now_s / gap_s));
  if (abs != risk_tick) {
    risk_tick = abs;
    pool_risk.clear();
    for (const market::Trace* z : o.zones) {
      pool_risk.push_back(
          PreemptionRisk(*z, abs, static_cast<int>(o.spec.resources.nodes), /*horizon_h=*/1));
    }
  }
  for (size_t i = 0; i < o.zones.size(); ++i) {
    const market::Trace& z = *o.zones[i];
    const int64_t at = std::clamp<int64_t>(abs, 0, z.ticks() - 1);
    const pm::Labels labels{{"pool", z.pool.zone}};
    if (z.has_prices()) price->Add(labels).Set(z.price[at]);
    capacity->Add(labels).Set(z.available[at]);
    risk->Add({{"pool", z.pool.zone}, {"horizon", "1h"}}).Set(pool_risk[i]);
  }
  sim_time->Set(now_s);
  deadline_left->Set(o.spec.deadline_hours * 3600 - now_s);
  if (p.known) {
    const double ratio =
        p.total_steps > 0 ? static_cast<double>(p.step) / static_cast<double>(p.total_steps) : 0;
    progress_ratio->Set(ratio);
    work_done->Set(ratio * o.spec.compute_hours * 3600);
    step->Set(static_cast<double>(p.step));
    total_steps->Set(static_cast<double>(p.total_steps));
    workers->Set(p.world);
    loss->Set(p.loss);
    if (p.test_accuracy >= 0) accuracy->Set(p.test_accuracy);
    generation->Set(static_cast<double>(p.generation));
  }
  ScrapeWorkers(live, *job, wall);
  RecordEpochs(p, events, now_s);
  WriteCost(p, spot_usd + od_usd);
  return Status::Ok();
}

JobMonitor::JobMonitor(JobMonitorOptions options) : impl_(std::make_unique<Impl>()) {
  impl_->o = std::move(options);
  if (!impl_->o.clock) impl_->o.clock = RealClock();
  impl_->gap_s = impl_->o.zones.empty() ? 1 : impl_->o.zones[0]->gap_seconds;
  impl_->Build();
}

JobMonitor::~JobMonitor() = default;

Status JobMonitor::Refresh() { return impl_->Refresh(); }

void JobMonitor::ObserveReconcile(double seconds) { impl_->reconcile->Observe(seconds); }

std::string JobMonitor::MetricsText() const {
  std::lock_guard<std::mutex> l(impl_->mu);
  return monitor::ExposeText(*impl_->registry);
}

std::string JobMonitor::TargetsJson() const {
  std::lock_guard<std::mutex> l(impl_->mu);
  return impl_->targets;
}

Result<std::string> JobMonitor::DashboardJson(bool live) const {
  std::vector<double> risk;
  {
    std::lock_guard<std::mutex> l(impl_->mu);
    risk = impl_->pool_risk;
  }
  return DashboardData({.spec = &impl_->o.spec,
                        .store = impl_->o.store,
                        .zones = impl_->o.zones,
                        .job_dir = impl_->o.job_dir,
                        .epochs = impl_->o.epochs,
                        .live = live,
                        .wall_now_unix_s = impl_->o.clock->NowUnixS(),
                        .pool_risk = risk});
}

}  // namespace spot::control
