// Shared pieces of the elastic end-to-end tests: a small elastic job, the
// per-worker sample and event logs `spot worker` writes, and the check that
// every sample of every epoch was trained on exactly once.
#pragma once

#include <fmt/format.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <vector>

#include "apps/spot/e2e_support.h"
#include "apps/spot/test_process.h"
#include "core/file_io.h"

namespace spot::testing {

// An MLP job on `train_limit` images at batch 32, with short timeouts: the
// `distributed:` defaults below unless `distributed_extra` sets the field.
inline std::string ElasticJobYaml(const std::filesystem::path& out, int64_t epochs,
                                  int64_t train_limit, const std::string& distributed_extra) {
  std::string distributed = distributed_extra;
  for (const char* d : {"join_window_s: 0.3", "liveness_ttl_s: 2", "collective_timeout_s: 5"}) {
    std::string key(d, std::strchr(d, ':'));
    if (distributed_extra.find(key + ":") == std::string::npos)
      distributed += fmt::format("  {}\n", d);
  }
  return fmt::format(
      "name: elastic\nmodel: mlp\ndataset:\n  path: {}\n  train_limit: {}\n  test_limit: 1000\n"
      "batch_size: 32\nepochs: {}\nseed: 3\nthreads: 1\n"
      "optimizer:\n  type: sgd\n  lr: 0.05\n"
      "checkpoint:\n  interval_steps: 50\n"
      "output_dir: {}\n"
      "distributed:\n{}",
      kDataset, train_limit, epochs, out.string(), distributed);
}

// Waits for `spot rendezvous --port 0` (running as `p`, its output in
// `out_file`) to print its address, and returns it ("" if it never does).
inline std::string StartRendezvous(ChildProcess& p, const std::filesystem::path& out_file) {
  for (int i = 0; i < 2000; ++i) {
    auto text = ReadFile(out_file.string());
    if (text.ok()) {
      auto at = text->find("tcp://");
      if (at != std::string::npos && text->find('\n', at) != std::string::npos) {
        return text->substr(at, text->find('\n', at) - at);
      }
    }
    if (!p.Running()) break;
    ::usleep(5000);
  }
  return "";
}

struct SampleRecord {
  int64_t step, epoch, generation, world, rank, batch_begin, batch_end, begin, end;
};

inline std::vector<SampleRecord> ReadSampleLogs(const std::vector<std::filesystem::path>& paths) {
  std::vector<SampleRecord> out;
  for (const auto& p : paths) {
    std::ifstream f(p);
    std::string line;
    while (std::getline(f, line)) {
      SampleRecord r;
      if (std::sscanf(line.c_str(), "%ld,%ld,%ld,%ld,%ld,%ld,%ld,%ld,%ld", &r.step, &r.epoch,
                      &r.generation, &r.world, &r.rank, &r.batch_begin, &r.batch_end, &r.begin,
                      &r.end) == 9) {
        out.push_back(r);
      }
    }
  }
  return out;
}

inline std::vector<nlohmann::json> ReadEvents(const std::vector<std::filesystem::path>& paths) {
  std::vector<nlohmann::json> out;
  for (const auto& p : paths) {
    std::ifstream f(p);
    std::string line;
    while (std::getline(f, line)) {
      if (!line.empty()) out.push_back(nlohmann::json::parse(line));
    }
  }
  return out;
}

inline std::vector<std::filesystem::path> FilesEndingWith(const std::filesystem::path& dir,
                                                          const std::string& suffix) {
  std::vector<std::filesystem::path> out;
  for (const auto& e : std::filesystem::directory_iterator(dir)) {
    if (e.path().string().ends_with(suffix)) out.push_back(e.path());
  }
  return out;
}

// Steps 1..total each appear with one global batch; per epoch the global
// batches tile [0, n) with no gap or overlap; and each step's parts, within a
// generation whose every member logged it, tile its global batch. A worker
// killed between finishing a step and logging it leaves that step's parts
// incomplete: at most `kills` steps may be so.
inline void ExpectEverySampleOnce(const std::vector<SampleRecord>& records, int64_t n,
                                  int64_t total_steps, int kills) {
  std::map<int64_t, std::vector<SampleRecord>> by_step;
  for (const SampleRecord& r : records) by_step[r.step].push_back(r);
  ASSERT_EQ(by_step.size(), static_cast<size_t>(total_steps));
  ASSERT_EQ(by_step.begin()->first, 1);
  ASSERT_EQ(by_step.rbegin()->first, total_steps);
  std::map<int64_t, std::vector<std::pair<int64_t, int64_t>>> epochs;
  int incomplete = 0;
  for (const auto& [step, rs] : by_step) {
    const SampleRecord& a = rs.front();
    for (const SampleRecord& r : rs) {
      ASSERT_EQ(std::tie(r.epoch, r.batch_begin, r.batch_end),
                std::tie(a.epoch, a.batch_begin, a.batch_end))
          << "step " << step << " has two different global batches";
    }
    epochs[a.epoch].push_back({a.batch_begin, a.batch_end});
    bool tiled = false;
    std::map<int64_t, std::map<int64_t, SampleRecord>> by_gen;
    for (const SampleRecord& r : rs) by_gen[r.generation][r.rank] = r;
    for (const auto& [gen, ranks] : by_gen) {
      if (static_cast<int64_t>(ranks.size()) != ranks.begin()->second.world) continue;
      int64_t at = a.batch_begin;
      bool ok = true;
      for (const auto& [rank, r] : ranks) {
        ok = ok && r.begin == at;
        at = r.end;
      }
      tiled = tiled || (ok && at == a.batch_end);
    }
    incomplete += tiled ? 0 : 1;
  }
  EXPECT_LE(incomplete, kills) << "steps whose parts do not tile their global batch";
  for (auto& [epoch, batches] : epochs) {
    std::sort(batches.begin(), batches.end());
    int64_t at = 0;
    for (const auto& [b, e] : batches) {
      ASSERT_EQ(b, at) << "epoch " << epoch << ": samples skipped or repeated at position " << at;
      at = e;
    }
    bool last_epoch = epoch == epochs.rbegin()->first;
    if (!last_epoch) {
      EXPECT_EQ(at, n) << "epoch " << epoch << " ended early";
    }
  }
}

}  // namespace spot::testing
