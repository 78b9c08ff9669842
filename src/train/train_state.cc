#include "train/train_state.h"

#include <ATen/CPUGeneratorImpl.h>
#include <ATen/Context.h>
#include <ATen/core/Generator.h>
#include <fmt/format.h>
#include <torch/optim/adam.h>
#include <torch/optim/sgd.h>

#include <cstring>
#include <mutex>
#include <nlohmann/json.hpp>
#include <optional>

#include "ckpt/torch_adapter.h"

namespace spot::train {
namespace {

using ckpt::GetTensor;
using ckpt::GetTensorInto;
using ckpt::PutTensor;

std::string StateKey(const at::Tensor& p) { return c10::guts::to_string(p.unsafeGetTensorImpl()); }

// Adds the optimizer's state: tensors through `cap`, the step counts to `out`.
Status CaptureOptimizer(Net& model, torch::optim::Optimizer& opt, const std::string& type,
                        ckpt::Container* out, ckpt::TensorCapture* cap) {
  auto& state = opt.state();
  for (const auto& item : model.named_parameters()) {
    auto it = state.find(StateKey(item.value()));
    if (it == state.end()) continue;  // no step taken yet for this parameter
    std::string prefix = "optim/" + item.key() + "/";
    if (type == "sgd") {
      auto& s = static_cast<torch::optim::SGDParamState&>(*it->second);
      if (s.momentum_buffer().defined()) {
        SPOT_RETURN_IF_ERROR(cap->Put(prefix + "momentum_buffer", s.momentum_buffer()));
      }
    } else {
      auto& s = static_cast<torch::optim::AdamParamState&>(*it->second);
      // A 0-d i64 record, as a scalar tensor would give, without making one.
      const int64_t step = s.step();
      std::span<char> dst = out->AddUninitialized(prefix + "step", ckpt::DType::kI64, {});
      std::memcpy(dst.data(), &step, sizeof(step));
      SPOT_RETURN_IF_ERROR(cap->Put(prefix + "exp_avg", s.exp_avg()));
      SPOT_RETURN_IF_ERROR(cap->Put(prefix + "exp_avg_sq", s.exp_avg_sq()));
      if (s.max_exp_avg_sq().defined()) {
        SPOT_RETURN_IF_ERROR(cap->Put(prefix + "max_exp_avg_sq", s.max_exp_avg_sq()));
      }
    }
  }
  return Status::Ok();
}

Status RestoreOptimizer(const ckpt::Container& in, Net& model, torch::optim::Optimizer& opt,
                        const std::string& type) {
  auto& state = opt.state();
  state.clear();
  for (const auto& item : model.named_parameters()) {
    std::string prefix = "optim/" + item.key() + "/";
    if (type == "sgd") {
      if (in.Find(prefix + "momentum_buffer") == nullptr) continue;
      auto s = std::make_unique<torch::optim::SGDParamState>();
      SPOT_ASSIGN_OR_RETURN(at::Tensor buf, GetTensor(in, prefix + "momentum_buffer"));
      s->momentum_buffer(buf.to(item.value().device()));
      state[StateKey(item.value())] = std::move(s);
    } else {
      if (in.Find(prefix + "step") == nullptr) continue;
      auto s = std::make_unique<torch::optim::AdamParamState>();
      SPOT_ASSIGN_OR_RETURN(at::Tensor step, GetTensor(in, prefix + "step"));
      s->step(step.item<int64_t>());
      SPOT_ASSIGN_OR_RETURN(at::Tensor m, GetTensor(in, prefix + "exp_avg"));
      SPOT_ASSIGN_OR_RETURN(at::Tensor v, GetTensor(in, prefix + "exp_avg_sq"));
      s->exp_avg(m.to(item.value().device()));
      s->exp_avg_sq(v.to(item.value().device()));
      if (in.Find(prefix + "max_exp_avg_sq") != nullptr) {
        SPOT_ASSIGN_OR_RETURN(at::Tensor mx, GetTensor(in, prefix + "max_exp_avg_sq"));
        s->max_exp_avg_sq(mx.to(item.value().device()));
      }
      state[StateKey(item.value())] = std::move(s);
    }
  }
  return Status::Ok();
}

// The generator of the GPU the model is on; none (undefined) for a CPU model.
// Reached through ATen's CUDA hooks: no CUDA headers needed.
std::optional<at::Generator> ModelGpuGenerator(Net& model) {
  for (const at::Tensor& p : model.parameters()) {
    if (!p.device().is_cuda()) return std::nullopt;
    return at::globalContext().defaultGenerator(p.device());
  }
  return std::nullopt;
}

}  // namespace

std::string TrainerCounters::ToJson() const {
  nlohmann::json j = {{"step", step},
                      {"epoch", epoch},
                      {"index_in_epoch", index_in_epoch},
                      {"seed", seed},
                      {"batch_size", batch_size},
                      {"model", model},
                      {"optimizer", optimizer},
                      {"threads", threads},
                      {"blas", blas},
                      {"last_test_accuracy", last_test_accuracy},
                      {"skipped_batches", skipped_batches},
                      {"lr_scale", lr_scale},
                      {"rollbacks", rollbacks},
                      {"loss_ema", loss_ema},
                      {"loss_ema_steps", loss_ema_steps},
                      {"loss_scale", loss_scale},
                      {"loss_scale_growth_tracker", loss_scale_growth_tracker},
                      {"precision_chosen", precision_chosen},
                      {"fp32_layers", fp32_layers}};
  return j.dump();
}

Result<TrainerCounters> TrainerCounters::FromJson(std::string_view text) {
  TrainerCounters c;
  try {
    nlohmann::json j = nlohmann::json::parse(text);
    c.step = j.at("step");
    c.epoch = j.at("epoch");
    c.index_in_epoch = j.at("index_in_epoch");
    c.seed = j.at("seed");
    c.batch_size = j.at("batch_size");
    c.model = j.at("model");
    c.optimizer = j.at("optimizer");
    c.threads = j.at("threads");
    c.blas = j.at("blas");
    c.last_test_accuracy = j.at("last_test_accuracy");
    c.skipped_batches = j.value("skipped_batches", std::vector<int64_t>{});
    c.lr_scale = j.value("lr_scale", 1.0);
    c.rollbacks = j.value("rollbacks", int64_t{0});
    c.loss_ema = j.value("loss_ema", 0.0);
    c.loss_ema_steps = j.value("loss_ema_steps", int64_t{0});
    c.loss_scale = j.value("loss_scale", 0.0);
    c.loss_scale_growth_tracker = j.value("loss_scale_growth_tracker", int64_t{0});
    c.precision_chosen = j.value("precision_chosen", false);
    c.fp32_layers = j.value("fp32_layers", std::vector<std::string>{});
  } catch (const std::exception& e) {
    return DataLossError(std::string("trainer/state is malformed: ") + e.what());
  }
  return c;
}

Status CaptureTrainState(Net& model, torch::optim::Optimizer& optimizer,
                         const std::string& optimizer_type, const TrainerCounters& counters,
                         ckpt::Container* out) {
  ckpt::TensorCapture cap(out);
  for (const auto& p : model.named_parameters()) {
    SPOT_RETURN_IF_ERROR(cap.Put("model/" + p.key(), p.value()));
  }
  for (const auto& b : model.named_buffers()) {
    SPOT_RETURN_IF_ERROR(cap.Put("model/" + b.key(), b.value()));
  }
  SPOT_RETURN_IF_ERROR(CaptureOptimizer(model, optimizer, optimizer_type, out, &cap));
  {
    // A temporary tensor: copied now, not deferred.
    at::Generator gen = at::detail::getDefaultCPUGenerator();
    std::lock_guard<std::mutex> lock(gen.mutex());
    SPOT_RETURN_IF_ERROR(PutTensor(out, "rng/cpu", gen.get_state()));
  }
  if (std::optional<at::Generator> gpu = ModelGpuGenerator(model)) {
    std::lock_guard<std::mutex> lock(gpu->mutex());
    SPOT_RETURN_IF_ERROR(PutTensor(out, "rng/cuda", gpu->get_state()));
  }
  out->AddBytes("trainer/state", counters.ToJson());
  cap.Finish();
  return Status::Ok();
}

Result<TrainerCounters> RestoreTrainState(const ckpt::Container& in, Net& model,
                                          torch::optim::Optimizer& optimizer,
                                          const std::string& optimizer_type) {
  const ckpt::Record* st = in.Find("trainer/state");
  if (st == nullptr) return FailedPreconditionError("checkpoint has no trainer/state");
  SPOT_ASSIGN_OR_RETURN(TrainerCounters counters, TrainerCounters::FromJson(st->data));
  if (counters.optimizer != optimizer_type) {
    return FailedPreconditionError(
        fmt::format("checkpoint was made with optimizer {}, the job "
                    "uses {}",
                    counters.optimizer, optimizer_type));
  }
  for (const auto& p : model.named_parameters()) {
    SPOT_RETURN_IF_ERROR(GetTensorInto(in, "model/" + p.key(), p.value()));
  }
  for (const auto& b : model.named_buffers()) {
    SPOT_RETURN_IF_ERROR(GetTensorInto(in, "model/" + b.key(), b.value()));
  }
  SPOT_RETURN_IF_ERROR(RestoreOptimizer(in, model, optimizer, optimizer_type));
  SPOT_ASSIGN_OR_RETURN(at::Tensor rng, GetTensor(in, "rng/cpu"));
  try {
    at::Generator gen = at::detail::getDefaultCPUGenerator();
    std::lock_guard<std::mutex> lock(gen.mutex());
    gen.set_state(rng);
    std::optional<at::Generator> gpu = ModelGpuGenerator(model);
    if (gpu && in.Find("rng/cuda") != nullptr) {
      SPOT_ASSIGN_OR_RETURN(at::Tensor gpu_rng, GetTensor(in, "rng/cuda"));
      std::lock_guard<std::mutex> gpu_lock(gpu->mutex());
      gpu->set_state(gpu_rng);
    }
  } catch (const c10::Error& e) {
    return FailedPreconditionError(std::string("restoring the random generators: ") +
                                   e.what_without_backtrace());
  }
  return counters;
}

}  // namespace spot::train
