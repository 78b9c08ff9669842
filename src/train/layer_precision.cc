#include "train/layer_precision.h"

#include <ATen/ATen.h>
#include <ATen/autocast_mode.h>
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <limits>

#include "train/model.h"

namespace spot::train {
namespace {

// CPU autocast on (bf16) or off for its scope, restored on exit.
class CpuAutocast {
 public:
  explicit CpuAutocast(bool on)
      : was_on_(at::autocast::is_cpu_enabled()), dtype_(at::autocast::get_autocast_cpu_dtype()) {
    at::autocast::set_autocast_cpu_dtype(at::kBFloat16);
    at::autocast::set_cpu_enabled(on);
  }
  ~CpuAutocast() {
    at::autocast::set_cpu_enabled(was_on_);
    at::autocast::set_autocast_cpu_dtype(dtype_);
  }
  CpuAutocast(const CpuAutocast&) = delete;
  CpuAutocast& operator=(const CpuAutocast&) = delete;

 private:
  bool was_on_;
  at::ScalarType dtype_;
};

double RelativeError(const at::Tensor& low, const at::Tensor& ref) {
  const double diff = (low.to(at::kFloat) - ref).norm().item<double>();
  const double norm = ref.norm().item<double>();
  if (!std::isfinite(diff)) return std::numeric_limits<double>::infinity();
  return norm > 0 ? diff / norm : (diff > 0 ? std::numeric_limits<double>::infinity() : 0.0);
}

}  // namespace

at::Tensor LayerPrecision::Run(const std::string& name, LayerKind kind, const at::Tensor& x,
                               const Layer& layer) {
  if (probing_) {
    const at::Tensor x32 = x.is_floating_point() ? x.to(at::kFloat) : x;
    at::Tensor ref, low;
    {
      CpuAutocast off(false);
      ref = layer(x32);
    }
    {
      CpuAutocast on(true);
      low = layer(x32);
    }
    auto [it, fresh] = index_.try_emplace(name, errors_.size());
    if (fresh) errors_.push_back({.name = name, .kind = kind});
    LayerError& e = errors_[it->second];
    e.error = std::max(e.error, RelativeError(low, ref));
    return ref;
  }
  if (kept_set_.empty() || !at::autocast::is_cpu_enabled() || !kept_set_.count(name)) {
    return layer(x);
  }
  CpuAutocast off(false);
  return layer(x.is_floating_point() ? x.to(at::kFloat) : x);
}

void LayerPrecision::KeepFloat32(const std::vector<std::string>& names) {
  kept_ = names;
  std::sort(kept_.begin(), kept_.end());
  kept_set_ = {kept_.begin(), kept_.end()};
}

void LayerPrecision::BeginProbe() {
  probing_ = true;
  errors_.clear();
  index_.clear();
}

std::vector<LayerError> LayerPrecision::EndProbe() {
  probing_ = false;
  at::autocast::clear_cache();  // the bf16 copies of the weights the probe made
  index_.clear();
  return std::move(errors_);
}

std::vector<std::string> Float32Layers(const std::vector<LayerError>& errors, double budget) {
  std::vector<std::string> out;
  for (const LayerError& e : errors) {
    // !(error <= budget): a nan error counts as over budget too.
    if (e.kind == LayerKind::kNormalization || !(e.error <= budget)) out.push_back(e.name);
  }
  std::sort(out.begin(), out.end());
  return out;
}

std::vector<LayerError> MeasureLayerErrors(Net& model, const std::vector<at::Tensor>& batches) {
  LayerPrecision* lp = model.layer_precision();
  if (lp == nullptr) return {};
  at::NoGradGuard no_grad;
  const bool was_training = model.is_training();
  model.eval();
  lp->BeginProbe();
  try {
    for (const at::Tensor& x : batches) model.forward(x);
  } catch (...) {
    lp->EndProbe();
    model.train(was_training);
    throw;
  }
  std::vector<LayerError> errors = lp->EndProbe();
  model.train(was_training);
  return errors;
}

std::string DescribeSelection(const std::vector<LayerError>& errors,
                              const std::vector<std::string>& fp32, double budget) {
  std::string kept, low;
  for (const LayerError& e : errors) {
    const bool f32 = std::binary_search(fp32.begin(), fp32.end(), e.name);
    std::string& to = f32 ? kept : low;
    to += fmt::format("{}{} {:.2e}", to.empty() ? "" : ", ", e.name, e.error);
    if (f32) to += e.kind == LayerKind::kNormalization ? " (normalization)" : " (over budget)";
  }
  return fmt::format(
      "precision auto: {} of {} layers stay float32 (relative error of bf16 output, budget "
      "{:g}): {}; bf16: {}; softmax and the loss always float32",
      fp32.size(), errors.size(), budget, kept.empty() ? "none" : kept, low.empty() ? "none" : low);
}

}  // namespace spot::train
