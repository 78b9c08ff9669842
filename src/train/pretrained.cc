#include "train/pretrained.h"

#include <ATen/ATen.h>
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <spdlog/spdlog.h>
#include <torch/serialize.h>
#include <torch/utils.h>

#include <map>
#include <sstream>

#include "core/file_io.h"
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

using TensorMap = std::map<std::string, at::Tensor>;

// A state dict from torch.save (a zip archive holding a pickle): {name:
// tensor}, or a training checkpoint holding one under "model", "state_dict"
// or "model_state_dict" (nanoGPT's, Lightning's, the PyTorch tutorials').
Result<TensorMap> ReadStateDict(const std::string& path, std::vector<char> bytes) {
  c10::IValue v;
  try {
    v = torch::pickle_load(bytes);
  } catch (const c10::Error& e) {
    // LibTorch's unpickler turns collections.OrderedDict into None (it
    // expects one only in a tensor's unused backward hooks).
    const std::string_view raw(bytes.data(), bytes.size());
    if (raw.find("collections\nOrderedDict") != std::string_view::npos) {
      return InvalidArgumentError(
          path +
          ": an OrderedDict (model.state_dict() as it is), which LibTorch 1.13 cannot "
          "read: save a plain dict, torch.save(dict(model.state_dict()), path), or "
          "safetensors");
    }
    return InvalidArgumentError(
        fmt::format("{}: not a state dict torch.load reads: {}", path, e.what_without_backtrace()));
  }
  for (int depth = 0; depth < 2 && v.isGenericDict(); ++depth) {
    TensorMap out;
    c10::IValue nested;
    for (const auto& kv : v.toGenericDict()) {
      if (!kv.key().isString()) continue;
      const std::string key = kv.key().toStringRef();
      if (kv.value().isTensor()) out[key] = kv.value().toTensor();
      if ((key == "model" || key == "state_dict" || key == "model_state_dict") &&
          kv.value().isGenericDict()) {
        nested = kv.value();
      }
    }
    if (!out.empty()) return out;
    if (nested.isNone()) break;
    v = nested;
  }
  return InvalidArgumentError(
      path +
      ": holds no tensors by name (save model.state_dict(), or a dict with it under "
      "\"model\" or \"state_dict\")");
}

// The tensors of a safetensors file, or of a torch.save state dict.
Result<TensorMap> ReadWeights(const std::string& path) {
  char magic[4] = {};
  const bool zip = ReadFileRange(path, 0, magic).ok() && std::string_view(magic, 4) == "PK\x03\x04";
  if (zip) {
    SPOT_ASSIGN_OR_RETURN(std::string bytes, ReadFile(path));
    return ReadStateDict(path, std::vector<char>(bytes.begin(), bytes.end()));
  }
  SPOT_ASSIGN_OR_RETURN(auto arrays, ReadSafetensors(path, {}));
  TensorMap out;
  for (const auto& [name, a] : arrays) {
    if (TorchTypeOf(a.dtype) == at::ScalarType::Undefined) {
      return InvalidArgumentError(
          fmt::format("{}: {} has dtype {}, which no model tensor takes", path, name, a.dtype));
    }
    out[name] = TensorFromHost(a);
  }
  return out;
}

}  // namespace

Result<InitReport> LoadPretrained(const InitSpec& init, Net& model) {
  SPOT_ASSIGN_OR_RETURN(TensorMap file, ReadWeights(init.weights));
  std::map<std::string, std::string> by_model_name;  // renamed -> the file's name
  for (const auto& [name, tensor] : file) by_model_name[Renamed(name, init)] = name;
  std::vector<std::pair<at::Tensor, const at::Tensor*>> copies;
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
    const at::Tensor& a = file.at(it->second);
    used[it->second] = true;
    if (a.sizes() != t.sizes()) {
      std::ostringstream have, want;
      have << a.sizes();
      want << t.sizes();
      return InvalidArgumentError(fmt::format(
          "{}: {} is {}, the model's {} is {}: leave it out with init.skip (a new head)",
          init.weights, it->second, have.str(), name, want.str()));
    }
    if (t.is_floating_point() != a.is_floating_point()) {
      return InvalidArgumentError(
          fmt::format("{}: {} has dtype {}, which the model's {} ({}) cannot take", init.weights,
                      it->second, std::string(c10::toString(a.scalar_type())), name,
                      std::string(c10::toString(t.scalar_type()))));
    }
    copies.emplace_back(t, &a);
    return Status::Ok();
  };
  for (const auto& p : model.named_parameters()) SPOT_RETURN_IF_ERROR(visit(p.key(), p.value()));
  for (const auto& b : model.named_buffers()) SPOT_RETURN_IF_ERROR(visit(b.key(), b.value()));
  for (const auto& [name, tensor] : file) {
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
    t.copy_(*a);
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
