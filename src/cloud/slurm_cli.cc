#include "cloud/slurm_cli.h"

#include <fmt/format.h>

#include <atomic>
#include <cstdlib>
#include <ctime>
#include <filesystem>
#include <set>
#include <sstream>

#include "core/file_io.h"
#include "core/number_text.h"
#include "core/process.h"

namespace spot::cloud {
namespace {

std::string Trim(std::string s) {
  while (!s.empty() && (s.back() == '\n' || s.back() == ' ' || s.back() == '\r')) s.pop_back();
  size_t b = 0;
  while (b < s.size() && (s[b] == ' ' || s[b] == '\n')) ++b;
  return s.substr(b);
}

std::vector<std::string> SplitOn(const std::string& s, char sep) {
  std::vector<std::string> out;
  std::string cur;
  for (char c : s) {
    if (c == sep) {
      out.push_back(cur);
      cur.clear();
    } else {
      cur += c;
    }
  }
  out.push_back(cur);
  return out;
}

// A decimal integer, strictly (core/number_text.h's rule).
bool ParseInt(const std::string& s, long* v) {
  Result<int64_t> x = ParseInteger(s);
  if (!x.ok()) return false;
  *v = static_cast<long>(*x);
  return true;
}

bool Contains(const std::string& s, std::string_view needle) {
  return s.find(needle) != std::string::npos;
}

}  // namespace

Result<CliOutput> RunCli(const std::vector<std::string>& argv,
                         const std::vector<std::pair<std::string, std::string>>& env,
                         const std::string& scratch_dir, double timeout_s) {
  static std::atomic<int64_t> counter{0};  // distinct file names within a scratch directory
  const std::string base = fmt::format("{}/cli.{}", scratch_dir, ++counter);
  const std::string out_path = base + ".out", err_path = base + ".err";
  Result<int64_t> pid = Spawn({.argv = argv,
                               .env = env,
                               .truncate = true,
                               .out = Output::File(out_path),
                               .err = Output::File(err_path),
                               .group = ProcessGroup::kNewGroup});
  if (!pid.ok()) {
    return UnavailableError(fmt::format("starting {}: {}", argv.front(), pid.status().message()));
  }
  Result<ProcessStatus> ended = WaitProcess(*pid, timeout_s);
  if (!ended.ok()) {
    (void)StopProcess(*pid, 0, /*whole_group=*/true);
    std::error_code ec;
    std::filesystem::remove(out_path, ec);
    std::filesystem::remove(err_path, ec);
    return DeadlineExceededError(
        fmt::format("{} did not answer within {:g} s", argv.front(), timeout_s));
  }
  CliOutput r;
  r.exit_code = ended->exit_code;
  Result<std::string> out = ReadFile(out_path);
  Result<std::string> err = ReadFile(err_path);
  if (out.ok()) r.out = std::move(*out);
  if (err.ok()) r.err = std::move(*err);
  std::error_code ec;
  std::filesystem::remove(out_path, ec);
  std::filesystem::remove(err_path, ec);
  if (r.exit_code == 127 && Contains(r.err, "exec")) {
    return UnavailableError(fmt::format("{} cannot be run: {}", argv.front(), Trim(r.err)));
  }
  return r;
}

Result<std::vector<SlurmJobState>> ParseSqueue(const std::string& text) {
  std::vector<SlurmJobState> out;
  std::istringstream in(text);
  std::string line;
  while (std::getline(in, line)) {
    line = Trim(line);
    if (line.empty()) continue;
    std::vector<std::string> f = SplitOn(line, '|');
    // Every field ends with '|': seven fields, then an empty tail.
    if (f.size() != 8 || !f[7].empty()) {
      return InvalidArgumentError("squeue line '" + line + "': want 7 '|'-terminated fields");
    }
    SlurmJobState s{.job_id = f[0], .state = f[1], .reason = f[2], .nodes = f[3]};
    long status = 0;
    if (!ParseInt(f[4], &status) || status < 0) {
      return InvalidArgumentError("squeue line '" + line + "': exit status '" + f[4] +
                                  "' is not a number");
    }
    // squeue prints the raw wait status: exit code << 8, or the signal.
    if (SlurmStateEnded(s.state)) {
      if ((status & 0x7f) == 0) {
        s.exit_code = static_cast<int>((status >> 8) & 0xff);
      } else {
        s.signal = static_cast<int>(status & 0x7f);
      }
    }
    if (ParseSlurmTime(f[5]).ok()) s.preempt_time = f[5];
    if (ParseSlurmTime(f[6]).ok()) s.start_time = f[6];
    out.push_back(std::move(s));
  }
  return out;
}

Result<std::vector<SlurmJobState>> ParseSacct(const std::string& text) {
  std::vector<SlurmJobState> out;
  std::istringstream in(text);
  std::string line;
  while (std::getline(in, line)) {
    line = Trim(line);
    if (line.empty()) continue;
    std::vector<std::string> f = SplitOn(line, '|');
    if (f.size() != 3) {
      return InvalidArgumentError("sacct line '" + line + "': want JobIDRaw|State|ExitCode");
    }
    // "CANCELLED by 0" names who cancelled it.
    SlurmJobState s{.job_id = f[0], .state = SplitOn(f[1], ' ').front(), .reason = "None"};
    std::vector<std::string> code = SplitOn(f[2], ':');
    long exit = 0, sig = 0;
    if (code.size() != 2 || !ParseInt(code[0], &exit) || !ParseInt(code[1], &sig)) {
      return InvalidArgumentError("sacct line '" + line + "': ExitCode '" + f[2] +
                                  "' is not CODE:SIGNAL");
    }
    if (sig != 0) {
      s.signal = static_cast<int>(sig);
    } else if (SlurmStateEnded(s.state)) {
      s.exit_code = static_cast<int>(exit);
    }
    out.push_back(std::move(s));
  }
  return out;
}

bool SlurmStateEnded(const std::string& state) {
  static const std::set<std::string> kEnded = {
      "COMPLETED", "FAILED",   "CANCELLED",     "TIMEOUT", "NODE_FAIL",   "PREEMPTED",
      "BOOT_FAIL", "DEADLINE", "OUT_OF_MEMORY", "REVOKED", "SPECIAL_EXIT"};
  return kEnded.count(state) > 0;
}

bool SlurmStateRunning(const std::string& state) {
  return state == "RUNNING" || state == "COMPLETING" || state == "CONFIGURING" ||
         state == "SIGNALING" || state == "STAGE_OUT" || state == "SUSPENDED" ||
         state == "STOPPED" || state == "RESIZING";
}

PendingOutlook ClassifyPendingReason(const std::string& reason) {
  // Slurm's job reason codes (squeue(1), "JOB REASON CODES").
  static const std::set<std::string> kNever = {
      "PartitionConfig", "PartitionNodeLimit", "PartitionTimeLimit",      "BadConstraints",
      "InvalidAccount",  "InvalidQOS",         "AccountNotAllowed",       "QOSNotAllowed",
      "JobHeldAdmin",    "FrontEndDown",       "DependencyNeverSatisfied"};
  static const std::set<std::string> kNotNow = {"PartitionDown", "PartitionInactive", "NodeDown",
                                                "ReqNodeNotAvail"};
  // "ReqNodeNotAvail,_UnavailableNodes:node3" carries detail after a comma.
  const std::string code = SplitOn(reason, ',').front();
  if (kNever.count(code)) return PendingOutlook::kNever;
  if (kNotNow.count(code)) return PendingOutlook::kNotNow;
  return PendingOutlook::kWaits;
}

Status MapSbatchError(const std::string& what, const std::string& stderr_text) {
  // Slurm's own words: the "Batch job submission failed: ..." line, else all.
  std::string msg;
  std::istringstream in(stderr_text);
  std::string line;
  while (std::getline(in, line)) {
    if (Contains(line, "Batch job submission failed")) {
      msg = Trim(line.substr(line.find("Batch job submission failed")));
    }
  }
  if (msg.empty()) msg = Trim(stderr_text);
  if (msg.empty()) msg = "sbatch failed and said nothing";
  const std::string full = what + ": " + msg;
  static const char* kNotNow[] = {"Resources",
                                  "resources",
                                  "QOSMax",
                                  "MaxJobs",
                                  "MaxSubmit",
                                  "job submit limit",
                                  "temporarily",
                                  "Socket timed out",
                                  "Unable to contact",
                                  "Connection refused",
                                  "Zero Bytes were transmitted",
                                  "Slurm controller not responding",
                                  "Job violates accounting/QOS policy",
                                  "Too many jobs"};
  for (const char* w : kNotNow) {
    if (Contains(msg, w)) return UnavailableError(full);
  }
  return FailedPreconditionError(full);
}

Result<std::string> ParseSbatchJobId(const std::string& out) {
  const std::string id = SplitOn(Trim(out), ';').front();
  long v = 0;
  if (!ParseInt(id, &v) || v <= 0) {
    return InvalidArgumentError("sbatch --parsable printed '" + Trim(out) + "', not a job id");
  }
  return id;
}

Result<double> ParseSlurmTime(const std::string& text) {
  std::tm tm{};
  const char* end = strptime(text.c_str(), "%Y-%m-%dT%H:%M:%S", &tm);
  if (end == nullptr || *end != '\0') {
    return InvalidArgumentError("'" + text + "' is not a Slurm time (YYYY-MM-DDTHH:MM:SS)");
  }
  tm.tm_isdst = -1;  // Slurm prints local time
  return static_cast<double>(std::mktime(&tm));
}

}  // namespace spot::cloud
