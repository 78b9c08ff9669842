#include "core/process_cpu.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <sched.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <filesystem>
#include <map>
#include <set>
#include <thread>

namespace spot {
namespace {

// The fields after "(comm) " that are read, 0 being the state (proc(5)
// numbers them from 1 with the pid: these are its 3, 4, 5, 14, 15, 16, 17).
constexpr int kPpid = 1, kPgrp = 2, kUtime = 11, kStime = 12, kCutime = 13, kCstime = 14;
constexpr const char* kNames[] = {"state",   "ppid",  "pgrp",   "session", "tty_nr",
                                  "tpgid",   "flags", "minflt", "cminflt", "majflt",
                                  "cmajflt", "utime", "stime",  "cutime",  "cstime"};

Result<int64_t> Field(std::string_view text, const char* name) {
  int64_t v = 0;
  auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
  if (ec != std::errc() || end != text.data() + text.size() || v < 0) {
    return InvalidArgumentError(fmt::format("{} '{}' is not a count", name, text));
  }
  return v;
}

// The whole small file (a stat line is under 1 KiB); "" when it cannot be
// opened or read: the process has gone.
std::string ReadSmallFile(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return "";
  std::string text;
  char buf[1024];
  for (ssize_t n; (n = ::read(fd, buf, sizeof buf)) != 0;) {
    if (n < 0) {
      if (errno == EINTR) continue;
      text.clear();  // ESRCH: it went while read
      break;
    }
    text.append(buf, static_cast<size_t>(n));
  }
  ::close(fd);
  return text;
}

}  // namespace

Result<ProcStat> ParseProcStat(std::string_view line, double ticks_per_s) {
  while (!line.empty() && (line.back() == '\n' || line.back() == ' ')) line.remove_suffix(1);
  const size_t open = line.find(" (");
  const size_t close = line.rfind(')');
  if (open == std::string_view::npos || close == std::string_view::npos || close < open) {
    return InvalidArgumentError("not a stat line: no \"pid (comm)\"");
  }
  ProcStat s;
  SPOT_ASSIGN_OR_RETURN(s.pid, Field(line.substr(0, open), "pid"));
  std::vector<std::string_view> fields;
  for (size_t at = close + 1; at < line.size() && fields.size() <= kCstime;) {
    if (line[at] == ' ') {
      ++at;
      continue;
    }
    const size_t end = std::min(line.find(' ', at), line.size());
    fields.push_back(line.substr(at, end - at));
    at = end;
  }
  if (fields.size() <= kCstime) {
    return InvalidArgumentError(fmt::format("{} fields after the command name, not {}: no {}",
                                            fields.size(), kCstime + 1, kNames[fields.size()]));
  }
  int64_t t[4];
  const int at[4] = {kUtime, kStime, kCutime, kCstime};
  SPOT_ASSIGN_OR_RETURN(s.ppid, Field(fields[kPpid], "ppid"));
  SPOT_ASSIGN_OR_RETURN(s.pgrp, Field(fields[kPgrp], "pgrp"));
  for (int i = 0; i < 4; ++i) {
    SPOT_ASSIGN_OR_RETURN(t[i], Field(fields[at[i]], kNames[at[i]]));
  }
  s.cpu_s = static_cast<double>(t[0] + t[1]) / ticks_per_s;
  s.children_cpu_s = static_cast<double>(t[2] + t[3]) / ticks_per_s;
  return s;
}

Result<std::vector<ProcStat>> ReadProcStats(const std::string& proc_dir, double ticks_per_s) {
  std::error_code ec;
  std::filesystem::directory_iterator it(proc_dir, ec);
  if (ec) return UnavailableError(fmt::format("listing {}: {}", proc_dir, ec.message()));
  std::vector<ProcStat> out;
  for (; it != std::filesystem::directory_iterator(); it.increment(ec)) {
    const std::string name = it->path().filename().string();
    if (name.empty() || name.find_first_not_of("0123456789") != std::string::npos) continue;
    const std::string path = it->path().string() + "/stat";
    const std::string text = ReadSmallFile(path);
    if (text.empty()) continue;  // gone
    auto s = ParseProcStat(text, ticks_per_s);
    if (!s.ok()) return InvalidArgumentError(fmt::format("{}: {}", path, s.status().message()));
    if (std::to_string(s->pid) != name) {
      return InvalidArgumentError(fmt::format("{}: names pid {}", path, s->pid));
    }
    out.push_back(*s);
  }
  if (ec) return UnavailableError(fmt::format("listing {}: {}", proc_dir, ec.message()));
  return out;
}

double ProcTicksPerSecond() {
  const long t = ::sysconf(_SC_CLK_TCK);
  return t > 0 ? static_cast<double>(t) : 100.0;
}

int AvailableCpus() {
  cpu_set_t set;
  CPU_ZERO(&set);
  if (::sched_getaffinity(0, sizeof set, &set) == 0) return std::max(1, CPU_COUNT(&set));
  return static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
}

Result<ProcStat> ProcessTreeCpu::ReadRoot() const {
  const std::string path = fmt::format("{}/{}/stat", options_.proc_dir, options_.root);
  const std::string text = ReadSmallFile(path);
  if (text.empty()) return NotFoundError(fmt::format("{}: no such process", path));
  auto s = ParseProcStat(text, options_.ticks_per_s);
  if (!s.ok()) return InvalidArgumentError(fmt::format("{}: {}", path, s.status().message()));
  return s;
}

Result<ProcessTreeCpu> ProcessTreeCpu::Open(const ProcessTreeCpuOptions& options) {
  ProcessTreeCpuOptions o = options;
  if (o.root <= 0) o.root = ::getpid();
  if (o.ticks_per_s <= 0) o.ticks_per_s = ProcTicksPerSecond();
  ProcessTreeCpu cpu(std::move(o), 0);
  SPOT_ASSIGN_OR_RETURN(ProcStat root, cpu.ReadRoot());
  cpu.baseline_s_ = root.children_cpu_s;
  return cpu;
}

Result<double> ProcessTreeCpu::Sample() {
  // The root first: what it reaps after this read is still seen live below
  // (or, reaped in between, missed once), never counted twice.
  SPOT_ASSIGN_OR_RETURN(ProcStat root, ReadRoot());
  SPOT_ASSIGN_OR_RETURN(std::vector<ProcStat> all,
                        ReadProcStats(options_.proc_dir, options_.ticks_per_s));
  std::multimap<int64_t, const ProcStat*> by_parent;
  for (const ProcStat& p : all) by_parent.emplace(p.ppid, &p);
  double total = root.children_cpu_s - baseline_s_;
  std::vector<int64_t> todo = {root.pid};
  std::set<int64_t> seen = {root.pid};  // a ppid cycle (only a damaged /proc has one) ends
  while (!todo.empty()) {
    const int64_t parent = todo.back();
    todo.pop_back();
    auto [from, to] = by_parent.equal_range(parent);
    for (auto it = from; it != to; ++it) {
      if (!seen.insert(it->second->pid).second) continue;
      total += it->second->cpu_s + it->second->children_cpu_s;
      todo.push_back(it->second->pid);
    }
  }
  last_s_ = std::max(last_s_, total);
  return last_s_;
}

}  // namespace spot
