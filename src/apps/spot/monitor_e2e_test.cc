// End-to-end tests of SpotMonitor on a real `spot run`: Debian's Prometheus
// server scrapes the controller and, found through the controller's http_sd
// target list, every worker; headless Chromium follows the live dashboard;
// the job's TensorBoard event files parse back; `spot report` and
// `spot monitor` show the finished job.
#include <gtest/gtest.h>
#include <httplib.h>

#include <chrono>
#include <cmath>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <thread>

#include "apps/spot/e2e_support.h"
#include "core/net.h"
#include "core/number_text.h"
#include "monitor/metrics.h"
#include "monitor/tensorboard.h"
#include "monitor/webdriver.h"

namespace spot::testing {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;
using Clock = std::chrono::steady_clock;

int FreePort() {
  auto port = PickFreePort();
  EXPECT_TRUE(port.ok()) << port.status().ToString();
  return port.ok() ? *port : 0;
}

std::string HttpGet(int port, const std::string& path, int* status = nullptr) {
  httplib::Client c("127.0.0.1", port);
  c.set_connection_timeout(1, 0);
  c.set_read_timeout(5, 0);
  auto r = c.Get(path);
  if (status) *status = r ? r->status : -1;
  return r ? r->body : "";
}

// Polls `probe` every 100 ms until it returns true or `timeout_s` passes.
template <typename F>
bool WaitUntil(double timeout_s, F probe) {
  const auto until = Clock::now() + std::chrono::duration<double>(timeout_s);
  while (Clock::now() < until) {
    if (probe()) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  return false;
}

// Runs a command through the shell with `input` on stdin; returns its exit
// code, its stdout and stderr in `output`.
int Shell(const std::string& command, const std::string& input, std::string* output,
          const fs::path& scratch) {
  const fs::path in = scratch / "shell.in", out = scratch / "shell.out";
  std::ofstream(in) << input;
  int rc = std::system((command + " < " + in.string() + " > " + out.string() + " 2>&1").c_str());
  std::ifstream f(out);
  output->assign(std::istreambuf_iterator<char>(f), {});
  return WIFEXITED(rc) ? WEXITSTATUS(rc) : -1;
}

class MonitorTest : public E2eTest {
 protected:
  void WriteTrace(const std::string& zone, std::vector<int> counts) {
    json j = {{"metadata", {{"gap_seconds", 60}}}, {"data", counts}};
    std::ofstream(dir_ / (zone + "_gpu_1.json")) << j.dump();
  }
  // Zone A loses its capacity at ticks 6-7 (one wall second each): greedy
  // moves to zone B, so the fleet shows a preemption.
  fs::path Job(const std::string& name, int api_port) {
    std::vector<int> a(400, 1), b(400, 1);
    a[6] = a[7] = 0;
    WriteTrace("zone-a", a);
    WriteTrace("zone-b", b);
    std::string yaml = fmt::format(
        "name: {name}\npolicy: greedy\ncompute_hours: 0.5\ndeadline_hours: 3\n"
        "resources:\n  nodes: 2\n  min_nodes: 1\n  ondemand_price: 3.0\n  changeover_hours: 0.02\n"
        "market:\n  traces:\n    - {a}\n    - {b}\n  time_compression: 60\n"
        "  notice_seconds: 120\n  when_missing: error\n"
        "controller:\n  api_port: {port}\n  reconcile_interval_s: 0.02\n  terminate_grace_s: 1\n"
        // Ten epochs: the job must outlive Prometheus' and Chromium's start-up on a fast machine.
        "train:\n  model: mlp\n  dataset:\n    path: {data}\n    train_limit: 12000\n"
        "  batch_size: 32\n  epochs: 10\n  seed: 7\n  threads: 1\n"
        "  optimizer:\n    type: adam\n    lr: 0.002\n  schedule:\n    type: cosine\n"
        "  checkpoint:\n    interval: steps\n    interval_steps: 50\n"
        "  distributed:\n    collective_timeout_s: 3\n  output_dir: {out}\n",
        fmt::arg("name", name), fmt::arg("a", (dir_ / "zone-a_gpu_1.json").string()),
        fmt::arg("b", (dir_ / "zone-b_gpu_1.json").string()), fmt::arg("port", api_port),
        fmt::arg("data", kDataset), fmt::arg("out", (dir_ / name).string()));
    return WriteJob(name, yaml);
  }

  // Prometheus' instant query: the samples' values by their "job" label
  // (NaN-free); empty when the query failed or matched nothing.
  std::vector<std::pair<json, double>> Query(int prom_port, const std::string& q) {
    httplib::Client c("127.0.0.1", prom_port);
    c.set_read_timeout(5, 0);
    auto r = c.Get("/api/v1/query", httplib::Params{{"query", q}}, httplib::Headers{});
    std::vector<std::pair<json, double>> out;
    if (!r || r->status != 200) return out;
    json j = json::parse(r->body, nullptr, false);
    if (j.is_discarded() || j["status"] != "success") return out;
    for (const json& s : j["data"]["result"]) {
      out.emplace_back(s["metric"], std::stod(s["value"][1].get<std::string>()));
    }
    return out;
  }
};

TEST_F(MonitorTest, PrometheusChromiumTensorBoardAndReportFollowARealJob) {
  const int api = FreePort();
  const fs::path job = Job("watched", api);
  ChildProcess run({SPOT_BIN, "run", job.string(), "--status-interval", "2"},
                   (dir_ / "run").string());
  ASSERT_TRUE(WaitUntil(60, [&] {
    return HttpGet(api, "/api/v1/healthz").find("ok") != std::string::npos;
  })) << "the controller's API did not come up";

  // Prometheus on loopback: the controller statically, the workers through
  // the controller's http_sd list (the layout of examples/prometheus.yml).
  const int prom = FreePort();
  std::ofstream(dir_ / "prometheus.yml") << fmt::format(
      "global:\n  scrape_interval: 1s\n  scrape_timeout: 900ms\n"
      "scrape_configs:\n"
      "  - job_name: spot-controller\n    static_configs:\n      - targets: ['127.0.0.1:{api}']\n"
      "  - job_name: spot-workers\n    http_sd_configs:\n"
      "      - url: http://127.0.0.1:{api}/api/v1/targets\n        refresh_interval: 1s\n",
      fmt::arg("api", api));
  ChildProcess prometheus(
      {"/usr/bin/prometheus", "--config.file=" + (dir_ / "prometheus.yml").string(),
       "--web.listen-address=127.0.0.1:" + std::to_string(prom),
       "--storage.tsdb.path=" + (dir_ / "tsdb").string()},
      (dir_ / "prometheus").string());
  ASSERT_TRUE(WaitUntil(30, [&] {
    int code = 0;
    HttpGet(prom, "/-/ready", &code);
    return code == 200;
  })) << "prometheus did not become ready";

  // The targets are up and the values are what the job says.
  ASSERT_TRUE(WaitUntil(30, [&] {
    auto up = Query(prom, "up{job=\"spot-controller\"}");
    auto workers = Query(prom, "spot_train_steps_total");
    return !up.empty() && up[0].second == 1 && !workers.empty() && workers[0].second > 0;
  })) << "prometheus never scraped both the controller and a worker";
  auto needed = Query(prom, "spot_job_work_needed_seconds");
  ASSERT_EQ(needed.size(), 1u);
  EXPECT_DOUBLE_EQ(needed[0].second, 0.5 * 3600);
  auto od = Query(prom, "spot_ondemand_cost_dollars");
  ASSERT_EQ(od.size(), 1u);
  EXPECT_NEAR(od[0].second, 2 * 3.0 * (0.5 + 0.02), 1e-9);
  auto total = Query(prom, "spot_training_total_steps");
  ASSERT_EQ(total.size(), 1u);
  EXPECT_EQ(total[0].second, 10 * 375);
  EXPECT_TRUE(WaitUntil(20, [&] {
    auto inst = Query(prom, "sum(spot_instances)");
    auto cost = Query(prom, "sum(spot_cost_dollars_total)");
    return !inst.empty() && inst[0].second == 2 && !cost.empty() && cost[0].second > 0;
  })) << "no running gang or no cost seen by prometheus";
  auto worker_labels = Query(prom, "spot_train_learning_rate");
  ASSERT_FALSE(worker_labels.empty());
  EXPECT_EQ(worker_labels[0].first["job"], "spot-workers");
  EXPECT_EQ(worker_labels[0].first["spot_job"], "watched");

  // promtool finds no problem in what the controller and a worker expose.
  std::string out;
  const std::string controller_text = HttpGet(api, "/metrics");
  EXPECT_EQ(Shell("/usr/bin/promtool check metrics", controller_text, &out, dir_), 0) << out;
  EXPECT_EQ(out, "");
  // A worker that has taken a step (one just launched after a reclaim has
  // no step histogram yet).
  std::string worker_text;
  EXPECT_TRUE(WaitUntil(20, [&] {
    json targets = json::parse(HttpGet(api, "/api/v1/targets"), nullptr, false);
    if (!targets.is_array()) return false;
    for (const json& t : targets) {
      const std::string addr = t["targets"][0];
      Result<int64_t> port = ParseInteger(addr.substr(addr.rfind(':') + 1));
      if (!port.ok()) continue;
      worker_text = HttpGet(static_cast<int>(*port), "/metrics");
      if (worker_text.find("spot_train_step_seconds_bucket") != std::string::npos) return true;
    }
    return false;
  })) << "no worker's /metrics has a step histogram";
  ASSERT_NE(worker_text.find("spot_train_step_seconds_bucket"), std::string::npos);
  EXPECT_EQ(Shell("/usr/bin/promtool check metrics", worker_text, &out, dir_), 0) << out;
  EXPECT_EQ(out, "");

  // Headless Chromium on the live dashboard: charts drawn, then updated.
  auto browser = monitor::Browser::Start({.log_path = (dir_ / "chromedriver.log").string()});
  ASSERT_TRUE(browser.ok()) << browser.status().ToString();
  ASSERT_TRUE((*browser)->Navigate(fmt::format("http://127.0.0.1:{}/", api)).ok());
  auto ready = (*browser)->WaitFor("document.body.dataset.ready === '1'", 30);
  ASSERT_TRUE(ready.ok()) << ready.status().ToString();
  auto first = (*browser)->Execute(
      "return {updates: +document.body.dataset.updates, step: +document.body.dataset.step,"
      " state: document.body.dataset.state, url: location.pathname,"
      " points: Object.fromEntries([...document.querySelectorAll('section[data-points]')]"
      ".map(s => [s.id, +s.dataset.points]))};");
  ASSERT_TRUE(first.ok()) << first.status().ToString();
  EXPECT_EQ((*first)["url"], "/jobs/watched");
  for (const char* panel : {"fleet", "market", "progress", "cost"}) {
    EXPECT_GT((*first)["points"].value(panel, 0), 0) << panel << " drew nothing: " << first->dump();
  }
  auto later = (*browser)->WaitFor(
      fmt::format("+document.body.dataset.updates > {} && +document.body.dataset.step > {}",
                  (*first)["updates"].get<int>(), (*first)["step"].get<int>()),
      20);
  EXPECT_TRUE(later.ok()) << "the dashboard did not follow the job: " << later.status().ToString();
  auto loss_points = (*browser)->WaitFor(
      "+document.getElementById('loss').dataset.points > 0 && "
      "+document.getElementById('utilization').dataset.points > 0",
      20);
  EXPECT_TRUE(loss_points.ok()) << loss_points.status().ToString();
  fs::create_directories(fs::path(SPOT_BINARY_DIR) / "test-artifacts");
  auto png = (*browser)->ScreenshotPng();
  ASSERT_TRUE(png.ok()) << png.status().ToString();
  std::ofstream(fs::path(SPOT_BINARY_DIR) / "test-artifacts" / "dashboard-live.png",
                std::ios::binary)
      << *png;

  ProcessResult r = run.Wait(300);
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  // The page sees the end and stops polling.
  auto ended = (*browser)->WaitFor("document.body.dataset.state === 'SUCCEEDED'", 20);
  EXPECT_TRUE(ended.ok()) << ended.status().ToString();
  prometheus.Kill(SIGTERM);
  prometheus.Wait(20);

  // TensorBoard: one run directory for the job; its scalars match the step log.
  auto scalars = monitor::ReadRunScalars((dir_ / "watched" / "tensorboard").string());
  ASSERT_TRUE(scalars.ok()) << scalars.status().ToString();
  std::map<std::string, std::map<int64_t, double>> by_tag;
  for (const monitor::ScalarPoint& p : *scalars) by_tag[p.tag][p.step] = p.value;
  for (const char* tag : {"train/loss", "train/learning_rate", "train/grad_norm",
                          "train/samples_per_second", "eval/test_accuracy", "cost/usd"}) {
    EXPECT_FALSE(by_tag[tag].empty()) << "no " << tag;
  }
  EXPECT_EQ(by_tag["train/loss"].rbegin()->first, 3750);
  std::ifstream steps(dir_ / "watched" / "steps.csv");
  int checked = 0;
  for (std::string line; std::getline(steps, line);) {
    int64_t step = 0, epoch = 0;
    double loss = 0, lr = 0;
    if (std::sscanf(line.c_str(), "%ld,%ld,%lf,%lf", &step, &epoch, &loss, &lr) != 4) continue;
    auto it = by_tag["train/loss"].find(step);
    if (it == by_tag["train/loss"].end()) continue;
    EXPECT_NEAR(it->second, loss, 1e-6 * std::max(1.0, std::abs(loss))) << "step " << step;
    ++checked;
  }
  EXPECT_GT(checked, 1000);
  EXPECT_GE(by_tag["eval/test_accuracy"].size(), 4u);
  EXPECT_GT(by_tag["eval/test_accuracy"].rbegin()->second, 0.7);
  // Per layer group every 10th step: the gradient norms add up (in squares)
  // to the global one, and updates are a small fraction of the weights.
  int groups_checked = 0;
  for (const auto& [step, norm] : by_tag["train/grad_norm"]) {
    double sq = 0;
    int groups = 0;
    for (const auto& [tag, values] : by_tag) {
      if (!tag.starts_with("grad_norm/")) continue;
      auto it = values.find(step);
      if (it == values.end()) continue;
      sq += it->second * it->second;
      ++groups;
      const double ratio = by_tag["update_ratio/" + tag.substr(10)][step];
      EXPECT_GT(ratio, 0) << tag << " at step " << step;
      EXPECT_LT(ratio, 0.5) << tag << " at step " << step;
    }
    if (groups == 0) continue;
    EXPECT_NEAR(std::sqrt(sq), norm, 1e-4 * norm) << "step " << step;
    ++groups_checked;
  }
  EXPECT_GT(groups_checked, 100);

  // `spot report`: a static page that renders the finished job by itself.
  ProcessResult rep = Spot({"report", job.string()}, "report");
  ASSERT_EQ(rep.exit_code, 0) << rep.out << rep.err;
  const fs::path report = dir_ / "watched" / "report.html";
  ASSERT_TRUE(fs::exists(report));
  ASSERT_TRUE((*browser)->Navigate("file://" + report.string()).ok());
  ASSERT_TRUE((*browser)->WaitFor("document.body.dataset.ready === '1'", 20).ok());
  auto snap = (*browser)->Execute(
      "return {state: document.body.dataset.state, step: +document.body.dataset.step,"
      " epochs: +document.getElementById('epochs').dataset.points,"
      " fleet: +document.getElementById('fleet').dataset.points};");
  ASSERT_TRUE(snap.ok());
  EXPECT_EQ((*snap)["state"], "SUCCEEDED");
  EXPECT_EQ((*snap)["step"], 3750);
  EXPECT_EQ((*snap)["epochs"], 10) << snap->dump();
  EXPECT_GE((*snap)["fleet"].get<int>(), 3) << "the preemption should show a second gang";

  // `spot monitor`: the same records served again, not live any more.
  const int mon = FreePort();
  ChildProcess monitor_cmd({SPOT_BIN, "monitor", job.string(), "--port", std::to_string(mon)},
                           (dir_ / "monitor").string());
  std::string data;
  ASSERT_TRUE(WaitUntil(20, [&] {
    data = HttpGet(mon, "/api/v1/jobs/watched/dashboard");
    return !data.empty();
  }));
  json d = json::parse(data);
  EXPECT_EQ(d["live"], false);
  EXPECT_EQ(d["job"]["state"], "SUCCEEDED");
  EXPECT_EQ(d["summary"]["step"], 3750);
  EXPECT_EQ(d["epochs"].size(), 10u);
  EXPECT_GE(d["summary"]["preemptions"].get<int>(), 1);
  int busy_cells = 0;
  for (const json& w : d["utilization"]["workers"]) {
    for (const json& v : w["busy"]) {
      if (v.is_null()) continue;
      EXPECT_GE(v.get<double>(), 0);
      EXPECT_LE(v.get<double>(), 1);
      ++busy_cells;
    }
  }
  EXPECT_GT(busy_cells, 5);
  double epoch_usd = 0;
  for (const json& e : d["epochs"]) epoch_usd += e["usd"].get<double>();
  EXPECT_LE(epoch_usd, d["summary"]["cost_usd"].get<double>() + 1e-9);
  monitor_cmd.Kill(SIGTERM);
  EXPECT_EQ(monitor_cmd.Wait(10).exit_code, 0);
}

}  // namespace
}  // namespace spot::testing
