#include "control/worker_report.h"

#include <fmt/format.h>

#include <charconv>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "core/file_io.h"
#include "core/strict_json.h"

namespace spot::control {

using nlohmann::json;

namespace {

constexpr size_t kMaxMetrics = 64;

Status Bad(std::string_view field, std::string_view why) {
  return InvalidArgumentError(fmt::format("report: {}: {}", field, why));
}

Result<int64_t> Count(const json& j, const char* field) {
  const json& v = j.at(field);
  if (!v.is_number_integer()) return Bad(field, "expected an integer");
  if (v.is_number_unsigned() ? v.get<uint64_t>() > static_cast<uint64_t>(INT64_MAX)
                             : v.get<int64_t>() < 0) {
    return Bad(field, "expected an integer >= 0 and < 2^63");
  }
  return v.get<int64_t>();
}

Result<double> Finite(const json& v, std::string_view field) {
  if (!v.is_number()) return Bad(field, "expected a number");
  double d = v.get<double>();
  if (!std::isfinite(d)) return Bad(field, "expected a finite number");
  return d;
}

}  // namespace

Result<WorkerReport> ParseWorkerReport(std::string_view body) {
  auto parsed = ParseStrictJson(body, "report");
  if (!parsed.ok()) return InvalidArgumentError(parsed.status().message());
  const json& j = *parsed;
  if (!j.is_object()) return InvalidArgumentError("report: expected a JSON object");
  WorkerReport r;
  for (const auto& [key, value] : j.items()) {
    if (key == "instance") {
      if (!value.is_string()) return Bad(key, "expected a string");
      r.instance = value.get<std::string>();
      if (r.instance.size() > 256) return Bad(key, "longer than 256 characters");
    } else if (key == "rank") {
      SPOT_ASSIGN_OR_RETURN(r.rank, Count(j, "rank"));
    } else if (key == "step") {
      SPOT_ASSIGN_OR_RETURN(r.step, Count(j, "step"));
    } else if (key == "total_steps") {
      SPOT_ASSIGN_OR_RETURN(r.total_steps, Count(j, "total_steps"));
    } else if (key == "epoch") {
      SPOT_ASSIGN_OR_RETURN(r.epoch, Count(j, "epoch"));
    } else if (key == "samples") {
      SPOT_ASSIGN_OR_RETURN(r.samples, Count(j, "samples"));
    } else if (key == "loss") {
      if (!value.is_null()) {
        SPOT_ASSIGN_OR_RETURN(r.loss, Finite(value, "loss"));
      }
    } else if (key == "done") {
      if (!value.is_boolean()) return Bad(key, "expected true or false");
      r.done = value.get<bool>();
    } else if (key == "metrics") {
      if (!value.is_object()) return Bad(key, "expected an object of numbers");
      if (value.size() > kMaxMetrics) return Bad(key, fmt::format("more than {}", kMaxMetrics));
      for (const auto& [name, v] : value.items()) {
        SPOT_ASSIGN_OR_RETURN(r.metrics[name], Finite(v, "metrics." + name));
      }
    } else {
      return Bad(key,
                 "unknown field (known: instance, rank, step, total_steps, epoch, loss, "
                 "samples, metrics, done)");
    }
  }
  if (!j.contains("step")) return Bad("step", "required field is missing");
  return r;
}

ReportSink::ReportSink(std::string job, JobFiles files, Clock* clock)
    : job_(std::move(job)), files_(std::move(files)), clock_(clock ? clock : RealClock()) {
  if (auto text = ReadFile(files_.progress()); text.ok()) {
    if (auto p = ParseProgressReport(*text); p.ok()) progress_ = *p;
  }
  progress_.job = job_;
  for (const StepLogRow& row : ReadStepLog(files_.step_log())) last_logged_step_ = row.step;
}

Status ReportSink::Take(std::string_view body) {
  SPOT_ASSIGN_OR_RETURN(WorkerReport r, ParseWorkerReport(body));
  std::lock_guard lock(mu_);
  last_report_unix_s_ = clock_->NowUnixS();
  ProgressReport p = progress_;
  p.step = r.step;  // a resumed program reports a step again: progress is where it is
  if (r.total_steps) p.total_steps = *r.total_steps;
  if (r.epoch) p.epoch = *r.epoch;
  if (r.loss) p.loss = *r.loss;
  if (r.metrics.count("test_accuracy")) p.test_accuracy = r.metrics.at("test_accuracy");
  p.done = p.done || r.done;
  SPOT_RETURN_IF_ERROR(WriteFileAtomically(files_.progress(), ProgressReportJson(p) + "\n"));
  progress_ = p;
  if (r.loss && r.step != last_logged_step_) {  // a step redone after a resume: again
    std::ofstream log(files_.step_log(), std::ios::app);
    log << StepLogLine({.step = r.step, .epoch = p.epoch, .loss = *r.loss, .lr = 0});
    last_logged_step_ = r.step;
  }
  json line{{"unix_s", last_report_unix_s_},
            {"instance", r.instance},
            {"rank", r.rank},
            {"step", r.step}};
  if (r.loss) line["loss"] = *r.loss;
  if (r.samples) line["samples"] = *r.samples;
  if (!r.metrics.empty()) line["metrics"] = r.metrics;
  if (r.done) line["done"] = true;
  std::ofstream(std::filesystem::path(files_.dir) / "reports.jsonl", std::ios::app)
      << line.dump() << "\n";
  return Status::Ok();
}

std::optional<int64_t> NewestManifestStep(const std::string& checkpoint_dir) {
  std::optional<int64_t> newest;
  std::error_code ec;
  for (const auto& e : std::filesystem::directory_iterator(checkpoint_dir, ec)) {
    const std::string name = e.path().filename().string();
    // ckpt-<12 digits>.json
    if (name.size() != 22 || !name.starts_with("ckpt-") || !name.ends_with(".json")) continue;
    // Zero-padded digits (which ParseInteger, a job file's rule, refuses).
    int64_t digits = 0;
    const char* first = name.data() + 5;
    auto [end, err] = std::from_chars(first, first + 12, digits);
    if (err != std::errc() || end != first + 12 || (newest && digits <= *newest)) continue;
    const std::optional<int64_t> step = digits;
    auto text = ReadFile(e.path().string());
    if (!text.ok()) continue;
    auto j = ParseStrictJson(*text, e.path().string());
    if (!j.ok() || !j->is_object() || j->value("format", "") != "spottrain-ckpt-1") continue;
    const auto it = j->find("step");
    if (it == j->end() || !it->is_number_integer() || it->get<int64_t>() != *step) continue;
    newest = *step;
  }
  return newest;
}

double ReportSink::last_report_unix_s() const {
  std::lock_guard lock(mu_);
  return last_report_unix_s_;
}

}  // namespace spot::control
