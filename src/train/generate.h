// Text from a trained language model (`spot generate`): the job's newest valid
// checkpoint (local tier, else durable), the vocabulary beside its token
// files, and autoregressive sampling. LibTorch-free header.
#pragma once

#include <cstdint>
#include <string>

#include "core/status.h"
#include "train/train_spec.h"

namespace spot::train {

struct GenerateOptions {
  std::string prompt;        // text to continue ("" = from a newline)
  int64_t tokens = 200;      // tokens to add
  double temperature = 0.8;  // 0 = always the likeliest token
  int64_t top_k = 0;         // sample among the k likeliest (0 = all)
  int64_t seed = 0;          // the same seed, checkpoint and options give the same text
};

struct Generated {
  std::string text;  // the prompt and its continuation
  int64_t step = 0;  // of the checkpoint used
  int64_t version = 0;
  std::string tier;
};

// InvalidArgument for a job that is no language model (loss lm, dataset
// tokens with a vocab.json) or a prompt with a byte outside the vocabulary;
// NotFound when the job has no checkpoint yet.
Result<Generated> GenerateText(const TrainSpec& spec, const GenerateOptions& options);

}  // namespace spot::train
