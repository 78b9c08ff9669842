// The training state the `ckpt` workload checkpoints (ckpt_workload.cc makes
// them: MakeSubject), and how a measurement checks that a restore brought it
// back. Internal to spot_bench. Not thread-safe: one measurement at a time
// trains, captures and restores a Subject.
#pragma once

#include <fmt/format.h>
#include <torch/optim/adam.h>
#include <torch/utils.h>

#include <chrono>
#include <cstdint>
#include <limits>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "ckpt/container.h"
#include "ckpt/torch_adapter.h"
#include "core/status.h"
#include "train/model.h"
#include "train/step_runner.h"
#include "train/train_spec.h"
#include "train/train_state.h"

namespace spot::bench {

using Clock = std::chrono::steady_clock;

// Seconds since t0.
inline double Since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

// A model, its Adam optimizer and the trainer's counters, trained by the
// trainers' own step runner (train/step_runner.h) on the whole batch.
struct Subject {
  std::string key;    // cnn | mlp50m
  std::string title;  // for the report
  train::TrainSpec spec;
  std::shared_ptr<train::Net> model;
  std::unique_ptr<torch::optim::Adam> optimizer;
  train::TrainerCounters counters;
  std::optional<train::StepRunner> runner;
  train::LocalSync sync;
  int64_t params = 0;
  double loss = 0;

  void Step() {
    const train::Slice batch = runner->NextBatch();
    auto out = runner->Run(batch, batch, sync);
    loss = out.ok() ? out->loss : std::numeric_limits<double>::quiet_NaN();
    runner->Advance(batch);
  }

  // What SaveCheckpoint in trainer.cc puts in a snapshot buffer.
  Status Capture(ckpt::Container* c) {
    c->Recycle();
    return train::CaptureTrainState(*model, *optimizer, "adam", counters, c);
  }

  Status Restore(const ckpt::Container& c) {
    SPOT_ASSIGN_OR_RETURN(train::TrainerCounters restored,
                          train::RestoreTrainState(c, *model, *optimizer, "adam"));
    counters = restored;
    runner->Reset();
    return Status::Ok();
  }

  // Zeroes parameters and buffers and drops the Adam state (untimed), so a
  // restore must really bring all of them back.
  void Scramble() {
    torch::NoGradGuard no_grad;
    for (at::Tensor& p : model->parameters()) p.zero_();
    for (at::Tensor& b : model->buffers()) b.zero_();
    optimizer->state().clear();
    counters.step = -1;
  }

  // The tensors a snapshot copies: parameters, buffers, Adam's moments (in
  // that order; the few bytes of step counts, RNG state and counters left out).
  std::vector<at::Tensor> Tensors() {
    std::vector<at::Tensor> out;
    for (const at::Tensor& p : model->parameters()) out.push_back(p.detach());
    for (const at::Tensor& b : model->buffers()) out.push_back(b);
    auto& state = optimizer->state();
    for (const at::Tensor& p : model->parameters()) {
      auto it = state.find(c10::guts::to_string(p.unsafeGetTensorImpl()));
      if (it == state.end()) continue;
      auto& s = static_cast<torch::optim::AdamParamState&>(*it->second);
      out.push_back(s.exp_avg());
      out.push_back(s.exp_avg_sq());
    }
    return out;
  }

  // Where a restore into the model decodes its parameters and buffers: into
  // themselves, under the names CaptureTrainState gives them.
  void PlaceIntoModel(ckpt::TensorPlacement* into) const {
    for (const auto& p : model->named_parameters()) into->Add("model/" + p.key(), p.value());
    for (const auto& b : model->named_buffers()) into->Add("model/" + b.key(), b.value());
  }
};

// Per-record checksums of a state (captured into `scratch`).
using Fingerprint = std::vector<std::pair<std::string, uint64_t>>;

inline Result<Fingerprint> TakeFingerprint(Subject& s, ckpt::Container* scratch) {
  SPOT_RETURN_IF_ERROR(s.Capture(scratch));
  Fingerprint f;
  for (const ckpt::Record& r : scratch->records()) f.emplace_back(r.name, ckpt::Checksum(r.data));
  return f;
}

// InternalError naming the first record of `want` that `got` lacks or holds
// differently; with `tensors_only`, only model/ and optim/ records count.
inline Status CheckSame(const Fingerprint& want, const Fingerprint& got, std::string_view what,
                        bool tensors_only = false) {
  std::map<std::string_view, uint64_t> have;
  for (const auto& [name, sum] : got) have.emplace(name, sum);
  for (const auto& [name, sum] : want) {
    if (tensors_only && !name.starts_with("model/") && !name.starts_with("optim/")) continue;
    auto it = have.find(name);
    if (it == have.end()) return InternalError(fmt::format("{}: '{}' is missing", what, name));
    if (it->second != sum) {
      return InternalError(fmt::format("{}: '{}' differs from what was saved", what, name));
    }
  }
  return Status::Ok();
}

}  // namespace spot::bench
