#include "train/state_dict_export.h"

#include <ATen/core/Dict.h>
#include <torch/csrc/jit/serialization/pickle.h>

#include "core/file_io.h"

namespace spot::train {

Status ExportStateDict(Net& model, const std::string& path) {
  std::vector<char> bytes;
  try {
    // Host tensors: model.pt loads with torch.load anywhere, GPU or not.
    c10::Dict<std::string, at::Tensor> dict;
    for (const auto& p : model.named_parameters())
      dict.insert(p.key(), p.value().detach().cpu().contiguous());
    for (const auto& b : model.named_buffers())
      dict.insert(b.key(), b.value().detach().cpu().contiguous());
    bytes = torch::jit::pickle_save(c10::IValue(dict));
  } catch (const c10::Error& e) {
    return InternalError(std::string("serializing the model: ") + e.what_without_backtrace());
  }
  return WriteFileAtomically(path, std::string_view(bytes.data(), bytes.size()))
      .WithContext("writing the model");
}

}  // namespace spot::train
