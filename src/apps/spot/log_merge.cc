#include "apps/spot/log_merge.h"

#include <fmt/format.h>

#include <algorithm>
#include <charconv>
#include <cctype>
#include <chrono>
#include <deque>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <queue>

namespace spot::cli {
namespace {

namespace fs = std::filesystem;

// The modification time of `path` in Unix milliseconds (0 when unknown).
int64_t ModifiedMs(const std::string& path) {
  std::error_code ec;
  const auto t = fs::last_write_time(path, ec);
  if (ec) return 0;
  const auto sys = std::chrono::file_clock::to_sys(t);
  return std::chrono::duration_cast<std::chrono::milliseconds>(sys.time_since_epoch()).count();
}

std::string Who(const LogSource& source, const LogLine& line) {
  if (!line.record) return source.label;
  const LogRecord& r = *line.record;
  std::string who = r.instance.empty() ? source.label : r.instance;
  if (r.rank >= 0) who += fmt::format(" rank {}", r.rank);
  if (r.generation >= 0) who += fmt::format(" gen {}", r.generation);
  return who;
}

std::string HumanTime(int64_t unix_ms) {
  std::string t = FormatLogTimestamp(unix_ms);
  t[10] = ' ';
  return t;
}

}  // namespace

std::vector<LogSource> JobLogSources(const std::string& job_dir) {
  std::vector<LogSource> out;
  std::error_code ec;
  for (const char* name : {"controller", "rendezvous"}) {
    const fs::path p = fs::path(job_dir) / (std::string(name) + ".log");
    if (fs::is_regular_file(p, ec)) out.push_back({p.string(), name, name});
  }
  std::vector<LogSource> instances;
  for (fs::directory_iterator it(fs::path(job_dir) / "instances", ec), end; !ec && it != end;
       it.increment(ec)) {
    const fs::path& p = it->path();
    if (p.extension() == ".log" && it->is_regular_file(ec)) {
      instances.push_back({p.string(), p.stem().string(), "worker"});
    }
  }
  std::sort(instances.begin(), instances.end(),
            [](const LogSource& a, const LogSource& b) { return a.label < b.label; });
  out.insert(out.end(), instances.begin(), instances.end());
  return out;
}

std::vector<LogLine> LogTail::Read(bool complete, uint64_t max_bytes) {
  std::ifstream in(path_, std::ios::binary);
  at_end_ = true;
  if (!in) return {};
  in.seekg(0, std::ios::end);
  const auto size = static_cast<uint64_t>(std::max<std::streamoff>(0, in.tellg()));
  if (size < offset_) {  // truncated or replaced: start again
    offset_ = 0;
    partial_.clear();
  }
  at_end_ = size - offset_ <= max_bytes;
  std::string chunk(std::min(size - offset_, max_bytes), '\0');
  in.seekg(static_cast<std::streamoff>(offset_));
  in.read(chunk.data(), static_cast<std::streamsize>(chunk.size()));
  chunk.resize(static_cast<size_t>(in.gcount()));
  offset_ += chunk.size();
  partial_ += chunk;
  std::vector<LogLine> lines = TakeLines(complete && at_end_);
  AssignTimes(lines);
  return lines;
}

std::vector<LogLine> LogTail::TakeLines(bool with_partial) {
  std::vector<LogLine> lines;
  size_t start = 0;
  for (size_t nl; (nl = partial_.find('\n', start)) != std::string::npos; start = nl + 1) {
    lines.push_back({.text = partial_.substr(start, nl - start)});
  }
  partial_.erase(0, start);
  if (with_partial && !partial_.empty()) {
    lines.push_back({.text = std::move(partial_)});
    partial_.clear();
  }
  for (LogLine& l : lines) {
    if (!l.text.empty() && l.text.back() == '\r') l.text.pop_back();
    l.record = ParseLogLine(l.text);
  }
  return lines;
}

// A JSON line's own time; a line before any time takes the first one this
// call reads (or the file's modification time); others the previous.
void LogTail::AssignTimes(std::vector<LogLine>& lines) {
  size_t orphans = 0;  // leading lines without a time yet
  for (LogLine& l : lines) {
    if (l.record) {
      for (size_t i = 0; i < orphans; ++i) lines[i].unix_ms = l.record->unix_ms;
      orphans = 0;
      have_time_ = true;
      last_ms_ = l.unix_ms = l.record->unix_ms;
    } else if (have_time_) {
      l.unix_ms = last_ms_;
    } else {
      ++orphans;
    }
  }
  if (orphans == 0) return;
  const int64_t mtime = ModifiedMs(path_);
  for (size_t i = 0; i < orphans; ++i) lines[i].unix_ms = mtime;
  have_time_ = true;
  last_ms_ = mtime;
}

void MergeStreams(size_t files, const std::function<std::optional<LogLine>(size_t)>& next,
                  const std::function<void(MergedLine)>& emit) {
  // Each stream's head; the heap orders (time, stream): the smallest first.
  std::vector<std::optional<LogLine>> head(files);
  using Key = std::pair<int64_t, size_t>;
  std::priority_queue<Key, std::vector<Key>, std::greater<>> order;
  for (size_t f = 0; f < files; ++f) {
    head[f] = next(f);
    if (head[f]) order.emplace(head[f]->unix_ms, f);
  }
  while (!order.empty()) {
    const size_t f = order.top().second;
    order.pop();
    emit({.source = f, .line = std::move(*head[f])});
    head[f] = next(f);
    if (head[f]) order.emplace(head[f]->unix_ms, f);
  }
}

std::vector<MergedLine> MergeByTime(std::vector<std::vector<LogLine>> files) {
  std::vector<size_t> at(files.size(), 0);
  std::vector<MergedLine> out;
  MergeStreams(
      files.size(),
      [&](size_t f) -> std::optional<LogLine> {
        if (at[f] == files[f].size()) return std::nullopt;
        return std::move(files[f][at[f]++]);
      },
      [&](MergedLine m) { out.push_back(std::move(m)); });
  return out;
}

void MergeFiles(const std::vector<LogSource>& sources, const std::function<void(MergedLine)>& emit,
                uint64_t chunk_bytes) {
  struct Cursor {
    LogTail tail;
    std::deque<LogLine> lines;
  };
  std::vector<Cursor> cursors;
  for (const LogSource& s : sources) cursors.push_back({.tail = LogTail(s.path)});
  auto next = [&](size_t f) -> std::optional<LogLine> {
    Cursor& c = cursors[f];
    bool more = true;  // a chunk may end inside a long line: read on
    while (c.lines.empty() && more) {
      for (LogLine& l : c.tail.Read(/*complete=*/true, chunk_bytes))
        c.lines.push_back(std::move(l));
      more = !c.tail.at_end();
    }
    if (c.lines.empty()) return std::nullopt;
    LogLine l = std::move(c.lines.front());
    c.lines.pop_front();
    return l;
  };
  MergeStreams(sources.size(), next, emit);
}

std::string LineLevel(const LogLine& line) {
  if (line.record) return line.record->level;
  return line.text.starts_with("error") ? "error" : "info";
}

bool Shown(const LogFilter& filter, const LogSource& source, const LogLine& line) {
  if (filter.since_ms && line.unix_ms < *filter.since_ms) return false;
  if (filter.min_level >= 0 && LogLevelRank(LineLevel(line)) < filter.min_level) return false;
  if (!filter.instance.empty()) {
    const bool mine = source.label == filter.instance ||
                      (line.record && line.record->instance == filter.instance);
    if (!mine) return false;
  }
  return true;
}

std::string HumanLine(const LogSource& source, const LogLine& line) {
  if (!line.record)
    return fmt::format("{} [{}] {}", HumanTime(line.unix_ms), source.label, line.text);
  return fmt::format("{} [{}] {:<5} {}", HumanTime(line.unix_ms), Who(source, line),
                     line.record->level, line.record->message);
}

std::string JsonLine(const LogSource& source, const LogLine& line) {
  if (line.record) return line.text;
  nlohmann::ordered_json j;
  j["@timestamp"] = FormatLogTimestamp(line.unix_ms);
  j["log.level"] = LineLevel(line);
  j["message"] = line.text;
  j["ecs.version"] = kEcsVersion;
  j["log.file.path"] = source.path;
  j["spot.role"] = source.role;
  if (source.role == "worker") j["spot.instance"] = source.label;
  return j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

bool JobEnded(const std::string& job_dir) {
  std::error_code ec;
  const fs::path summary = fs::path(job_dir) / "run-summary.json";
  if (!fs::exists(summary, ec)) return false;
  const fs::path controller = fs::path(job_dir) / "controller.log";
  if (!fs::exists(controller, ec)) return true;
  return fs::last_write_time(summary, ec) >= fs::last_write_time(controller, ec);
}

Result<int64_t> ParseSince(const std::string& text, int64_t now_ms) {
  if (text.size() >= 2 &&
      std::all_of(text.begin(), text.end() - 1, [](unsigned char c) { return std::isdigit(c); })) {
    const int64_t unit = text.back() == 's'   ? 1000
                         : text.back() == 'm' ? 60'000
                         : text.back() == 'h' ? 3'600'000
                         : text.back() == 'd' ? 86'400'000
                                              : 0;
    int64_t n = 0;  // at most 9 digits: no overflow below
    if (unit > 0 && text.size() <= 10) {
      std::from_chars(text.data(), text.data() + text.size() - 1, n);
      return now_ms - n * unit;
    }
  }
  if (auto t = ParseLogTimestamp(text)) return *t;
  if (text.size() == 20 && text.back() == 'Z') {  // without milliseconds
    if (auto t = ParseLogTimestamp(text.substr(0, 19) + ".000Z")) return *t;
  }
  return InvalidArgumentError(
      fmt::format("--since '{}': not a duration (90s, 10m, 2h, 1d) or a UTC time "
                  "(2026-12-03T07:00:00Z)",
                  text));
}

}  // namespace spot::cli
