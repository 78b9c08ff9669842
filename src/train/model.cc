#include "train/model.h"

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <torch/cuda.h>
#include <torch/nn/functional/pooling.h>
#include <torch/nn/modules/batchnorm.h>
#include <torch/nn/modules/conv.h>
#include <torch/nn/modules/dropout.h>
#include <torch/nn/modules/linear.h>

#include <filesystem>

#include "train/gpt_model.h"
#include "train/torchscript_model.h"

namespace spot::train {
namespace {

namespace nn = torch::nn;

// Convolutions run faster in the channels-last layout (NHWC) on the CPU:
// oneDNN then skips converting activations at every layer (measured +25-30%
// samples/s for the CNN at batch 64 and 256). Parameters keep their shapes and
// values; only their strides change.
void UseChannelsLast(nn::Module& m) {
  at::NoGradGuard no_grad;
  for (auto& p : m.parameters()) {
    if (p.dim() == 4) p.set_data(p.contiguous(at::MemoryFormat::ChannelsLast));
  }
}

// A channels-last view of a batch of images (a copy only when channels > 1).
at::Tensor ChannelsLastInput(const at::Tensor& x) {
  if (x.size(1) == 1 && x.is_contiguous()) {
    // With one channel the NHWC strides address the same bytes as NCHW.
    return x.as_strided(x.sizes(), {x.size(2) * x.size(3), 1, x.size(3), 1});
  }
  return x.contiguous(at::MemoryFormat::ChannelsLast);
}

class Cnn final : public Net {
 public:
  Cnn()
      : conv1_(register_module("conv1",
                               nn::Conv2d(nn::Conv2dOptions(1, 32, 3).padding(1).bias(false)))),
        bn1_(register_module("bn1", nn::BatchNorm2d(32))),
        conv2_(register_module("conv2",
                               nn::Conv2d(nn::Conv2dOptions(32, 64, 3).padding(1).bias(false)))),
        bn2_(register_module("bn2", nn::BatchNorm2d(64))),
        fc1_(register_module("fc1", nn::Linear(64 * 7 * 7, 128))),
        dropout_(register_module("dropout", nn::Dropout(0.25))),
        fc2_(register_module("fc2", nn::Linear(128, 10))) {
    UseChannelsLast(*this);
  }

  at::Tensor forward(const at::Tensor& x) override {
    using enum LayerKind;
    at::Tensor h = lp_.Run("conv1", kCompute, ChannelsLastInput(x), conv1_);
    h = lp_.Run("bn1", kNormalization, h, bn1_).relu_();
    h = lp_.Run("conv2", kCompute, at::max_pool2d(h, {2, 2}), conv2_);
    h = lp_.Run("bn2", kNormalization, h, bn2_).relu_();
    h = at::max_pool2d(h, {2, 2}).flatten(1);
    h = dropout_(lp_.Run("fc1", kCompute, h, fc1_).relu_());
    return lp_.Run("fc2", kCompute, h, fc2_);
  }
  LayerPrecision* layer_precision() override { return &lp_; }

 private:
  LayerPrecision lp_;
  nn::Conv2d conv1_;
  nn::BatchNorm2d bn1_;
  nn::Conv2d conv2_;
  nn::BatchNorm2d bn2_;
  nn::Linear fc1_;
  nn::Dropout dropout_;
  nn::Linear fc2_;
};

class Mlp final : public Net {
 public:
  Mlp()
      : fc1_(register_module("fc1", nn::Linear(28 * 28, 256))),
        fc2_(register_module("fc2", nn::Linear(256, 128))),
        dropout_(register_module("dropout", nn::Dropout(0.2))),
        fc3_(register_module("fc3", nn::Linear(128, 10))) {}

  at::Tensor forward(const at::Tensor& x) override {
    using enum LayerKind;
    at::Tensor h = lp_.Run("fc1", kCompute, x.flatten(1), fc1_);
    h = dropout_(lp_.Run("fc2", kCompute, h.relu_(), fc2_).relu_());
    return lp_.Run("fc3", kCompute, h, fc3_);
  }
  LayerPrecision* layer_precision() override { return &lp_; }

 private:
  LayerPrecision lp_;
  nn::Linear fc1_;
  nn::Linear fc2_;
  nn::Dropout dropout_;
  nn::Linear fc3_;
};

}  // namespace

std::shared_ptr<Net> MakeModel(const std::string& name) {
  if (name == "cnn") return std::make_shared<Cnn>();
  if (name == "mlp") return std::make_shared<Mlp>();
  return nullptr;
}

Status CheckDevice(const TrainSpec& spec) {
  if (spec.device != "cuda" || torch::cuda::is_available()) return Status::Ok();
  return InvalidArgumentError(
      fmt::format("{}: device: cuda: this LibTorch has no CUDA (torch::cuda::is_available() is "
                  "false: built without CUDA, or no GPU visible); use device: cpu, or build "
                  "against a CUDA LibTorch (scripts/gpu-check.sh)",
                  spec.source));
}

namespace {

Result<std::shared_ptr<Net>> BuildOnCpu(const TrainSpec& spec,
                                        const std::vector<int64_t>& sample_shape) {
  if (spec.model == "torchscript") {
    return LoadTorchScriptModel(spec.model_file, sample_shape, spec.loss == "lm",
                                spec.loss == "mse");
  }
  if (spec.model == "gpt") {
    if (sample_shape.size() != 1 || sample_shape[0] > spec.gpt.context) {
      return InvalidArgumentError(fmt::format(
          "{}: model gpt reads windows of at most {} token ids; the data set's samples are [{}]",
          spec.source, spec.gpt.context, fmt::join(sample_shape, ", ")));
    }
    return MakeGpt(spec.gpt);
  }
  if (sample_shape != std::vector<int64_t>{1, 28, 28}) {
    return InvalidArgumentError(fmt::format(
        "{}: model {} takes [1, 28, 28] images; the data set's samples are [{}]: train your own "
        "module with model: {{torchscript: FILE}}",
        spec.source, spec.model, fmt::join(sample_shape, ", ")));
  }
  std::shared_ptr<Net> net = MakeModel(spec.model);
  if (!net) return InvalidArgumentError("unknown model " + spec.model);
  return net;
}

}  // namespace

Result<std::shared_ptr<Net>> BuildModel(const TrainSpec& spec,
                                        const std::vector<int64_t>& sample_shape) {
  SPOT_RETURN_IF_ERROR(CheckDevice(spec));
  SPOT_ASSIGN_OR_RETURN(std::shared_ptr<Net> net, BuildOnCpu(spec, sample_shape));
  // Built (and initialized from the CPU generator) on the host, then moved:
  // the same initial weights on every device.
  if (spec.device != "cpu") net->to(at::Device(spec.device));
  return net;
}

std::string ModelName(const TrainSpec& spec) {
  if (spec.model != "torchscript") return spec.model;
  return "torchscript:" + std::filesystem::path(spec.model_file).filename().string();
}

}  // namespace spot::train
