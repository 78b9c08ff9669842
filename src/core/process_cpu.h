// CPU time of a process tree, read from /proc (proc(5)): how `spot agent`
// measures how busy the program it runs keeps its CPUs, whatever the program
// is (a shell script, Python, a compiled binary) and however many processes
// it makes.
//
//   SPOT_ASSIGN_OR_RETURN(ProcessTreeCpu cpu, ProcessTreeCpu::Open({}));
//   ... start children ...
//   Result<double> busy_s = cpu.Sample();  // CPU seconds of our descendants
//
// What is counted: user + system time of every descendant of the root
// process (its children, their children, ...) while it runs, plus the time
// of descendants that already ended: a process reaped by a counted parent
// carries into that parent's "children" time (cutime + cstime), one reaped by
// the root into the root's (since Open()). Orphans count only while the root
// is their subreaper (PR_SET_CHILD_SUBREAPER), as `spot agent` is for its
// ranks; a process reaped by a parent that ignores SIGCHLD loses its time
// (the kernel adds it to no one).
//
// Hand-written on purpose: Debian packages procps's libproc2 (libproc2-dev
// 4.0.2), but it reads only the live /proc, so neither the parser nor the
// tree walk could be tested on the malformed and vanishing entries below;
// what is needed is 6 fields of one documented line per process.
//
// /proc changes while it is read. A process that vanishes between listing
// and reading is skipped; the root is read before its descendants, so a
// process reaped while /proc is read is at worst missed for that one sample,
// and Sample() never returns less than it returned before (a counter must
// not go backward).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "core/status.h"

namespace spot {

// The fields of one /proc/PID/stat line that CPU accounting needs.
struct ProcStat {
  int64_t pid = 0;
  int64_t ppid = 0;
  int64_t pgrp = 0;
  double cpu_s = 0;           // utime + stime: the process's own threads
  double children_cpu_s = 0;  // cutime + cstime: descendants it (or they) reaped
};

// Parses one /proc/PID/stat line ("pid (comm) state ppid pgrp ... utime
// stime cutime cstime ..."; comm may hold spaces and parentheses).
// `ticks_per_s` (> 0) converts clock ticks to seconds. InvalidArgument
// saying which field is missing or not a number.
Result<ProcStat> ParseProcStat(std::string_view line, double ticks_per_s);

// Every process under `proc_dir` (its numeric entries), each from its
// "stat" file. A process gone before its file is read (missing, unreadable or
// empty) is skipped. Unavailable when `proc_dir` cannot be listed;
// InvalidArgument "PROC_DIR/PID/stat: reason" for a line that does not
// parse or names another pid.
Result<std::vector<ProcStat>> ReadProcStats(const std::string& proc_dir, double ticks_per_s);

// Clock ticks per second of /proc's times (sysconf(_SC_CLK_TCK)).
double ProcTicksPerSecond();

// The CPUs this process may run on (sched_getaffinity), at least 1.
int AvailableCpus();

struct ProcessTreeCpuOptions {
  // Whose descendants are counted; 0 = this process.
  int64_t root = 0;
  // Where /proc is (tests point this at a directory of their own).
  std::string proc_dir = "/proc";
  // Clock ticks per second of the times there; 0 = ProcTicksPerSecond().
  double ticks_per_s = 0;
};

// Thread safety: Sample() from one thread at a time.
class ProcessTreeCpu {
 public:
  // Reads the root's reaped-children time as the zero point: descendants
  // reaped before now are not counted; live ones are counted in full.
  // NotFound when the root's stat cannot be read; errors of ParseProcStat.
  static Result<ProcessTreeCpu> Open(const ProcessTreeCpuOptions& options);

  // CPU seconds of the root's descendants since Open() (see above), never
  // less than an earlier return. Errors of ReadProcStats, NotFound when the
  // root has gone; the next call may succeed again.
  Result<double> Sample();

 private:
  ProcessTreeCpu(ProcessTreeCpuOptions options, double baseline_s)
      : options_(std::move(options)), baseline_s_(baseline_s) {}
  Result<ProcStat> ReadRoot() const;

  ProcessTreeCpuOptions options_;
  double baseline_s_ = 0;  // the root's children_cpu_s at Open()
  double last_s_ = 0;      // the highest sample returned
};

}  // namespace spot
