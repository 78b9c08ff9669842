// The models `spot train` knows, by name. Module and parameter names match the
// Python definitions in python/spot_models.py, so a state dict written here
// loads there unchanged.
#pragma once

#include <torch/nn/module.h>

#include <memory>
#include <string>
#include <vector>

#include "core/status.h"
#include "train/layer_precision.h"
#include "train/train_spec.h"

namespace spot::train {

class Net : public torch::nn::Module {
 public:
  // x: [batch, 1, 28, 28] normalized images. Returns [batch, 10] logits.
  virtual at::Tensor forward(const at::Tensor& x) = 0;
  // Its layers' precision under precision: auto; nullptr for a model whose
  // layers cannot be reached one by one (TorchScript).
  virtual LayerPrecision* layer_precision() { return nullptr; }
};

// "cnn": two 3x3 conv + batch-norm + max-pool blocks (32, 64 channels), then
//        3136 -> 128 -> 10 with dropout 0.25 (421,738 parameters).
// "mlp": 784 -> 256 -> 128 -> 10 with ReLU and dropout 0.2 (235,146 parameters).
// Initial weights come from LibTorch's default generator: seed it first.
// Returns nullptr for an unknown name.
std::shared_ptr<Net> MakeModel(const std::string& name);

// InvalidArgument naming spec.device when it is cuda and this LibTorch has
// no CUDA or sees no GPU (torch::cuda::is_available() is false).
Status CheckDevice(const TrainSpec& spec);

// The spec's model for samples of `sample_shape` (the data set's, without the
// batch dimension): a built-in by name (they take [1, 28, 28] images), or its
// TorchScript file (torchscript_model.h), on spec.device. InvalidArgument
// naming the model, the file, or the device (CheckDevice).
Result<std::shared_ptr<Net>> BuildModel(const TrainSpec& spec,
                                        const std::vector<int64_t>& sample_shape);
// What checkpoints record as the model ("cnn", "torchscript:resnet.pt"): a
// resume refuses a checkpoint of another one.
std::string ModelName(const TrainSpec& spec);

}  // namespace spot::train
