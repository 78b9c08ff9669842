// Writes a model's parameters and buffers as a state dict in the format of
// Python's torch.save (a zip archive holding a pickled dict), so
//   model.load_state_dict(torch.load("model.pt"))
// works in Python PyTorch. Written crash-safely.
#pragma once

#include <string>

#include "core/status.h"
#include "train/model.h"

namespace spot::train {

Status ExportStateDict(Net& model, const std::string& path);

}  // namespace spot::train
