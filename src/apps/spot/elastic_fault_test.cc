// Elastic fault campaign: 4 `spot worker` processes (via `spot train
// --nproc 4`), three of them SIGKILLed one after another at random steps and
// random moments within a step. Every trial must finish with every sample of
// every epoch trained on exactly once, and every generation's members bitwise
// equal. SPOT_FAULT_TRIALS / 4 trials (at least 1; `make fault`: 6).
#include <fmt/format.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <random>
#include <set>

#include "apps/spot/elastic_e2e_support.h"
#include "core/file_io.h"

namespace spot::testing {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;
using ElasticFaultTest = E2eTest;

int ElasticTrials() {
  const char* v = std::getenv("SPOT_FAULT_TRIALS");
  return std::max(1, (v ? std::atoi(v) : 4) / 4);
}

TEST_F(ElasticFaultTest, WorkersKilledOneByOneNeverLoseOrRepeatASample) {
  std::mt19937 rng(20261201);
  for (int trial = 0; trial < ElasticTrials(); ++trial) {
    SCOPED_TRACE(fmt::format("trial {}", trial));
    fs::path base = dir_ / fmt::format("t{}", trial);
    fs::create_directories(base);
    fs::path out = base / "run", steps = base / "steps.csv", logs = base / "workers";
    fs::path job = WriteJob(fmt::format("t{}", trial),
                            ElasticJobYaml(out, 3, 3200, "  max_workers: 4\n  join_window_s: 60\n"));
    ChildProcess launcher({SPOT_BIN, "train", job.string(), "--nproc", "4", "--plain",
                           "--step-log", steps.string(), "--log-dir", logs.string()},
                          (base / "launcher").string());
    std::vector<int64_t> at(3);
    for (int64_t& s : at) s = std::uniform_int_distribution<int64_t>(20, 270)(rng);
    std::sort(at.begin(), at.end());
    std::set<int> killed;
    for (int64_t step : at) {
      while (LastLoggedStep(steps) < step && launcher.Running()) ::usleep(2000);
      ASSERT_TRUE(launcher.Running()) << "finished before the kill at step " << step;
      std::vector<int> alive;
      for (const json& e : ReadEvents(FilesEndingWith(logs, ".events.jsonl"))) {
        int pid = e["pid"];
        if (!killed.count(pid) && std::find(alive.begin(), alive.end(), pid) == alive.end()) {
          alive.push_back(pid);
        }
      }
      ASSERT_FALSE(alive.empty());
      int victim = alive[std::uniform_int_distribution<size_t>(0, alive.size() - 1)(rng)];
      ::usleep(std::uniform_int_distribution<int>(0, 20000)(rng));
      ASSERT_EQ(::kill(victim, SIGKILL), 0);
      killed.insert(victim);
    }
    ProcessResult r = launcher.Wait(300);
    ASSERT_EQ(r.exit_code, 0) << r.err;
    EXPECT_NE(r.out.find("finished by 1 workers (3 lost)"), std::string::npos) << r.out;
    ExpectEverySampleOnce(ReadSampleLogs(FilesEndingWith(logs, ".samples.csv")), 3200, 300, 3);
    std::map<int64_t, std::set<std::string>> hashes;
    for (const json& e : ReadEvents(FilesEndingWith(logs, ".events.jsonl"))) {
      hashes[e["generation"]].insert(e["state_hash"].get<std::string>());
    }
    for (const auto& [gen, hs] : hashes) EXPECT_EQ(hs.size(), 1u) << "generation " << gen;
    auto summary = ReadFile((out / "summary.json").string());
    ASSERT_TRUE(summary.ok());
    EXPECT_EQ(json::parse(*summary)["steps"], 300);
  }
}

}  // namespace
}  // namespace spot::testing
