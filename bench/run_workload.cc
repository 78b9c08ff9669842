#include "run_workload.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>
#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <thread>
#include <vector>

#include "bench_process.h"
#include "core/file_io.h"
#include "report.h"

namespace spot::bench {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

// What the bench takes from the demo job file.
struct JobParams {
  std::string name;
  std::string policy = "greedy";
  int64_t nodes = 2;
  int64_t min_nodes = 1;
  std::string instance_type = "p3.2xlarge";
  double notice_seconds = 120;
  double time_compression = 60;
  double reconcile_interval_s = 0.05;
  int64_t start_tick = 0;
  std::vector<std::string> traces;   // resolved
  std::vector<std::string> missing;  // of traces and prices
  bool synthetic = false;
  bool command = false;  // a command workload (`run:`): a program, not the trainer
};

fs::path Resolve(const std::string& source_dir, const std::string& p) {
  fs::path path(p);
  return path.is_absolute() ? path : (fs::path(source_dir) / path).lexically_normal();
}

template <typename T>
T Field(const YAML::Node& n, const char* key, T fallback) {
  return n && n[key] ? n[key].as<T>() : fallback;
}

// Copies the job file into `dir` with its directories there and every
// relative path resolved against the source directory.
Result<JobParams> WriteJob(const RunBenchOptions& o, const fs::path& dir, const fs::path& out) {
  YAML::Node root;
  try {
    root = YAML::LoadFile(o.job_file);
  } catch (const YAML::Exception& e) {
    return InvalidArgumentError(o.job_file + ": " + e.what());
  }
  JobParams p;
  p.name = Field<std::string>(root, "name", "job");
  p.policy = Field<std::string>(root, "policy", p.policy);
  YAML::Node res = root["resources"];
  p.nodes = Field<int64_t>(res, "nodes", p.nodes);
  p.min_nodes = Field<int64_t>(res, "min_nodes", p.min_nodes);
  p.instance_type = Field<std::string>(res, "instance_type", p.instance_type);
  YAML::Node market = root["market"];
  if (!market) return InvalidArgumentError(o.job_file + ": no market section");
  p.notice_seconds = Field<double>(market, "notice_seconds", p.notice_seconds);
  p.time_compression = Field<double>(market, "time_compression", p.time_compression);
  p.start_tick = Field<int64_t>(market, "start_tick", p.start_tick);
  if (market["traces"]) {
    for (size_t i = 0; i < market["traces"].size(); ++i) {
      fs::path t = Resolve(o.source_dir, market["traces"][i].as<std::string>());
      market["traces"][i] = t.string();
      p.traces.push_back(t.string());
      if (!fs::exists(t)) p.missing.push_back(t.string());
    }
  }
  if (market["prices"]) {
    fs::path t = Resolve(o.source_dir, market["prices"].as<std::string>());
    market["prices"] = t.string();
    if (!fs::exists(t)) p.missing.push_back(t.string());
  }
  p.synthetic = !p.missing.empty();
  if (p.synthetic && Field<std::string>(market, "when_missing", "synthetic") != "synthetic") {
    return FailedPreconditionError(fmt::format(
        "{}: market.when_missing is not synthetic and {} is absent", o.job_file, p.missing[0]));
  }
  YAML::Node train = root["train"];
  p.command = bool(root["run"]);
  if (p.command) {
    // The program runs where the job says, resolved against the sources.
    root["output_dir"] = (dir / "job").string();
    root["workdir"] = Resolve(o.source_dir, Field<std::string>(root, "workdir", ".")).string();
  } else if (!train) {
    return InvalidArgumentError(o.job_file + ": no train section (nor a program to run)");
  } else {
    train["output_dir"] = (dir / "job").string();
    if (!o.dataset_path.empty()) {
      train["dataset"]["path"] = o.dataset_path;
    } else if (train["dataset"] && train["dataset"]["path"]) {
      train["dataset"]["path"] =
          Resolve(o.source_dir, train["dataset"]["path"].as<std::string>()).string();
    }
  }
  root["controller"]["state_dir"] = (dir / "state").string();
  p.reconcile_interval_s =
      Field<double>(root["controller"], "reconcile_interval_s", p.reconcile_interval_s);
  YAML::Emitter e;
  e << root;
  std::ofstream(out) << "# spot_bench's copy of " << fs::path(o.job_file).filename().string()
                     << "\n"
                     << e.c_str() << "\n";
  return p;
}

// One run's figures.
struct Measured {
  json summary;
  std::vector<double> flush_s;   // notice -> checkpoint flushed (wall s), one per flush
  std::vector<double> budget_s;  // "X s left" at each notice a worker saw
  int missed = 0;                // checkpoint flushes that missed a notice's deadline
  int instances = 0;             // instance logs read
  double predicted_hours = -1;   // SpotSim's finish time, from the summary `spot run` prints
};

// The number that follows `key` in `line`, if `line` has `key` and, after
// it, `suffix`.
bool NumberAfter(const std::string& line, const std::string& key, const std::string& suffix,
                 double* out) {
  size_t at = line.find(key);
  if (at == std::string::npos) return false;
  at += key.size();
  size_t end = line.find(suffix, at);
  if (end == std::string::npos) return false;
  try {
    *out = std::stod(line.substr(at, end - at));
  } catch (const std::exception&) {
    return false;
  }
  return true;
}

void ReadInstanceLogs(const fs::path& dir, Measured* m) {
  std::error_code ec;
  for (const fs::directory_entry& e : fs::directory_iterator(dir, ec)) {
    if (e.path().extension() != ".log") continue;
    ++m->instances;
    std::ifstream in(e.path());
    for (std::string line; std::getline(in, line);) {
      double v = 0;
      // "notice: checkpoint of step N flushed X s after the notice"
      size_t at = line.find("notice: checkpoint of step ");
      if (at != std::string::npos &&
          NumberAfter(line.substr(at), " flushed ", " s after the notice", &v)) {
        m->flush_s.push_back(v);
        continue;
      }
      // A command workload's agent: "notice: the program stopped X s after the notice"
      at = line.find("notice: the program stopped ");
      if (at != std::string::npos &&
          NumberAfter(line.substr(at), " stopped ", " s after the notice", &v)) {
        m->flush_s.push_back(v);
        continue;
      }
      // A save on a notice that did not fit (the worker then exits with an error).
      if (line.find("checkpoint flush: deadline passed") != std::string::npos) {
        ++m->missed;
        continue;
      }
      // "termination notice (aws terminate): X s left; saving and leaving"
      at = line.find("termination notice (");
      if (at != std::string::npos && NumberAfter(line.substr(at), "): ", " s left", &v)) {
        m->budget_s.push_back(v);
      }
    }
  }
}

Result<Measured> RunOnce(const RunBenchOptions& o, const fs::path& dir, JobParams* params) {
  fs::remove_all(dir);
  fs::create_directories(dir);
  const fs::path job = dir / "job.yaml";
  SPOT_ASSIGN_OR_RETURN(*params, WriteJob(o, dir, job));
  const fs::path log = dir / "spot-run.log";
  Proc c({o.spot_bin, "run", job.string()}, log.string());
  if (!c.started()) return InternalError("cannot start " + o.spot_bin);
  int rc = c.Wait(o.timeout_s);
  if (rc == -1000) {
    c.Terminate(60);
    return DeadlineExceededError(
        fmt::format("spot run did not end within {:.0f} s; see {}", o.timeout_s, log.string()));
  }
  Measured m;
  const fs::path summary = dir / "job" / "run-summary.json";
  auto text = ReadFile(summary.string());
  if (!text.ok()) {
    return InternalError(fmt::format("spot run exited with {} and wrote no {}; see {}", rc,
                                     summary.string(), log.string()));
  }
  m.summary = json::parse(*text, nullptr, false);
  if (m.summary.is_discarded()) return DataLossError(summary.string() + ": not JSON");
  const std::string state = m.summary.value("state", "");
  if (state != "SUCCEEDED") {
    return InternalError(fmt::format("the job ended {} ({}), exit code {}; see {}", state,
                                     m.summary.value("message", ""), rc, log.string()));
  }
  ReadInstanceLogs(dir / "job" / "instances", &m);
  // "  SpotSim predicted     $6.33 for greedy on this market segment (3 preemptions, 3.16 h)"
  std::ifstream in(log);
  for (std::string line; std::getline(in, line);) {
    if (line.find("SpotSim predicted") == std::string::npos) continue;
    size_t at = line.rfind(", ");
    double v = 0;
    if (at != std::string::npos && NumberAfter(line.substr(at), ", ", " h)", &v)) {
      m.predicted_hours = v;
    }
  }
  return m;
}

double Num(const json& j, const char* key) { return j.value(key, 0.0); }

std::vector<double> Each(const std::vector<Measured>& runs, const char* key) {
  std::vector<double> v;
  for (const Measured& m : runs) v.push_back(Num(m.summary, key));
  return v;
}

std::string Seconds(double s) { return fmt::format("{:.3f} s", s); }

}  // namespace

Result<std::string> RunRunWorkload(const RunBenchOptions& o) {
  const fs::path root = fs::path(o.work_dir) / "run";
  fs::create_directories(root);
  std::vector<Measured> runs;
  JobParams p;
  for (int rep = 0; rep < o.repeats; ++rep) {
    Progress(fmt::format("run: spot run {} ({}/{})", fs::path(o.job_file).filename().string(),
                         rep + 1, o.repeats));
    SPOT_ASSIGN_OR_RETURN(Measured m, RunOnce(o, root / fmt::format("rep{}", rep), &p));
    Progress(
        fmt::format("run: {} in {:.0f} s, {} preemptions, {} checkpoints flushed on a notice, "
                    "{} missed",
                    m.summary.value("state", ""), Num(m.summary, "wall_seconds"),
                    m.summary.value("preemptions", 0), m.flush_s.size(), m.missed));
    runs.push_back(std::move(m));
  }
  std::vector<double> flush, budget;
  int missed = 0;
  for (const Measured& m : runs) {
    missed += m.missed;
    flush.insert(flush.end(), m.flush_s.begin(), m.flush_s.end());
    budget.insert(budget.end(), m.budget_s.begin(), m.budget_s.end());
  }
  const double x = p.time_compression;
  const double wall_budget = p.notice_seconds / x;

  // (1) Notice -> checkpoint flushed to both tiers.
  Table notice({"", "ours", "notice budget", "ours / budget", "goal"});
  if (flush.empty()) {
    notice.AddRow({"notice -> checkpoint flushed (no notice led to a save)", "-",
                   Seconds(wall_budget), "-", "-"});
  } else {
    const double med = Median(flush), max = *std::max_element(flush.begin(), flush.end());
    auto goal = [&](double v) { return v < wall_budget ? "< 1: met" : "< 1: MISS"; };
    notice.AddRow({"notice -> checkpoint flushed, median (wall)", Seconds(med),
                   Seconds(wall_budget), fmt::format("{:.2f}", med / wall_budget), goal(med)});
    notice.AddRow({"notice -> checkpoint flushed, max (wall)", Seconds(max), Seconds(wall_budget),
                   fmt::format("{:.2f}", max / wall_budget), goal(max)});
    notice.AddRow({fmt::format("median in market time (x{:.0f})", x),
                   fmt::format("{:.1f} s", med * x),
                   fmt::format("{:.0f} s (AWS)", p.notice_seconds),
                   fmt::format("{:.2f}", med / wall_budget), ""});
    notice.AddRow({fmt::format("max in market time (x{:.0f})", x), fmt::format("{:.1f} s", max * x),
                   fmt::format("{:.0f} s (AWS)", p.notice_seconds),
                   fmt::format("{:.2f}", max / wall_budget), ""});
  }
  notice.AddRow({"saves on a notice that missed its deadline (flush deadline passed)",
                 fmt::format("{} of {}", missed, missed + static_cast<int>(flush.size())), "", "",
                 missed == 0 ? "0: met" : "0: MISS"});
  if (!budget.empty()) {
    const double min = *std::min_element(budget.begin(), budget.end());
    notice.AddRow({"time left when a worker saw its notice, median (min)",
                   fmt::format("{:.2f} s ({:.2f} s)", Median(budget), min), Seconds(wall_budget),
                   fmt::format("{:.2f}", Median(budget) / wall_budget), ""});
  }

  // (2) Controller overhead per reconcile pass.
  std::vector<double> rec_mean = Each(runs, "reconcile_us_mean");
  std::vector<double> rec_max = Each(runs, "reconcile_us_max");
  const double interval_us = p.reconcile_interval_s * 1e6;
  const double mean_us = Median(rec_mean);
  const double max_us = *std::max_element(rec_max.begin(), rec_max.end());
  Table reconcile({"", "ours", "reconcile interval", "ours / interval"});
  reconcile.AddRow({"controller time per reconcile pass, mean", fmt::format("{:.0f} us", mean_us),
                    fmt::format("{:.0f} us", interval_us),
                    fmt::format("{:.4f}", mean_us / interval_us)});
  reconcile.AddRow({"controller time per reconcile pass, max", fmt::format("{:.0f} us", max_us),
                    fmt::format("{:.0f} us", interval_us),
                    fmt::format("{:.3f}", max_us / interval_us)});

  // (3) Cost.
  const double cost = Median(Each(runs, "cost_usd"));
  const double od = Median(Each(runs, "ondemand_only_usd"));
  const double predicted = Median(Each(runs, "predicted_usd"));
  const double saving = Median(Each(runs, "saving"));
  Table money({"", "live (`spot run`)", "anchor", "live / anchor"});
  money.AddRow({"cost vs on demand only (SpotSim `od`, same job)", fmt::format("${:.2f}", cost),
                fmt::format("${:.2f}", od),
                od > 0 ? fmt::format("{:.2f} ({:.0f}% saved)", cost / od, saving * 100) : "-"});
  money.AddRow({fmt::format("cost vs SpotSim's prediction ({}, same market segment)", p.policy),
                fmt::format("${:.2f}", cost), fmt::format("${:.2f}", predicted),
                predicted > 0 ? fmt::format("{:.2f}", cost / predicted) : "-"});
  money.AddRow({"preemptions (gang reclaims) vs predicted",
                fmt::format("{:.0f}", Median(Each(runs, "preemptions"))),
                fmt::format("{:.0f}", Median(Each(runs, "predicted_preemptions"))), ""});
  money.AddRow({"interruption notices to instances",
                fmt::format("{:.0f}", Median(Each(runs, "notices"))), "", ""});
  money.AddRow({"steps redone (of steps)",
                fmt::format("{:.0f} of {:.0f}", Median(Each(runs, "steps_redone")),
                            Median(Each(runs, "steps"))),
                "", ""});
  money.AddRow(
      {"test accuracy", fmt::format("{:.2f}%", Median(Each(runs, "test_accuracy")) * 100), "", ""});
  // The job's length in market time against SpotSim's, which assumes
  // compute_hours of work; the live run's length is what its training took.
  const double hours = Median(Each(runs, "sim_hours"));
  std::vector<double> predicted_hours;
  for (const Measured& m : runs) {
    if (m.predicted_hours > 0) predicted_hours.push_back(m.predicted_hours);
  }
  if (predicted_hours.empty()) {
    money.AddRow({"simulated time (market hours)", fmt::format("{:.2f} h", hours), "", ""});
  } else {
    const double ph = Median(predicted_hours);
    money.AddRow({"simulated time (market hours) vs predicted", fmt::format("{:.2f} h", hours),
                  fmt::format("{:.2f} h", ph), fmt::format("{:.2f}", hours / ph)});
    if (hours > 0 && predicted > 0) {
      money.AddRow({"cost per market hour vs predicted", fmt::format("${:.2f}", cost / hours),
                    fmt::format("${:.2f}", predicted / ph),
                    fmt::format("{:.2f}", (cost / hours) / (predicted / ph))});
    }
  }
  money.AddRow({"wall time", fmt::format("{:.0f} s", Median(Each(runs, "wall_seconds"))), "", ""});
  money.AddRow({"decisions (ticks); launches",
                fmt::format("{:.0f}; {:.0f}", Median(Each(runs, "decisions")),
                            Median(Each(runs, "launches"))),
                "", ""});

  const std::string market =
      p.synthetic ? fmt::format(
                        "the synthetic market fitted to the p3.2xlarge records (the job's trace "
                        "files are absent, e.g. {}, so the job fell back to it by itself)",
                        fs::path(p.missing[0]).filename().string())
                  : fmt::format("the replayed market of {} ({} zones, start tick {})",
                                fs::path(p.traces.front()).parent_path().filename().string(),
                                p.traces.size(), p.start_tick);
  std::string raw;
  if (runs.size() > 1) {
    raw = fmt::format(
        "Raw per run: cost {}, predicted {}, preemptions {}, reconcile mean (us) {}, max (us) "
        "{}.\n\n",
        FormatList(Each(runs, "cost_usd"), 2), FormatList(Each(runs, "predicted_usd"), 2),
        FormatList(Each(runs, "preemptions")), FormatList(rec_mean), FormatList(rec_max));
  }
  int instances = 0;
  for (const Measured& m : runs) instances += m.instances;
  const bool any_negative =
      std::any_of(budget.begin(), budget.end(), [](double b) { return b < 0; });
  const std::string late =
      any_negative ? " A negative time left: the reclaim was already due when the worker first "
                     "looked (an instance launched less than the notice before its pool's "
                     "reclaim gets the notice at once, and a worker takes over a second to start)."
                   : "";
  if (p.command) {
    // A program's save is its own: what the agent sees is the program stopping.
    std::string text = notice.ToMarkdown();
    for (size_t at; (at = text.find("checkpoint flushed")) != std::string::npos;) {
      text.replace(at, 18, "program saved and stopped");
    }
    return fmt::format(
        "## command\n\n`spot run` on {} (a command workload: a plain PyTorch script with the "
        "spottrain client): policy {}, {} x {} (min {}), over {}; time x{:.0f}, notice {:.0f} s "
        "({:.2f} s of wall time). {} run{}; figures from `<job dir>/run-summary.json` and the {} "
        "instance logs.\n\n"
        "Notice -> program saved and stopped: from the termination notice reaching the agent "
        "(which writes SPOT_NOTICE_FILE and sends SIGTERM at once) to every rank of the program "
        "having exited after its save (\"notice: the program stopped X s after the notice\"), "
        "against the notice's budget in wall time and, scaled back by the time compression, "
        "AWS's {:.0f} s (GCP gives 30 s: the same ratio times 4):\n\n{}\n"
        "Raw (s): stops {}, time left at the notice {}.{}\n\n"
        "Controller overhead per reconcile pass, against the reconcile interval:\n\n{}\n"
        "Cost, billed per instance-second at each tick's spot price, against SpotSim on the same "
        "job and market segment at the throughput the program reported:\n\n{}\n{}",
        fs::path(o.job_file).filename().string(), p.policy, p.nodes, p.instance_type, p.min_nodes,
        market, x, p.notice_seconds, wall_budget, runs.size(), runs.size() == 1 ? "" : "s",
        instances, p.notice_seconds, text, FormatList(flush, 3), FormatList(budget, 2), late,
        reconcile.ToMarkdown(), money.ToMarkdown(), raw);
  }
  return fmt::format(
      "## run\n\n`spot run` on {}: policy {}, {} x {} (min {}), over {}; time x{:.0f}, "
      "notice {:.0f} s ({:.2f} s of wall time). {} run{}; figures from `<job "
      "dir>/run-summary.json` and the {} instance logs.\n\n"
      "Notice -> checkpoint flushed to both tiers: from the termination notice reaching the "
      "worker to its checkpoint flushed (\"notice: checkpoint of step N flushed X s after the "
      "notice\"), {} flushes of {} notices seen by workers, against the notice's budget in wall "
      "time and, scaled back by the time compression, AWS's {:.0f} s:\n\n{}\n"
      "Raw (s): flushes {}, time left at the notice (to 0.1 s, as the worker logs it) {}. "
      "Every member of a reclaimed gang gets a notice; the one that saves (rank 0, or the last "
      "member standing) logs the flush or, when the flush does not fit in what is left of the "
      "notice, \"checkpoint flush: deadline passed\" (counted as missed).{}\n\n"
      "Controller overhead per reconcile pass (the wall time of one pass: progress, provider "
      "poll, the policy at a new tick, fleet changes, billing, SQLite), against the reconcile "
      "interval:\n\n{}\n"
      "Cost, billed per instance-second at each tick's spot price, against SpotSim on the same "
      "job and market segment (run-summary.json):\n\n{}\n{}",
      fs::path(o.job_file).filename().string(), p.policy, p.nodes, p.instance_type, p.min_nodes,
      market, x, p.notice_seconds, wall_budget, runs.size(), runs.size() == 1 ? "" : "s", instances,
      flush.size(), budget.size(), p.notice_seconds, notice.ToMarkdown(), FormatList(flush, 3),
      FormatList(budget, 2), late, reconcile.ToMarkdown(), money.ToMarkdown(), raw);
}

}  // namespace spot::bench
