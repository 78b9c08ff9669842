#include "monitor_workload.h"

#include <fmt/format.h>
#include <httplib.h>
#include <prometheus/counter.h>
#include <prometheus/gauge.h>
#include <prometheus/histogram.h>
#include <prometheus/registry.h>
#include <prometheus/text_serializer.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <regex>
#include <thread>

#include "bench_process.h"
#include "core/file_io.h"
#include "monitor/metrics.h"
#include "monitor/tensorboard.h"
#include "report.h"

namespace spot::bench {
namespace {

namespace fs = std::filesystem;
namespace pm = prometheus;
using Clock = std::chrono::steady_clock;

double Since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

// A registry shaped like a worker's: 19 families, 3 histograms of 12-14 buckets.
std::shared_ptr<pm::Registry> WorkerRegistry() {
  auto r = std::make_shared<pm::Registry>();
  const pm::Labels l{{"job_id", "fashion-mnist-spot"}, {"worker_id", "i-0123456789abcdef0"}};
  for (const char* n :
       {"spot_train_steps_total", "spot_train_samples_total", "spot_train_compute_seconds_total",
        "spot_checkpoint_saves_total", "spot_checkpoint_written_bytes_total"}) {
    monitor::AddCounter(*r, n, "a counter").Add(l).Increment(12345.5);
  }
  for (const char* n : {"spot_train_samples_per_second", "spot_train_loss",
                        "spot_train_learning_rate", "spot_train_grad_norm", "spot_train_step",
                        "spot_train_epoch", "spot_train_test_accuracy_ratio",
                        "spot_worker_generation", "spot_worker_world_size", "spot_worker_rank"}) {
    monitor::AddGauge(*r, n, "a gauge").Add(l).Set(0.123456789);
  }
  for (const char* n : {"spot_train_step_seconds", "spot_train_collective_seconds",
                        "spot_checkpoint_stall_seconds"}) {
    auto& h = monitor::AddHistogram(*r, n, "a histogram")
                  .Add(l, monitor::ExponentialBuckets(0.0005, 2, 14));
    for (int i = 0; i < 1000; ++i) h.Observe(0.001 * (i % 97));
  }
  return r;
}

// A controller's: the job's gauges and per-pool series for 8 pools.
std::shared_ptr<pm::Registry> ControllerRegistry() {
  auto r = std::make_shared<pm::Registry>();
  auto& instances = monitor::AddGauge(*r, "spot_instances", "instances");
  auto& cost = monitor::AddCounter(*r, "spot_cost_dollars_total", "cost");
  auto& price = monitor::AddGauge(*r, "spot_pool_price_dollars_per_hour", "price");
  auto& risk = monitor::AddGauge(*r, "spot_pool_preemption_risk_ratio", "risk");
  auto& state = monitor::AddGauge(*r, "spot_job_state", "state");
  for (int p = 0; p < 8; ++p) {
    const std::string pool = fmt::format("us-east-1{}", static_cast<char>('a' + p));
    instances.Add({{"job_id", "j"}, {"pool", pool}, {"lifecycle", "spot"}}).Set(p % 3);
    price.Add({{"pool", pool}}).Set(0.9 + 0.01 * p);
    risk.Add({{"pool", pool}, {"horizon", "1h"}}).Set(0.05 * p);
  }
  cost.Add({{"job_id", "j"}, {"lifecycle", "spot"}}).Increment(4.49);
  for (const char* s : {"PENDING", "PROVISIONING", "RUNNING", "RECOVERING", "SUCCEEDED"}) {
    state.Add({{"job_id", "j"}, {"state", s}}).Set(0);
  }
  monitor::AddHistogram(*r, "spot_reconcile_seconds", "reconcile")
      .Add({{"job_id", "j"}}, monitor::ExponentialBuckets(0.0001, 2, 14))
      .Observe(0.0004);
  return r;
}

struct ExpositionTimes {
  double ours_us = 0, theirs_us = 0, parse_us = 0;
  size_t bytes = 0;
};

ExpositionTimes TimeExposition(const pm::Registry& r, int n) {
  ExpositionTimes t;
  std::vector<double> ours, theirs, parse;
  pm::TextSerializer serializer;
  size_t sink = 0;
  for (int rep = 0; rep < 5; ++rep) {
    auto t0 = Clock::now();
    for (int i = 0; i < n; ++i) sink += monitor::ExposeText(r).size();
    ours.push_back(Since(t0) / n * 1e6);
    t0 = Clock::now();
    for (int i = 0; i < n; ++i) sink += serializer.Serialize(r.Collect()).size();
    theirs.push_back(Since(t0) / n * 1e6);
    const std::string text = monitor::ExposeText(r);
    t0 = Clock::now();
    for (int i = 0; i < n; ++i) sink += monitor::ParseText(text)->samples.size();
    parse.push_back(Since(t0) / n * 1e6);
    t.bytes = text.size();
  }
  if (sink == 42) std::fputs("", stderr);
  t.ours_us = Median(ours);
  t.theirs_us = Median(theirs);
  t.parse_us = Median(parse);
  return t;
}

// Event files: our writer against fwrite + fflush of the very bytes it wrote.
Result<std::pair<double, double>> TimeEvents(const fs::path& dir, int n) {
  fs::remove_all(dir);
  std::vector<double> ours, raw;
  for (int rep = 0; rep < 3; ++rep) {
    const fs::path run = dir / fmt::format("run{}", rep);
    SPOT_ASSIGN_OR_RETURN(auto w, monitor::EventWriter::Open(run.string()));
    auto t0 = Clock::now();
    for (int i = 0; i < n; ++i) {
      SPOT_RETURN_IF_ERROR(w->AddScalars(i, {{"train/loss", 0.5 + 1e-6 * i},
                                             {"train/learning_rate", 0.002},
                                             {"train/grad_norm", 1.5},
                                             {"train/samples_per_second", 1500},
                                             {"train/workers", 2}}));
    }
    ours.push_back(Since(t0) / n * 1e6);
    const std::string path = w->path();
    w.reset();
    SPOT_ASSIGN_OR_RETURN(std::string bytes, ReadFile(path));
    // The same records, cut where the writer cut them (one per event after the first).
    const size_t per = bytes.size() / static_cast<size_t>(n + 1);
    std::FILE* f = std::fopen((run / "raw.bin").c_str(), "wb");
    if (!f) return UnavailableError("cannot write " + (run / "raw.bin").string());
    t0 = Clock::now();
    for (int i = 0; i < n; ++i) {
      std::fwrite(bytes.data() + per * static_cast<size_t>(i), 1, per, f);
      std::fflush(f);
    }
    raw.push_back(Since(t0) / n * 1e6);
    std::fclose(f);
  }
  return std::make_pair(Median(ours), Median(raw));
}

// Steps per second of a 2-worker job; monitored: each worker serves /metrics
// (scraped once a second here, as the controller and Prometheus do) and
// writes event files.
Result<double> TrainRun(const MonitorBenchOptions& o, const fs::path& d, bool monitored) {
  fs::remove_all(d);
  fs::create_directories(d);
  const std::string job = (d / "job.yaml").string();
  std::ofstream(job) << fmt::format(
      "name: monitor-bench\nmodel: mlp\ndataset:\n  path: {}\n  train_limit: 12000\n"
      "  test_limit: 1000\nbatch_size: 64\nsteps: {}\nseed: 3\nthreads: 1\n"
      "optimizer:\n  type: adam\n  lr: 0.002\ncheckpoint:\n  interval: steps\n"
      "  interval_steps: 200\ndistributed:\n  min_workers: 2\n  max_workers: 2\noutput_dir: {}\n",
      o.dataset_path, o.steps, (d / "out").string());
  Proc store({o.spot_bin, "rendezvous", "--port", "0"}, (d / "store.txt").string());
  std::string url;
  for (int i = 0; i < 300 && url.empty(); ++i) {
    auto t = ReadFile((d / "store.txt").string());
    size_t at = t.ok() ? t->find("tcp://") : std::string::npos;
    if (at != std::string::npos && t->find('\n', at) != std::string::npos) {
      url = t->substr(at, t->find('\n', at) - at);
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  if (url.empty()) return UnavailableError("spot rendezvous did not start");
  auto worker = [&](const std::string& id) {
    std::vector<std::string> a = {o.spot_bin, "worker",    job, "--rendezvous", url, "--id",
                                  id,         "--threads", "1", "--plain"};
    if (monitored) {
      for (const std::string& s : {std::string("--metrics-port"), std::string("0"),
                                   std::string("--tensorboard"), (d / "tb").string()}) {
        a.push_back(s);
      }
    }
    return a;
  };
  Proc a(worker("a"), (d / "a.txt").string());
  Proc b(worker("b"), (d / "b.txt").string());
  std::atomic<bool> done{false};
  std::thread scraper([&] {
    const std::regex port_re("metrics at http://127\\.0\\.0\\.1:([0-9]+)/metrics");
    while (monitored && !done.load()) {
      for (const char* log : {"a.txt", "b.txt"}) {
        auto text = ReadFile((d / log).string());
        std::smatch m;
        if (!text.ok() || !std::regex_search(*text, m, port_re)) continue;
        httplib::Client c("127.0.0.1", std::stoi(m[1]));
        c.set_read_timeout(1, 0);
        (void)c.Get("/metrics");
      }
      for (int i = 0; i < 10 && !done.load(); ++i) {
        std::this_thread::sleep_for(std::chrono::milliseconds(100));
      }
    }
  });
  const int ra = a.Wait(600), rb = b.Wait(600);
  done.store(true);
  scraper.join();
  if (ra != 0 || rb != 0) {
    return InternalError(fmt::format("workers exited {} and {}; see {}", ra, rb, d.string()));
  }
  SPOT_ASSIGN_OR_RETURN(std::string summary, ReadFile((d / "out" / "summary.json").string()));
  return nlohmann::json::parse(summary)["steps_per_s"].get<double>();
}

}  // namespace

Result<std::string> RunMonitorWorkload(const MonitorBenchOptions& o) {
  const fs::path dir = fs::path(o.work_dir) / "monitor";
  fs::create_directories(dir);
  Progress("monitor: exposition");
  auto worker = WorkerRegistry();
  auto controller = ControllerRegistry();
  const ExpositionTimes wt = TimeExposition(*worker, o.expositions);
  const ExpositionTimes ct = TimeExposition(*controller, o.expositions);
  Progress("monitor: TensorBoard events");
  SPOT_ASSIGN_OR_RETURN(auto ev, TimeEvents(dir / "events", o.events));
  std::vector<double> plain, monitored;
  for (int rep = 0; rep < o.repeats; ++rep) {
    for (bool m : {false, true}) {
      Progress(fmt::format("monitor: training {} ({}/{})", m ? "monitored" : "plain", rep + 1,
                           o.repeats));
      SPOT_ASSIGN_OR_RETURN(double sps, TrainRun(o, dir / (m ? "monitored" : "plain"), m));
      (m ? monitored : plain).push_back(sps);
    }
  }
  Table t({"measure", "ours", "anchor", "ours / anchor"});
  t.AddRow({fmt::format("worker /metrics exposition ({} B)", wt.bytes),
            fmt::format("{:.1f} us", wt.ours_us),
            fmt::format("{:.1f} us (prometheus-cpp TextSerializer)", wt.theirs_us),
            fmt::format("{:.2f}", wt.ours_us / wt.theirs_us)});
  t.AddRow({fmt::format("controller /metrics exposition ({} B)", ct.bytes),
            fmt::format("{:.1f} us", ct.ours_us),
            fmt::format("{:.1f} us (prometheus-cpp TextSerializer)", ct.theirs_us),
            fmt::format("{:.2f}", ct.ours_us / ct.theirs_us)});
  t.AddRow({"parse a worker's /metrics (the controller's scrape)",
            fmt::format("{:.1f} us", wt.parse_us),
            fmt::format("{:.1f} us (its exposition)", wt.ours_us),
            fmt::format("{:.2f}", wt.parse_us / wt.ours_us)});
  t.AddRow({"TensorBoard event of 5 scalars, flushed", fmt::format("{:.2f} us", ev.first),
            fmt::format("{:.2f} us (fwrite + fflush of the same bytes)", ev.second),
            fmt::format("{:.2f}", ev.first / ev.second)});
  const double p = Median(plain), m = Median(monitored);
  t.AddRow({"training, 2 workers: steps/s with metrics, scrapes at 1 Hz and event files",
            fmt::format("{:.1f}", m), fmt::format("{:.1f} (without)", p),
            fmt::format("{:.3f} ({:+.1f}%)", m / p, (m / p - 1) * 100)});
  return fmt::format(
      "### SpotMonitor\n\n{}\nRaw: plain steps/s {}, monitored {}. Exposition and parsing are "
      "medians of 5 rounds of {} calls; events the median of 3 rounds of {}; training alternates "
      "plain and monitored runs of {} steps (MLP, batch 64, 1 thread per worker).\n",
      t.ToMarkdown(), FormatList(plain, 1), FormatList(monitored, 1), o.expositions, o.events,
      o.steps);
}

}  // namespace spot::bench
