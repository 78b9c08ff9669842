// Test support: one replica of a small job (a built-in model on synthetic
// data) stepped through StepRunner, with its state captured and restored as
// a checkpoint would. Header-only; tests only.
#pragma once

#include <ATen/ATen.h>
#include <gtest/gtest.h>
#include <torch/utils.h>

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "ckpt/container.h"
#include "train/gpt_model.h"
#include "train/model.h"
#include "train/step_runner.h"
#include "train/train_setup.h"
#include "train/train_state.h"

namespace spot::train::testing {

// `model` mlp or cnn: 64 synthetic [1, 28, 28] images of 10 classes (a
// frequency each); gpt: a
// 2-layer, width-32 model over windows of 16 tokens of a 64-token vocabulary.
inline TrainSpec ReplicaSpec(const std::string& model, const std::string& precision) {
  TrainSpec s;
  s.model = model;
  s.precision = precision;
  s.batch_size = 16;
  s.epochs = 4;
  s.seed = 5;
  s.optimizer.type = "adam";
  s.optimizer.lr = 1e-3;
  if (model == "gpt") {
    s.loss = "lm";
    s.gpt = {.layers = 2, .heads = 2, .width = 32, .context = 16, .vocab = 64};
    s.context = s.stride = 16;
  }
  return s;
}

struct Replica {
  TrainSpec spec;
  TensorSet data;
  std::shared_ptr<Net> model;
  std::unique_ptr<torch::optim::Optimizer> optimizer;
  TrainerCounters counters;
  std::optional<StepRunner> runner;

  explicit Replica(TrainSpec s) : Replica(s, DataFor(s)) {}
  // On given data.
  Replica(TrainSpec s, TensorSet d) : spec(std::move(s)), data(std::move(d)) {
    torch::manual_seed(static_cast<uint64_t>(spec.seed));
    model = BuildModel(spec, data.SampleShape()).value();
    optimizer = MakeOptimizer(spec, *model).value();
    counters.seed = spec.seed;
    counters.batch_size = spec.batch_size;
    counters.model = spec.model;
    counters.optimizer = spec.optimizer.type;
    runner.emplace(spec, data, Refs());
  }
  // gpt: a learnable token stream; otherwise 64 images, each class a frequency.
  static TensorSet DataFor(const TrainSpec& spec) {
    TensorSet data;
    if (spec.model == "gpt") {
      // Each token the previous one plus 1..3, mod vocab.
      data.tokens = at::arange(64 * 16 + 1, at::kLong).remainder(3).add(1).cumsum(0).remainder(64);
      data.context = data.stride = 16;
      return data;
    }
    data.labels = at::arange(64, at::kLong).remainder(10);
    const at::Tensor freq = data.labels.to(at::kFloat).add(1).mul(0.01).view({64, 1, 1, 1});
    const at::Tensor phase = at::arange(64, at::kFloat).mul(0.1).view({64, 1, 1, 1});
    data.images = at::arange(784, at::kFloat).view({1, 1, 28, 28}).mul(freq).add(phase).sin();
    return data;
  }
  TrainRefs Refs() {
    return {model.get(), optimizer.get(), spec.optimizer.type, &counters, data.SampleShape()};
  }
  StepOutcome Step() {
    LocalSync sync;
    Slice batch = runner->NextBatch();
    auto out = runner->Run(batch, batch, sync);
    EXPECT_TRUE(out.ok()) << out.status().message();
    if (out->committed) runner->Advance(batch);
    return *out;
  }
  std::vector<double> Steps(int n) {
    std::vector<double> losses;
    for (int i = 0; i < n; ++i) losses.push_back(Step().loss);
    return losses;
  }
  ckpt::Container Capture() {
    ckpt::Container c;
    EXPECT_TRUE(CaptureTrainState(*model, *optimizer, spec.optimizer.type, counters, &c).ok());
    return c;
  }
  void Restore(const ckpt::Container& c) {
    auto r = RestoreTrainState(c, *model, *optimizer, spec.optimizer.type);
    ASSERT_TRUE(r.ok()) << r.status().ToString();
    counters = *r;
    runner->Reset();
  }
  // The first parameter's values.
  std::vector<float> Weights() {
    at::Tensor w = model->parameters()[0].reshape({-1}).cpu();
    return {w.data_ptr<float>(), w.data_ptr<float>() + w.numel()};
  }
  // Every parameter and buffer, flattened to float32 on the host.
  at::Tensor State() {
    std::vector<at::Tensor> all;
    for (const auto& p : model->parameters()) all.push_back(p.detach().flatten().cpu());
    for (const auto& b : model->buffers()) all.push_back(b.flatten().to(at::kFloat).cpu());
    return at::cat(all);
  }
};

}  // namespace spot::train::testing
