// Shared pieces of the end-to-end tests: a job file for small, fast runs, the
// per-step log `spot train --step-log` writes, and a fixture with a temporary
// directory kept on failure.
#pragma once

#include <fmt/format.h>
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <optional>
#include <string>

#include "apps/spot/test_process.h"
#include "ckpt/store.h"
#include "core/temp_dir.h"

namespace spot::testing {

inline constexpr const char* kDataset = "/usr/share/datasets/fashion-mnist";

// A small MLP job on 1,600 images (100 steps an epoch at batch 16) and any
// extra YAML appended.
inline std::string SmallJobYaml(const std::filesystem::path& out, int64_t steps,
                                const std::string& extra) {
  return fmt::format(
      "name: e2e\nmodel: mlp\ndataset:\n  path: {}\n  train_limit: 1600\n  test_limit: 500\n"
      "batch_size: 16\nsteps: {}\nseed: 7\nthreads: 1\n"
      "optimizer:\n  type: adam\n  lr: 0.002\n"
      "output_dir: {}\n{}",
      kDataset, steps, out.string(), extra);
}

// step -> "epoch,loss,lr" as the step log printed them (exact float text).
using StepLog = std::map<int64_t, std::string>;

inline StepLog ReadStepLog(const std::filesystem::path& path) {
  StepLog log;
  std::ifstream f(path);
  std::string line;
  while (std::getline(f, line)) {
    if (line.empty()) continue;
    size_t comma = line.find(',');
    log[std::stoll(line.substr(0, comma))] = line.substr(comma + 1);
  }
  return log;
}

// The last complete step in a step log being written, 0 if none.
inline int64_t LastLoggedStep(const std::filesystem::path& path) {
  std::ifstream f(path);
  std::string line, last;
  while (std::getline(f, line)) {
    if (!f.eof()) last = line;  // a line without its newline may be partial
  }
  return last.empty() ? 0 : std::stoll(last.substr(0, last.find(',')));
}

// Every record of the newest valid checkpoint in `a` equals the one in `b`.
inline void ExpectSameNewestCheckpoint(const std::filesystem::path& a,
                                       const std::filesystem::path& b) {
  auto sa = ckpt::CheckpointStore::Open({.dir = a.string()});
  auto sb = ckpt::CheckpointStore::Open({.dir = b.string()});
  ASSERT_TRUE(sa.ok() && sb.ok());
  auto la = (*sa)->LoadNewestValid();
  auto lb = (*sb)->LoadNewestValid();
  ASSERT_TRUE(la.ok()) << la.status().ToString();
  ASSERT_TRUE(lb.ok()) << lb.status().ToString();
  EXPECT_EQ(la->info.step, lb->info.step);
  const auto& ra = la->container.records();
  const auto& rb = lb->container.records();
  ASSERT_EQ(ra.size(), rb.size());
  int model_records = 0;
  for (size_t i = 0; i < ra.size(); ++i) {
    EXPECT_EQ(ra[i].name, rb[i].name);
    EXPECT_TRUE(ra[i].data == rb[i].data) << "record " << ra[i].name << " differs";
    model_records += ra[i].name.starts_with("model/");
  }
  EXPECT_GT(model_records, 0);
  EXPECT_NE(la->container.Find("rng/cpu"), nullptr);
}

class E2eTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    std::string name = std::string(info->test_suite_name()) + "_" + info->name();
    std::replace(name.begin(), name.end(), '/', '_');
    tmp_.emplace(TempDir::Create("spot_e2e_" + name).value());
    dir_ = tmp_->path();
  }
  void TearDown() override {
    if (HasFailure()) {
      tmp_->Keep();
      std::cerr << "kept for inspection: " << dir_ << "\n";
    }
  }

  std::filesystem::path WriteJob(const std::string& name, const std::string& yaml) {
    std::filesystem::path p = dir_ / (name + ".yaml");
    std::ofstream(p) << yaml;
    return p;
  }
  std::vector<std::string> TrainArgs(const std::filesystem::path& job,
                                     const std::filesystem::path& step_log) {
    std::vector<std::string> a = {SPOT_BIN, "train", job.string(), "--plain"};
    if (!step_log.empty()) {
      a.push_back("--step-log");
      a.push_back(step_log.string());
    }
    return a;
  }
  ProcessResult Train(const std::filesystem::path& job, const std::filesystem::path& step_log,
                      const std::string& tag) {
    return RunProcess(TrainArgs(job, step_log), (dir_ / tag).string());
  }
  ProcessResult Spot(std::vector<std::string> args, const std::string& tag) {
    args.insert(args.begin(), SPOT_BIN);
    return RunProcess(args, (dir_ / tag).string());
  }

  std::optional<TempDir> tmp_;
  std::filesystem::path dir_;
};

}  // namespace spot::testing
