// Starting a fresh run from pretrained weights (the job's `init:` section):
// the tensors of a safetensors file (`spot ckpt export`, or
// `safetensors.torch.save_file(model.state_dict(), ...)` in Python) or of a
// state dict saved with torch.save (also inside a training checkpoint's
// "model" or "state_dict" entry) copied
// into the model's parameters and buffers by name, after renaming prefixes,
// leaving `skip` prefixes (a replaced head) as initialized. Every tensor is
// accounted for: loaded, skipped, missing from the file, or unused.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/status.h"
#include "train/model.h"
#include "train/train_spec.h"

namespace spot::train {

struct InitReport {
  int64_t loaded = 0;                // model tensors copied from the file
  std::vector<std::string> skipped;  // model tensors left as initialized (init.skip)
  std::vector<std::string> missing;  // model tensors the file lacks
  std::vector<std::string> unused;   // file tensors (renamed) no model tensor took
};

// InvalidArgument naming the file and the tensor for a shape that does not
// fit, a dtype that cannot be converted, or (init.strict) any missing or
// unused tensor; the model is then left unchanged.
Result<InitReport> LoadPretrained(const InitSpec& init, Net& model);

// What a fresh run does before its first step: spec.init's weights, if any,
// loaded and reported in the log. Errors name the job file's init.weights.
Status StartFromPretrained(const TrainSpec& spec, Net& model);

}  // namespace spot::train
