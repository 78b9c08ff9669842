// The end-to-end tests leave no process behind. Before the first test, this
// binary puts SPOT_E2E_MARKER=<its pid>.<start time> in its environment; every
// process the tests start inherits it (core::Spawn passes the environment
// on), and so do theirs: `spot run`'s rendezvous, the workers, anything they
// launch. After the last test, any process still carrying this run's marker
// is a leak: the run fails naming each one, and they are killed. Processes
// of other runs, and a developer's own, never carry this marker.
#include <gtest/gtest.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <charconv>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <thread>
#include <vector>

namespace spot::testing {
namespace {

namespace fs = std::filesystem;

constexpr const char* kMarkerVar = "SPOT_E2E_MARKER";

std::string ReadAll(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

struct Leaked {
  pid_t pid = 0;
  std::string command;  // its command line, arguments joined by spaces
};

// The live processes (not zombies) whose environment holds `entry`.
std::vector<Leaked> Marked(const std::string& entry) {
  std::vector<Leaked> out;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator("/proc", ec)) {
    const std::string name = e.path().filename().string();
    pid_t pid = 0;
    const auto [end, err] = std::from_chars(name.data(), name.data() + name.size(), pid);
    if (err != std::errc() || end != name.data() + name.size()) continue;  // not a process
    if (pid == ::getpid()) continue;
    const std::string env = ReadAll(e.path() / "environ");
    if (env.find(std::string(1, '\0') + entry + '\0') == std::string::npos &&
        !env.starts_with(entry + '\0')) {
      continue;
    }
    std::string cmd = ReadAll(e.path() / "cmdline");
    std::replace(cmd.begin(), cmd.end(), '\0', ' ');
    out.push_back({pid, cmd});
  }
  return out;
}

class LeakCheck final : public ::testing::Environment {
 public:
  void SetUp() override {
    const std::string marker =
        std::to_string(::getpid()) + "." +
        std::to_string(std::chrono::steady_clock::now().time_since_epoch().count());
    ::setenv(kMarkerVar, marker.c_str(), /*overwrite=*/1);
    entry_ = std::string(kMarkerVar) + "=" + marker;
  }

  void TearDown() override {
    // A process being stopped as the last test ends gets a few seconds.
    std::vector<Leaked> left = Marked(entry_);
    for (int i = 0; i < 100 && !left.empty(); ++i) {
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
      left = Marked(entry_);
    }
    for (const Leaked& p : left) {
      ADD_FAILURE() << "process " << p.pid
                    << " started by the tests is still running after them: " << p.command;
      ::kill(p.pid, SIGKILL);
    }
  }

 private:
  std::string entry_;
};

[[maybe_unused]] ::testing::Environment* const kLeakCheck =
    ::testing::AddGlobalTestEnvironment(new LeakCheck);

}  // namespace
}  // namespace spot::testing
