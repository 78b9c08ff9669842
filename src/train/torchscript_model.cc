#include "train/torchscript_model.h"

#include <ATen/ATen.h>
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <torch/csrc/jit/serialization/import.h>

#include <sstream>

namespace spot::train {
namespace {

class TorchScriptNet final : public Net {
 public:
  explicit TorchScriptNet(torch::jit::Module m) : module_(std::move(m)) { Mirror(module_, *this); }

  at::Tensor forward(const at::Tensor& x) override { return module_.forward({x}).toTensor(); }

  void train(bool on = true) override {
    Net::train(on);
    module_.train(on);
  }

 private:
  // The same tensors, under the same names, one nn::Module per submodule.
  static void Mirror(const torch::jit::Module& from, torch::nn::Module& to) {
    for (const auto& p : from.named_parameters(/*recurse=*/false)) {
      to.register_parameter(p.name, p.value, p.value.requires_grad());
    }
    for (const auto& b : from.named_buffers(/*recurse=*/false)) to.register_buffer(b.name, b.value);
    for (const auto& c : from.named_children()) {
      auto child = std::make_shared<torch::nn::Module>(c.name);
      Mirror(c.value, *child);
      to.register_module(c.name, child);
    }
  }

  torch::jit::Module module_;
};

std::string Shape(const at::Tensor& t) {
  std::ostringstream s;
  s << t.sizes();
  return s.str();
}

}  // namespace

Result<std::shared_ptr<Net>> LoadTorchScriptModel(const std::string& path,
                                                  const std::vector<int64_t>& sample_shape,
                                                  bool token_ids, bool regression) {
  std::vector<int64_t> batch_shape = {2};
  batch_shape.insert(batch_shape.end(), sample_shape.begin(), sample_shape.end());
  const std::string batch = fmt::format("[{}]", fmt::join(batch_shape, ", "));
  torch::jit::Module m;
  try {
    m = torch::jit::load(path, c10::Device(c10::kCPU));
  } catch (const c10::Error& e) {
    return InvalidArgumentError(fmt::format(
        "{}: not a TorchScript module (save one with torch.jit.script(model).save(path)): {}", path,
        e.what_without_backtrace()));
  }
  if (!m.find_method("forward")) {
    return InvalidArgumentError(path + ": the TorchScript module has no forward method");
  }
  auto net = std::make_shared<TorchScriptNet>(std::move(m));
  at::Tensor out;
  try {
    torch::NoGradGuard no_grad;
    net->eval();
    out = net->forward(at::zeros(batch_shape, token_ids ? at::kLong : at::kFloat));
    net->train(true);
  } catch (const c10::Error& e) {
    return InvalidArgumentError(
        fmt::format("{}: forward of a {} batch (the data set's samples) failed: {}", path, batch,
                    e.what_without_backtrace()));
  }
  const bool shape_ok = token_ids    ? out.dim() == 3 && out.size(1) == sample_shape[0]
                        : regression ? out.dim() == 1 || out.dim() == 2
                                     : out.dim() == 2 && out.size(1) >= 2;
  if (!shape_ok || out.size(0) != 2 || !out.is_floating_point()) {
    return InvalidArgumentError(
        fmt::format("{}: forward of a {} batch returned {} {}; expected {} floating-point scores",
                    path, batch, Shape(out), std::string(c10::toString(out.scalar_type())),
                    token_ids    ? fmt::format("[2, {}, vocab]", sample_shape[0])
                    : regression ? "[2] or [2, outputs]"
                                 : "[2, classes]"));
  }
  if (net->parameters().empty()) {
    return InvalidArgumentError(path + ": the TorchScript module has no parameters to train");
  }
  return std::shared_ptr<Net>(std::move(net));
}

}  // namespace spot::train
