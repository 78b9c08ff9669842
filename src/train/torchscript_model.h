// A module the user scripted or traced in Python (torch.jit.script(m).save or
// torch.jit.trace(m, x).save), trained natively as a train::Net.
//
// The TorchScript module's parameters and buffers are mirrored, tensor for
// tensor (shared storage, no copies), into a torch::nn::Module hierarchy with
// the same dotted names, so everything that works on a Net works on it
// unchanged: the optimizers, checkpoints (TrainState), the elastic state sync,
// and the state-dict export, whose names are those of the Python module, so
//   module.load_state_dict(torch.load("model.pt"))
// loads the trained weights back in Python.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "core/status.h"
#include "train/model.h"

namespace spot::train {

// Loads `path` and checks that its forward maps a batch of two zero samples
// of `sample_shape` (a data set's [1, 28, 28]) to [2, classes] scores, or
// with `token_ids` (loss lm) two windows of int64 ids [2, T] to next-token
// scores [2, T, vocab], or with `regression` (loss mse) to [2] or [2, k]
// outputs (run once in eval mode, without gradients).
// InvalidArgument naming the file: not a TorchScript archive, no forward, or
// an output of another shape.
Result<std::shared_ptr<Net>> LoadTorchScriptModel(const std::string& path,
                                                  const std::vector<int64_t>& sample_shape,
                                                  bool token_ids = false, bool regression = false);

}  // namespace spot::train
