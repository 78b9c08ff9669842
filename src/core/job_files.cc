#include "core/job_files.h"

#include <fmt/format.h>

#include <algorithm>
#include <charconv>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

namespace spot {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

std::string In(const std::string& dir, const char* name) { return (fs::path(dir) / name).string(); }

// Sets *out from j[key] when present; false (naming nothing) on a wrong type.
template <typename T>
bool Field(const json& j, const char* key, T* out) {
  auto it = j.find(key);
  if (it == j.end() || it->is_null()) return true;
  if constexpr (std::is_same_v<T, bool>) {
    if (!it->is_boolean()) return false;
  } else if constexpr (std::is_same_v<T, std::string>) {
    if (!it->is_string()) return false;
  } else if constexpr (std::is_integral_v<T>) {
    if (!it->is_number_integer()) return false;
  } else {
    if (!it->is_number()) return false;
  }
  *out = it->get<T>();
  return true;
}

}  // namespace

std::string JobFiles::progress() const { return In(dir, "progress.json"); }
std::string JobFiles::step_log() const { return In(dir, "steps.csv"); }
std::string JobFiles::summary() const { return In(dir, "summary.json"); }
std::string JobFiles::tensorboard() const { return In(dir, "tensorboard"); }
std::string JobFiles::instances() const { return In(dir, "instances"); }
std::string JobFiles::decisions() const { return In(dir, "decisions.jsonl"); }
std::string JobFiles::worker_job() const { return In(dir, "train.yaml"); }
std::string JobFiles::state_dir() const { return In(dir, "controller"); }
std::string StateDbPath(const std::string& state_dir) { return In(state_dir, "state.db"); }

std::string StepLogLine(const StepLogRow& r) {
  return fmt::format("{},{},{:.9g},{:.9g}\n", r.step, r.epoch, r.loss, r.lr);
}

Result<StepLogRow> ParseStepLogLine(std::string_view line) {
  StepLogRow r;
  const char* p = line.data();
  const char* end = line.data() + line.size();
  auto integer = [&](int64_t* out) {
    auto [next, ec] = std::from_chars(p, end, *out);
    p = next;
    return ec == std::errc();
  };
  auto number = [&](double* out) {
    auto [next, ec] = std::from_chars(p, end, *out);
    p = next;
    return ec == std::errc();  // nan and inf too: a diverged step is still a step
  };
  auto comma = [&] { return p < end && *p++ == ','; };
  if (!(integer(&r.step) && comma() && integer(&r.epoch) && comma() && number(&r.loss) && comma() &&
        number(&r.lr) && p == end)) {
    return InvalidArgumentError("not a step log line (step,epoch,loss,lr): '" + std::string(line) +
                                "'");
  }
  return r;
}

std::vector<StepLogRow> ReadStepLog(const std::string& path) {
  std::vector<StepLogRow> rows;
  std::ifstream in(path);
  for (std::string line; std::getline(in, line);) {
    if (auto r = ParseStepLogLine(line); r.ok()) rows.push_back(*r);
  }
  return rows;
}

std::string ProgressReportJson(const ProgressReport& r) {
  json j = {{"job", r.job},
            {"step", r.step},
            {"total_steps", r.total_steps},
            {"epoch", r.epoch},
            {"loss", r.loss},
            {"test_accuracy", r.test_accuracy},
            {"world", r.world},
            {"generation", r.generation},
            {"restored_step", r.restored_step},
            {"done", r.done}};
  if (r.fraction >= 0) j["fraction"] = r.fraction;
  if (!r.stragglers.empty()) j["stragglers"] = r.stragglers;
  return j.dump();
}

Result<ProgressReport> ParseProgressReport(const std::string& text) {
  json j = json::parse(text, nullptr, false);
  if (j.is_discarded() || !j.is_object()) {
    return InvalidArgumentError("progress report: not a JSON object");
  }
  ProgressReport r;
  std::string bad;
  auto read = [&](const char* key, auto* out) {
    if (bad.empty() && !Field(j, key, out)) bad = key;
  };
  read("job", &r.job);
  read("step", &r.step);
  read("total_steps", &r.total_steps);
  read("epoch", &r.epoch);
  read("loss", &r.loss);
  read("test_accuracy", &r.test_accuracy);
  read("world", &r.world);
  read("generation", &r.generation);
  read("restored_step", &r.restored_step);
  read("done", &r.done);
  read("fraction", &r.fraction);
  if (bad.empty() && j.contains("stragglers")) {
    const json& s = j["stragglers"];
    if (!s.is_array()) bad = "stragglers";
    for (size_t i = 0; bad.empty() && i < s.size(); ++i) {
      if (!s[i].is_string())
        bad = "stragglers";
      else
        r.stragglers.push_back(s[i].get<std::string>());
    }
  }
  if (!bad.empty()) {
    return InvalidArgumentError("progress report: field '" + bad + "' has the wrong type");
  }
  if (r.fraction >= 0) r.fraction = std::min(1.0, r.fraction);
  return r;
}

}  // namespace spot
