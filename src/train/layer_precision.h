// precision: auto. The built-in models run each of their layers through a
// LayerPrecision: under bf16 autocast a layer runs in bfloat16 as autocast
// has it, unless it was chosen to stay float32; then it runs with autocast
// off on its input cast to float32. The choice comes from a measurement:
// over a few training batches, each layer's bf16 output is compared with its
// float32 output from the same float32 input, and normalization layers plus
// every layer whose relative error exceeds a budget stay float32 (softmax and
// the loss always do: the models and LossSum compute them in float32).
//
// Not thread-safe: one forward at a time (as the models are).
#pragma once

#include <ATen/core/Tensor.h>

#include <functional>
#include <map>
#include <set>
#include <string>
#include <vector>

namespace spot::train {

enum class LayerKind {
  kCompute,        // matrix products, convolutions: bf16 unless measured too coarse
  kNormalization,  // batch and layer norms: always float32 under auto
};

struct LayerError {
  std::string name;  // as the model names the layer ("conv1", "transformer.h.0.ln_1")
  LayerKind kind = LayerKind::kCompute;
  // Largest over the probed batches of ||y_bf16 - y_fp32|| / ||y_fp32||
  // (Frobenius norms); infinity when the bf16 output is not finite.
  double error = 0;
};

class LayerPrecision {
 public:
  using Layer = std::function<at::Tensor(const at::Tensor&)>;

  // Runs `layer` (a module or a lambda) on `x` as described above; while
  // probing, runs it both ways, records the error and returns the float32 output.
  at::Tensor Run(const std::string& name, LayerKind kind, const at::Tensor& x, const Layer& layer);

  // The layers that stay float32 (sorted); replaces the previous set.
  void KeepFloat32(const std::vector<std::string>& names);
  const std::vector<std::string>& kept() const { return kept_; }

  // Between BeginProbe and EndProbe, forward passes measure instead of train.
  void BeginProbe();
  // Each layer's error in the order the forward first ran it.
  std::vector<LayerError> EndProbe();

 private:
  std::vector<std::string> kept_;
  std::set<std::string, std::less<>> kept_set_;
  bool probing_ = false;
  std::vector<LayerError> errors_;
  std::map<std::string, size_t, std::less<>> index_;
};

class Net;

// The layers that stay float32 for `errors`: normalization layers and those
// whose error exceeds `budget` (or is not finite), sorted by name.
std::vector<std::string> Float32Layers(const std::vector<LayerError>& errors, double budget);

// Measures `model`'s layers on `batches` (model inputs, on its device) in
// eval mode without gradients (no buffer, generator or weight changes), then
// returns to training mode. Empty when the model has no LayerPrecision.
std::vector<LayerError> MeasureLayerErrors(Net& model, const std::vector<at::Tensor>& batches);

// One log line per decision: "precision auto: 5 of 11 layers stay float32 ...".
std::string DescribeSelection(const std::vector<LayerError>& errors,
                              const std::vector<std::string>& fp32, double budget);

}  // namespace spot::train
