#include "cpu_load.h"

#include <fmt/format.h>
#include <sys/resource.h>
#include <unistd.h>

#include <chrono>
#include <fstream>
#include <string>
#include <thread>

#include "report.h"

namespace spot::bench {
namespace {

double WallSeconds() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

// CPU seconds all cores spent busy since boot (user, nice, system, irq,
// softirq, steal; guest time is already inside user). -1 when unreadable.
double MachineBusySeconds() {
  std::ifstream in("/proc/stat");
  std::string cpu;
  double user, nice, system, idle, iowait, irq, softirq, steal;
  if (!(in >> cpu >> user >> nice >> system >> idle >> iowait >> irq >> softirq >> steal) ||
      cpu != "cpu") {
    return -1;
  }
  return (user + nice + system + irq + softirq + steal) / static_cast<double>(sysconf(_SC_CLK_TCK));
}

double Seconds(const timeval& t) { return static_cast<double>(t.tv_sec) + t.tv_usec * 1e-6; }

// CPU seconds of this process (all threads) and of the children it has reaped.
double OwnCpuSeconds() {
  double total = 0;
  for (int who : {RUSAGE_SELF, RUSAGE_CHILDREN}) {
    rusage u{};
    getrusage(who, &u);
    total += Seconds(u.ru_utime) + Seconds(u.ru_stime);
  }
  return total;
}

}  // namespace

CpuLoadMeter::CpuLoadMeter()
    : start_wall_(WallSeconds()), start_busy_(MachineBusySeconds()), start_own_(OwnCpuSeconds()) {}

double CpuLoadMeter::OtherCores() const {
  double busy = MachineBusySeconds();
  double wall = WallSeconds() - start_wall_;
  if (start_busy_ < 0 || busy < 0 || wall <= 0) return -1;
  double other = (busy - start_busy_) - (OwnCpuSeconds() - start_own_);
  return other > 0 ? other / wall : 0;
}

double WaitForQuiet(double max_cores, double max_wait_s) {
  const double deadline = WallSeconds() + max_wait_s;
  bool told = false;
  while (true) {
    CpuLoadMeter meter;
    std::this_thread::sleep_for(std::chrono::milliseconds(500));
    double other = meter.OtherCores();
    if (other < max_cores || WallSeconds() >= deadline) return other;
    if (!told) {
      Progress(
          fmt::format("other processes keep {:.1f} cores busy; waiting up to {:.0f} s for "
                      "a quiet machine",
                      other, max_wait_s));
      told = true;
    }
  }
}

}  // namespace spot::bench
