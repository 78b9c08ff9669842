#include "train/pretrained.h"

#include <ATen/ATen.h>
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <spdlog/spdlog.h>
#include <torch/utils.h>

#include <map>
#include <sstream>

#include "train/safetensors_file.h"
#include "train/train_setup.h"

namespace spot::train {
namespace {

bool StartsWithAny(const std::string& name, const std::vector<std::string>& prefixes) {
  for (const std::string& p : prefixes) {
    if (name.rfind(p, 0) == 0) return true;
  }
  return false;
}

std::string Renamed(const std::string& name, const InitSpec& init) {
  for (const auto& [from, to] : init.rename) {
    if (name.rfind(from, 0) == 0) return to + name.substr(from.size());
  }
  return name;
}

std::string List(const std::vector<std::string>& names) {
  constexpr size_t kShown = 8;
  std::vector<std::string> head(names.begin(), names.begin() + std::min(names.size(), kShown));
  return fmt::format(
      "{}{}", fmt::join(head, ", "),
      names.size() > kShown ? fmt::format(" and {} more", names.size() - kShown) : "");
}

}  // namespace

Result<InitReport> LoadPretrained(const InitSpec& init, Net& model) {
  SPOT_ASSIGN_OR_RETURN(auto file, ReadSafetensors(init.weights, {}));
  std::map<std::string, std::string> by_model_name;  // renamed -> the file's name
  for (const auto& [name, array] : file) by_model_name[Renamed(name, init)] = name;
  std::vector<std::pair<at::Tensor, const HostArray*>> copies;
  std::map<std::string, bool> used;
  InitReport r;
  auto visit = [&](const std::string& name, const at::Tensor& t) -> Status {
    auto it = by_model_name.find(name);
    if (StartsWithAny(name, init.skip)) {
      r.skipped.push_back(name);
      if (it != by_model_name.end()) used[it->second] = true;
      return Status::Ok();
    }
    if (it == by_model_name.end()) {
      r.missing.push_back(name);
      return Status::Ok();
    }
    const HostArray& a = file.at(it->second);
    used[it->second] = true;
    if (a.shape != t.sizes().vec()) {
      std::ostringstream want;
      want << t.sizes();
      return InvalidArgumentError(fmt::format(
          "{}: {} is [{}], the model's {} is {}: leave it out with init.skip (a new head)",
          init.weights, it->second, fmt::join(a.shape, ", "), name, want.str()));
    }
    if (TorchTypeOf(a.dtype) == at::ScalarType::Undefined ||
        (t.is_floating_point() != (a.dtype == "f4" || a.dtype == "f8"))) {
      return InvalidArgumentError(
          fmt::format("{}: {} has dtype {}, which the model's {} ({}) cannot take", init.weights,
                      it->second, a.dtype, name, std::string(c10::toString(t.scalar_type()))));
    }
    copies.emplace_back(t, &a);
    return Status::Ok();
  };
  for (const auto& p : model.named_parameters()) SPOT_RETURN_IF_ERROR(visit(p.key(), p.value()));
  for (const auto& b : model.named_buffers()) SPOT_RETURN_IF_ERROR(visit(b.key(), b.value()));
  for (const auto& [name, array] : file) {
    if (!used.count(name)) r.unused.push_back(name);
  }
  if (init.strict && (!r.missing.empty() || !r.unused.empty())) {
    return InvalidArgumentError(
        fmt::format("{}: does not fit the model (init.strict): {}{}{}", init.weights,
                    r.missing.empty() ? "" : "not in the file: " + List(r.missing),
                    !r.missing.empty() && !r.unused.empty() ? "; " : "",
                    r.unused.empty() ? "" : "unused: " + List(r.unused)));
  }
  torch::NoGradGuard no_grad;
  for (auto& [t, a] : copies) {
    t.copy_(TensorFromHost(*a));
    ++r.loaded;
  }
  return r;
}

Status StartFromPretrained(const TrainSpec& spec, Net& model) {
  if (spec.init.weights.empty()) return Status::Ok();
  auto r = LoadPretrained(spec.init, model);
  if (!r.ok()) return r.status().WithContext(spec.source + ": init.weights");
  spdlog::info("init: {} tensors from {}", r->loaded, spec.init.weights);
  if (!r->skipped.empty()) spdlog::info("init: left as initialized: {}", List(r->skipped));
  if (!r->missing.empty()) spdlog::warn("init: not in the file: {}", List(r->missing));
  if (!r->unused.empty()) spdlog::warn("init: unused tensors of the file: {}", List(r->unused));
  return Status::Ok();
}

}  // namespace spot::train
