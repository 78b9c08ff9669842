#include "apps/spot/worker_monitor.h"

#include <fmt/format.h>
#include <prometheus/counter.h>
#include <prometheus/gauge.h>
#include <prometheus/histogram.h>
#include <prometheus/registry.h>
#include <spdlog/spdlog.h>

#include <chrono>
#include <cmath>
#include <map>
#include <mutex>
#include <optional>

#include "core/net.h"
#include "monitor/chrome_trace.h"
#include "monitor/gradient_watch.h"
#include "monitor/metrics.h"
#include "monitor/metrics_server.h"
#include "monitor/tensorboard.h"

namespace spot::cli {

namespace pm = prometheus;

struct WorkerMonitor::Impl {
  WorkerMonitorOptions opt;
  std::shared_ptr<pm::Registry> registry = std::make_shared<pm::Registry>();
  pm::Labels labels;
  pm::Counter* steps = nullptr;
  pm::Counter* samples = nullptr;
  pm::Counter* compute_seconds = nullptr;
  pm::Histogram* step_seconds = nullptr;
  pm::Histogram* collective_seconds = nullptr;
  pm::Gauge* samples_per_s = nullptr;
  pm::Gauge* loss = nullptr;
  pm::Gauge* lr = nullptr;
  pm::Gauge* grad_norm = nullptr;
  pm::Gauge* step = nullptr;
  pm::Gauge* epoch = nullptr;
  pm::Gauge* accuracy = nullptr;
  pm::Gauge* generation = nullptr;
  pm::Gauge* world = nullptr;
  pm::Gauge* rank = nullptr;
  // Per phase of a step, in StepPhase order: data, forward, backward, sync, optimizer.
  std::map<std::string, pm::Histogram*> phase_seconds;
  std::unique_ptr<monitor::TraceLog> trace;
  pm::Counter* grad_explosions = nullptr;
  pm::Gauge* stragglers = nullptr;
  monitor::GradientWatch gradient_watch;  // 10x the moving average, after 20 steps
  pm::Histogram* ckpt_stall = nullptr;
  pm::Counter* ckpt_saves = nullptr;
  pm::Counter* ckpt_bytes = nullptr;
  std::unique_ptr<monitor::MetricsServer> server;

  // Event files: opened when this worker first steps as rank 0.
  std::mutex tb_mu;
  std::unique_ptr<monitor::EventWriter> tb;
  bool tb_failed = false;
  double rate_ema = 0;

  void Build() {
    using monitor::AddCounter;
    using monitor::AddGauge;
    using monitor::AddHistogram;
    pm::Registry& r = *registry;
    const auto step_buckets = monitor::ExponentialBuckets(0.005, 2, 12);  // 5 ms .. 10 s
    steps = &AddCounter(r, "spot_train_steps_total", "Committed steps this worker took part in")
                 .Add(labels);
    samples = &AddCounter(r, "spot_train_samples_total", "Training samples this worker computed")
                   .Add(labels);
    compute_seconds = &AddCounter(r, "spot_train_compute_seconds_total",
                                  "Seconds spent in forward and backward passes (busy time)")
                           .Add(labels);
    step_seconds = &AddHistogram(r, "spot_train_step_seconds", "Wall time of one training step")
                        .Add(labels, step_buckets);
    collective_seconds =
        &AddHistogram(r, "spot_train_collective_seconds",
                      "Wall time of a step's all-reduces (gradients and control values)")
             .Add(labels, step_buckets);
    auto& phase_family = AddHistogram(
        r, "spot_train_phase_seconds",
        "Wall time per step in each phase: data (batch assembly and transfer), forward (with "
        "the loss), backward, sync (gradient all-reduce), optimizer");
    for (const char* phase : {"data", "forward", "backward", "sync", "optimizer"}) {
      pm::Labels l = labels;
      l["phase"] = phase;
      phase_seconds[phase] = &phase_family.Add(l, monitor::ExponentialBuckets(0.0001, 2, 16));
    }
    grad_explosions = &AddCounter(r, "spot_train_grad_explosions_total",
                                  "Steps whose gradient norm exceeded 10 x its moving average")
                           .Add(labels);
    stragglers = &AddGauge(r, "spot_train_stragglers",
                           "Workers of the group flagged as stragglers (reported by rank 0)")
                      .Add(labels);
    samples_per_s = &AddGauge(r, "spot_train_samples_per_second",
                              "Global training throughput: the batch over the last step's time "
                              "(moving average)")
                         .Add(labels);
    loss = &AddGauge(r, "spot_train_loss", "Mean training loss of the last step's global batch")
                .Add(labels);
    lr = &AddGauge(r, "spot_train_learning_rate", "Learning rate of the last step").Add(labels);
    grad_norm =
        &AddGauge(r, "spot_train_grad_norm", "L2 norm of the last step's global mean gradient")
             .Add(labels);
    step = &AddGauge(r, "spot_train_step", "The job's committed steps").Add(labels);
    epoch = &AddGauge(r, "spot_train_epoch", "The epoch being trained (0-based)").Add(labels);
    accuracy = &AddGauge(r, "spot_train_test_accuracy_ratio",
                         "Test accuracy of the last evaluation (0 to 1)")
                    .Add(labels);
    generation =
        &AddGauge(r, "spot_worker_generation", "The rendezvous generation this worker trains in")
             .Add(labels);
    world =
        &AddGauge(r, "spot_worker_world_size", "Workers in this worker's generation").Add(labels);
    rank = &AddGauge(r, "spot_worker_rank", "This worker's rank in its generation").Add(labels);
    ckpt_stall = &AddHistogram(r, "spot_checkpoint_stall_seconds",
                               "Training time blocked per checkpoint save (the snapshot)")
                      .Add(labels, monitor::ExponentialBuckets(0.0005, 2, 14));
    ckpt_saves =
        &AddCounter(r, "spot_checkpoint_saves_total", "Checkpoint saves this worker started")
             .Add(labels);
    ckpt_bytes = &AddCounter(r, "spot_checkpoint_written_bytes_total",
                             "Checkpoint bytes written to the local tier")
                      .Add(labels);
  }

  void TensorBoard(int64_t at_step, const std::vector<std::pair<std::string, double>>& values) {
    if (opt.tensorboard_dir.empty()) return;
    std::lock_guard<std::mutex> l(tb_mu);
    if (tb_failed) return;
    if (!tb) {
      auto w = monitor::EventWriter::Open(opt.tensorboard_dir);
      if (!w.ok()) {
        spdlog::warn("TensorBoard events off: {}", w.status().message());
        tb_failed = true;
        return;
      }
      tb = std::move(w).value();
    }
    if (Status s = tb->AddScalars(at_step, values); !s.ok()) {
      spdlog::warn("TensorBoard events off: {}", s.message());
      tb_failed = true;
    }
  }

  void OnStep(const dist::StepStats& s) {
    steps->Increment();
    std::map<std::string, double> per_phase;
    for (const dist::PhaseTime& p : s.phases) {
      per_phase[p.phase] += p.seconds;
      if (trace) trace->Complete(p.phase, monitor::TraceLane::kStep, p.start, p.seconds, s.step);
    }
    for (const auto& [phase, seconds] : per_phase) {
      if (auto it = phase_seconds.find(phase); it != phase_seconds.end()) {
        it->second->Observe(seconds);
      }
    }
    samples->Increment(static_cast<double>(s.samples));
    compute_seconds->Increment(s.compute_seconds);
    step_seconds->Observe(s.step_seconds);
    collective_seconds->Observe(s.collective_seconds);
    const double rate = s.step_seconds > 0 ? static_cast<double>(s.batch) / s.step_seconds : 0;
    rate_ema = rate_ema == 0 ? rate : 0.9 * rate_ema + 0.1 * rate;
    samples_per_s->Set(rate_ema);
    loss->Set(s.loss);
    lr->Set(s.lr);
    grad_norm->Set(s.grad_norm);
    step->Set(static_cast<double>(s.step));
    epoch->Set(static_cast<double>(s.epoch));
    generation->Set(static_cast<double>(s.generation));
    world->Set(s.world);
    rank->Set(s.rank);
    if (s.rank == 0) {
      CheckGradients(s);
      stragglers->Set(s.stragglers);
    }
    if (s.rank == 0) {
      TensorBoard(s.step, {{"train/loss", s.loss},
                           {"train/learning_rate", s.lr},
                           {"train/grad_norm", s.grad_norm},
                           {"train/samples_per_second", rate_ema},
                           {"train/workers", s.world}});
    }
  }
  // Layer groups to TensorBoard, and the alert on exploding gradients.
  void CheckGradients(const dist::StepStats& s) {
    if (!s.layers.empty()) {
      std::vector<std::pair<std::string, double>> values;
      for (const dist::LayerStats& l : s.layers) {
        values.push_back({"grad_norm/" + l.group, l.grad_norm});
        values.push_back({"update_ratio/" + l.group, l.update_ratio});
      }
      TensorBoard(s.step, values);
    }
    const std::optional<double> ratio = gradient_watch.Observe(s.grad_norm);
    if (!ratio) return;
    grad_explosions->Increment();
    std::string largest;
    double most = -1;
    for (const dist::LayerStats& l : s.layers) {
      if (l.grad_norm > most) most = l.grad_norm, largest = l.group;
    }
    spdlog::warn(
        "step {}: gradient norm {:.4g} is {:.0f}x its moving average {:.4g}{}: exploding "
        "gradients (lower the learning rate, clip, or warm up longer)",
        s.step, s.grad_norm, *ratio, gradient_watch.average(),
        largest.empty() ? "" : fmt::format(" (largest in {})", largest));
    TensorBoard(s.step, {{"alerts/grad_explosion", 1}});
  }
  void OnEval(const dist::EvalStats& e) {
    accuracy->Set(e.test_accuracy);
    if (e.rank == 0) {
      TensorBoard(e.step,
                  {{"eval/test_accuracy", e.test_accuracy}, {"eval/test_loss", e.test_loss}});
    }
  }
};

WorkerMonitor::WorkerMonitor(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
WorkerMonitor::~WorkerMonitor() = default;

Result<std::unique_ptr<WorkerMonitor>> WorkerMonitor::Start(const WorkerMonitorOptions& options) {
  auto impl = std::make_unique<Impl>();
  impl->opt = options;
  impl->labels = {{"job_id", options.job_id}, {"worker_id", options.worker_id}};
  impl->Build();
  if (!options.trace_path.empty()) {
    auto trace = monitor::TraceLog::Open(options.trace_path);
    if (trace.ok()) {
      impl->trace = std::move(trace).value();
    } else {
      spdlog::warn("step profile off: {}", trace.status().message());
    }
  }
  if (options.metrics_port >= 0) {
    SPOT_ASSIGN_OR_RETURN(
        impl->server,
        monitor::MetricsServer::Start(
            impl->registry, {.host = options.metrics_host,
                             .reachable_from_network = !IsLoopbackHost(options.metrics_host),
                             .port = options.metrics_port}));
  }
  return std::unique_ptr<WorkerMonitor>(new WorkerMonitor(std::move(impl)));
}

int WorkerMonitor::metrics_port() const { return impl_->server ? impl_->server->port() : 0; }

dist::WorkerObserver WorkerMonitor::Observer() {
  Impl* m = impl_.get();
  return {.on_step = [m](const dist::StepStats& s) { m->OnStep(s); },
          .on_eval = [m](const dist::EvalStats& e) { m->OnEval(e); },
          .on_checkpoint =
              [m](const dist::CheckpointStats& c) {
                m->ckpt_saves->Increment();
                m->ckpt_stall->Observe(c.stall_seconds);
                if (m->trace) {
                  m->trace->Complete("save", monitor::TraceLane::kCheckpoint, c.start,
                                     c.stall_seconds, c.step);
                }
              },
          .on_checkpoint_written =
              [m](const dist::CheckpointWritten& w) {
                m->ckpt_bytes->Increment(static_cast<double>(w.file_bytes));
              }};
}

}  // namespace spot::cli
