#include "control/dashboard_data.h"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>

#include "control/controller.h"
#include "control/job_monitor.h"
#include "core/job_files.h"

namespace spot::control {
namespace {

using json = nlohmann::json;
namespace fs = std::filesystem;

constexpr size_t kMaxTrainingPoints = 2000;

json NumberOrNull(double v, bool known) { return known ? json(v) : json(nullptr); }

// The cumulative cost at any time, from ledger rows (each within one tick).
class CostCurve {
 public:
  explicit CostCurve(std::vector<LedgerEntry> rows) : rows_(std::move(rows)) {
    std::sort(rows_.begin(), rows_.end(),
              [](const LedgerEntry& a, const LedgerEntry& b) { return a.to_s < b.to_s; });
    prefix_.reserve(rows_.size() + 1);
    prefix_.push_back(0);
    for (const LedgerEntry& r : rows_) prefix_.push_back(prefix_.back() + r.usd);
  }
  // Dollars billed for the time before t (rows straddling t count in part).
  double At(double t) const {
    auto it = std::upper_bound(rows_.begin(), rows_.end(), t,
                               [](double v, const LedgerEntry& r) { return v < r.to_s; });
    size_t i = static_cast<size_t>(it - rows_.begin());
    double usd = prefix_[i];
    // Rows ending after t may have started before it (several instances).
    for (size_t j = i; j < rows_.size() && rows_[j].from_s < t; ++j) {
      const LedgerEntry& r = rows_[j];
      if (r.to_s > r.from_s) usd += r.usd * (t - r.from_s) / (r.to_s - r.from_s);
    }
    return usd;
  }
  double Total() const { return prefix_.back(); }

 private:
  std::vector<LedgerEntry> rows_;
  std::vector<double> prefix_;
};

// steps.csv: "step,epoch,loss,lr" per committed step (a redone step repeats).
json TrainingSeries(const std::string& path) {
  std::vector<double> step, loss, lr;
  for (const StepLogRow& r : ReadStepLog(path)) {
    if (!std::isfinite(r.loss) || !std::isfinite(r.lr)) continue;  // not plottable
    step.push_back(static_cast<double>(r.step));
    loss.push_back(r.loss);
    lr.push_back(r.lr);
  }
  const size_t every =
      std::max<size_t>(1, (step.size() + kMaxTrainingPoints - 1) / kMaxTrainingPoints);
  json out = {{"step", json::array()}, {"loss", json::array()}, {"lr", json::array()}};
  for (size_t i = 0; i < step.size(); ++i) {
    if (i % every != 0 && i + 1 != step.size()) continue;
    out["step"].push_back(step[i]);
    out["loss"].push_back(loss[i]);
    out["lr"].push_back(lr[i]);
  }
  return out;
}

}  // namespace

double JobNowSeconds(const JobRecord& job, const std::vector<InstanceRecord>& instances,
                     double wall_now_unix_s) {
  if (!IsTerminal(job.state)) {
    return std::max(0.0, (wall_now_unix_s - job.wall_epoch_unix_s) * job.time_compression);
  }
  double end = 0;
  for (const InstanceRecord& r : instances)
    end = std::max(end, r.ended_s.value_or(r.billed_until_s));
  return end;
}

Result<std::string> DashboardData(const DashboardInputs& in) {
  const RunSpec& spec = *in.spec;
  SPOT_ASSIGN_OR_RETURN(std::optional<JobRecord> job, in.store->GetJob(spec.name));
  if (!job) return NotFoundError("no job " + spec.name + " in " + in.store->path());
  SPOT_ASSIGN_OR_RETURN(std::vector<InstanceRecord> instances,
                        in.store->Instances(spec.name, false));
  SPOT_ASSIGN_OR_RETURN(std::vector<EventRecord> events, in.store->Events(spec.name));
  SPOT_ASSIGN_OR_RETURN(std::vector<DecisionRecord> decisions, in.store->Decisions(spec.name));
  SPOT_ASSIGN_OR_RETURN(std::vector<SamplePoint> busy, in.store->Samples(spec.name, "busy/"));
  SPOT_ASSIGN_OR_RETURN(std::vector<LedgerEntry> ledger, in.store->Ledger(spec.name));
  const CostCurve cost(std::move(ledger));
  const double gap = in.zones.empty() ? 1 : in.zones[0]->gap_seconds;
  const double now_s = JobNowSeconds(*job, instances, in.wall_now_unix_s);
  const int64_t now_tick = static_cast<int64_t>(std::floor(now_s / gap));
  const double nodes = static_cast<double>(spec.resources.nodes);
  const double od_price = spec.resources.ondemand_price;
  const double od_total = nodes * od_price * (spec.compute_hours + spec.resources.changeover_hours);
  TrainingProgress p = ReadTrainingProgress(JobFiles{in.job_dir}.progress());
  if (!p.known) {  // the job's directory is gone: the store keeps the last report
    auto stored = in.store->GetValue(spec.name, "progress");
    if (stored.ok() && *stored) p = ParseTrainingProgress(**stored);
  }

  json out;
  out["version"] = 1;
  out["live"] = in.live && !IsTerminal(job->state);
  out["generated_unix_s"] = in.wall_now_unix_s;
  const double market_start =
      in.zones.empty() || in.zones[0]->start_unix_s <= 0
          ? 0
          : in.zones[0]->start_unix_s + static_cast<double>(job->start_tick) * gap;
  out["job"] = {{"id", job->id},
                {"state", std::string(JobStateName(job->state))},
                {"message", job->message},
                {"policy", spec.policy.name},
                {"instance_type", spec.resources.instance_type},
                {"region", spec.resources.region},
                {"nodes", spec.resources.nodes},
                {"min_nodes", spec.resources.min_nodes},
                {"compute_hours", spec.compute_hours},
                {"deadline_hours", spec.deadline_hours},
                {"budget_usd", NumberOrNull(spec.budget_usd, spec.budget_usd > 0)},
                {"ondemand_price", od_price},
                {"time_compression", job->time_compression},
                {"now_s", now_s},
                {"market_start_unix_s", market_start}};

  int notices = 0, launches = 0, preemptions = 0;
  for (const EventRecord& e : events) {
    notices += e.kind == "notice" ? 1 : 0;
    launches += e.kind == "launch" ? 1 : 0;
  }
  for (const DecisionRecord& d : decisions) preemptions += d.preempted ? 1 : 0;
  out["summary"] = {
      {"cost_usd", cost.Total()},
      {"ondemand_usd", od_total},
      {"step", p.step},
      {"total_steps", p.total_steps},
      {"epoch", p.epoch},
      {"epochs", in.epochs},
      {"test_accuracy", NumberOrNull(p.test_accuracy, p.known && p.test_accuracy >= 0)},
      {"preemptions", preemptions},
      {"notices", notices},
      {"launches", launches},
      {"workers", p.known && !p.done && !IsTerminal(job->state) ? p.world : 0}};

  // The pools, tick by tick up to now (never ahead: a live page must not show the future).
  json pools = json::array();
  for (size_t z = 0; z < in.zones.size(); ++z) {
    const market::Trace& t = *in.zones[z];
    json ts = json::array(), price = json::array(), cap = json::array();
    for (int64_t k = 0; k <= now_tick; ++k) {
      const int64_t abs = std::min(job->start_tick + k, t.ticks() - 1);
      ts.push_back(static_cast<double>(k) * gap);
      cap.push_back(t.available[abs]);
      if (t.has_prices()) price.push_back(t.price[abs]);
    }
    const double r = z < in.pool_risk.size()
                         ? in.pool_risk[z]
                         : PreemptionRisk(t, job->start_tick + now_tick,
                                          static_cast<int>(spec.resources.nodes), 1);
    pools.push_back({{"name", t.pool.zone},
                     {"t_s", std::move(ts)},
                     {"price", std::move(price)},
                     {"capacity", std::move(cap)},
                     {"risk", NumberOrNull(r, r >= 0)}});
  }
  out["pools"] = std::move(pools);

  json inst = json::array();
  for (const InstanceRecord& r : instances) {
    inst.push_back({{"id", r.id},
                    {"pool", r.zone_name},
                    {"spot", r.spot},
                    {"launched_s", r.launched_s},
                    {"ended_s", r.ended_s ? json(*r.ended_s) : json(nullptr)},
                    {"end_reason", r.end_reason}});
  }
  out["instances"] = std::move(inst);
  json ev = json::array();
  for (const EventRecord& e : events) {
    ev.push_back(
        {{"t_s", e.sim_s}, {"kind", e.kind}, {"instance", e.instance_id}, {"detail", e.detail}});
  }
  out["events"] = std::move(ev);

  json prog_t = json::array(), prog_h = json::array();
  for (const DecisionRecord& d : decisions) {
    prog_t.push_back(static_cast<double>(d.tick) * gap);
    prog_h.push_back(d.progress_hours);
  }
  if (p.known && p.total_steps > 0) {
    prog_t.push_back(now_s);
    prog_h.push_back(std::min(spec.compute_hours, spec.compute_hours * static_cast<double>(p.step) /
                                                      static_cast<double>(p.total_steps)));
  }
  out["progress"] = {{"t_s", std::move(prog_t)}, {"hours", std::move(prog_h)}};

  json cost_t = json::array(), cost_usd = json::array(), cost_od = json::array();
  for (int64_t k = 0; k <= now_tick + 1; ++k) {
    const double t = std::min(static_cast<double>(k) * gap, now_s);
    cost_t.push_back(t);
    cost_usd.push_back(cost.At(t));
    cost_od.push_back(std::min(od_total, nodes * od_price * t / 3600));
    if (t >= now_s) break;
  }
  out["cost"] = {{"t_s", std::move(cost_t)},
                 {"usd", std::move(cost_usd)},
                 {"ondemand_usd", std::move(cost_od)}};

  // Epochs and the evaluation curve, both from the "epoch" events.
  json epochs = json::array();
  json eval_step = json::array(), eval_acc = json::array();
  double epoch_start = 0;
  int64_t last_epoch = 0;
  for (const EventRecord& e : events) {
    if (e.kind != "epoch") continue;
    auto d = json::parse(e.detail, nullptr, false);
    if (d.is_discarded()) continue;
    last_epoch = d.value("epoch", last_epoch + 1);
    epochs.push_back(
        {{"epoch", last_epoch},
         {"start_s", epoch_start},
         {"end_s", e.sim_s},
         {"usd", cost.At(e.sim_s) - cost.At(epoch_start)},
         {"test_accuracy", d.contains("test_accuracy") ? d["test_accuracy"] : json(nullptr)},
         {"ongoing", false}});
    epoch_start = e.sim_s;
    if (d.contains("test_accuracy")) {
      eval_step.push_back(d.value("step", 0));
      eval_acc.push_back(d["test_accuracy"]);
    }
  }
  if (!IsTerminal(job->state) && now_s > epoch_start &&
      (in.epochs == 0 || last_epoch < in.epochs)) {
    epochs.push_back({{"epoch", last_epoch + 1},
                      {"start_s", epoch_start},
                      {"end_s", now_s},
                      {"usd", cost.At(now_s) - cost.At(epoch_start)},
                      {"test_accuracy", nullptr},
                      {"ongoing", true}});
  }
  out["epochs"] = std::move(epochs);

  // Worker-by-tick utilization.
  std::map<std::string, std::map<int64_t, double>> by_worker;
  for (const SamplePoint& s : busy) {
    by_worker[s.series.substr(5)][static_cast<int64_t>(std::llround(s.t_s / gap))] = s.value;
  }
  json util_t = json::array();
  for (int64_t k = 0; k <= now_tick; ++k) util_t.push_back(static_cast<double>(k) * gap);
  json workers = json::array();
  for (const InstanceRecord& r : instances) {
    auto it = by_worker.find(r.id);
    if (it == by_worker.end()) continue;
    json row = json::array();
    for (int64_t k = 0; k <= now_tick; ++k) {
      auto v = it->second.find(k);
      row.push_back(v == it->second.end() ? json(nullptr) : json(v->second));
    }
    workers.push_back({{"id", r.id}, {"pool", r.zone_name}, {"busy", std::move(row)}});
  }
  out["utilization"] = {
      {"bucket_s", gap}, {"t_s", std::move(util_t)}, {"workers", std::move(workers)}};

  out["training"] = TrainingSeries(JobFiles{in.job_dir}.step_log());
  out["evaluation"] = {{"step", std::move(eval_step)}, {"test_accuracy", std::move(eval_acc)}};
  return out.dump(-1, ' ', false, json::error_handler_t::replace);
}

}  // namespace spot::control
