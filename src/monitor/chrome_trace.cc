#include "monitor/chrome_trace.h"

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <cctype>
#include <filesystem>
#include <fstream>
#include <map>
#include <mutex>
#include <nlohmann/json.hpp>

#include "core/clock.h"
#include "core/file_io.h"

namespace spot::monitor {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

constexpr std::string_view kSuffix = ".trace.jsonl";
constexpr const char* kLaneNames[] = {"step", "checkpoint", "evaluation"};

}  // namespace

struct TraceLog::Impl {
  std::mutex mu;
  AppendLog log;
  std::string path;
  int64_t max_events = 0;
  int64_t events = 0;
  bool thinned_logged = false;
  // steady_clock -> Unix microseconds, fixed when the log opens.
  int64_t unix_us_at_open = 0;
  std::chrono::steady_clock::time_point steady_at_open;
};

TraceLog::TraceLog(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
TraceLog::~TraceLog() = default;

Result<std::unique_ptr<TraceLog>> TraceLog::Open(const std::string& path, int64_t max_events) {
  auto impl = std::make_unique<Impl>();
  SPOT_RETURN_IF_ERROR(CreateDirectories(fs::path(path).parent_path().string()));
  SPOT_ASSIGN_OR_RETURN(impl->log, AppendLog::Open(path));
  impl->path = path;
  impl->max_events = max_events;
  impl->steady_at_open = std::chrono::steady_clock::now();
  impl->unix_us_at_open = RealClock()->NowUnixMs() * 1000;
  return std::unique_ptr<TraceLog>(new TraceLog(std::move(impl)));
}

void TraceLog::Complete(std::string_view name, TraceLane lane,
                        std::chrono::steady_clock::time_point start, double seconds, int64_t step) {
  Impl& m = *impl_;
  std::lock_guard<std::mutex> lock(m.mu);
  if (!m.log.on()) return;
  if (m.events >= m.max_events && step % 100 != 0) {
    if (!m.thinned_logged) {
      spdlog::info("profile {}: {} events; from now on every 100th step only", m.path, m.events);
      m.thinned_logged = true;
    }
    return;
  }
  const int64_t ts =
      m.unix_us_at_open +
      std::chrono::duration_cast<std::chrono::microseconds>(start - m.steady_at_open).count();
  const int64_t dur = std::max<int64_t>(0, static_cast<int64_t>(seconds * 1e6 + 0.5));
  json e = {{"name", name},
            {"cat", kLaneNames[static_cast<int>(lane)]},
            {"ph", "X"},
            {"ts", ts},
            {"dur", dur},
            {"pid", 0},
            {"tid", static_cast<int>(lane)},
            {"args", {{"step", step}}}};
  m.log.Append(e.dump() + "\n");
  ++m.events;
}

int64_t TraceLog::events() const {
  std::lock_guard<std::mutex> lock(impl_->mu);
  return impl_->events;
}

std::vector<std::string> TraceFilesOf(const std::string& run_dir) {
  std::vector<std::string> out;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(fs::path(run_dir) / "profile", ec)) {
    const std::string name = e.path().filename().string();
    if (e.is_regular_file() && name.ends_with(kSuffix)) out.push_back(e.path().string());
  }
  std::sort(out.begin(), out.end());
  return out;
}

std::string TracePathFor(const std::string& run_dir, const std::string& worker_id) {
  std::string safe;
  for (char c : worker_id) {
    safe +=
        (std::isalnum(static_cast<unsigned char>(c)) || c == '-' || c == '_' || c == '.') ? c : '_';
  }
  if (safe.empty()) safe = "worker";
  return (fs::path(run_dir) / "profile" / (safe + std::string(kSuffix))).string();
}

Result<std::string> MergeTraceFiles(const std::vector<std::string>& files,
                                    ProfileSummary* summary) {
  json events = json::array();
  ProfileSummary sum;
  for (size_t f = 0; f < files.size(); ++f) {
    SPOT_ASSIGN_OR_RETURN(std::string text, ReadFile(files[f]));
    std::string process = fs::path(files[f]).filename().string();
    if (process.ends_with(kSuffix)) process.resize(process.size() - kSuffix.size());
    const int pid = static_cast<int>(f) + 1;
    events.push_back(
        {{"name", "process_name"}, {"ph", "M"}, {"pid", pid}, {"args", {{"name", process}}}});
    for (int lane = 0; lane < 3; ++lane) {
      events.push_back({{"name", "thread_name"},
                        {"ph", "M"},
                        {"pid", pid},
                        {"tid", lane},
                        {"args", {{"name", kLaneNames[lane]}}}});
    }
    // Per (lane, phase): durations in microseconds, in first-seen order.
    std::vector<std::pair<std::string, std::string>> order;
    std::map<std::pair<std::string, std::string>, std::vector<int64_t>> durations;
    size_t line_no = 0, pos = 0;
    while (pos < text.size()) {
      size_t end = text.find('\n', pos);
      const bool last = end == std::string::npos;
      if (last) end = text.size();
      std::string_view line(text.data() + pos, end - pos);
      pos = end + 1;
      ++line_no;
      if (line.empty()) continue;
      json e = json::parse(line, nullptr, /*allow_exceptions=*/false);
      const bool complete = e.is_object() && e.value("ph", "") == "X" && e.contains("name") &&
                            e["name"].is_string() && e.contains("ts") &&
                            e["ts"].is_number_integer() && e.contains("dur") &&
                            e["dur"].is_number_integer() && e["dur"].get<int64_t>() >= 0 &&
                            e.contains("tid") && e["tid"].is_number_integer() &&
                            e["tid"].get<int>() >= 0 && e["tid"].get<int>() < 3;
      if (!complete) {
        if (last) {  // a worker killed mid-line
          ++sum.skipped_lines;
          continue;
        }
        return InvalidArgumentError(fmt::format(
            "{}:{}: not a complete trace event (want an object with ph \"X\", name, ts, dur "
            "and tid 0-2)",
            files[f], line_no));
      }
      e["pid"] = pid;
      const std::pair<std::string, std::string> key{kLaneNames[e["tid"].get<int>()],
                                                    e["name"].get<std::string>()};
      if (!durations.contains(key)) order.push_back(key);
      durations[key].push_back(e["dur"].get<int64_t>());
      events.push_back(std::move(e));
      ++sum.events;
    }
    double step_total = 0;
    for (const auto& [key, d] : durations) {
      if (key.first == "step") {
        for (int64_t us : d) step_total += static_cast<double>(us) / 1e6;
      }
    }
    auto lane_rank = [](const std::string& lane) {
      return std::find(std::begin(kLaneNames), std::end(kLaneNames), lane) - std::begin(kLaneNames);
    };
    std::stable_sort(order.begin(), order.end(), [&](const auto& a, const auto& b) {
      return lane_rank(a.first) < lane_rank(b.first);
    });
    for (const auto& key : order) {
      std::vector<int64_t> d = durations[key];
      PhaseRow row{.process = process, .phase = key.second, .lane = key.first};
      row.count = static_cast<int64_t>(d.size());
      for (int64_t us : d) row.total_s += static_cast<double>(us) / 1e6;
      row.mean_ms = row.total_s * 1e3 / static_cast<double>(row.count);
      std::sort(d.begin(), d.end());
      row.p95_ms = static_cast<double>(d[(d.size() * 95 + 99) / 100 - 1]) / 1e3;
      row.share = key.first == "step" && step_total > 0 ? row.total_s / step_total : 0;
      sum.rows.push_back(std::move(row));
    }
  }
  if (summary) *summary = std::move(sum);
  json doc = {{"traceEvents", std::move(events)}, {"displayTimeUnit", "ms"}};
  return doc.dump() + "\n";
}

}  // namespace spot::monitor
