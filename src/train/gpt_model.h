// The built-in language model `model: {name: gpt}`: a decoder-only
// Transformer in GPT-2's layout, with nanoGPT's module names and
// initialization, so its state dict and nanoGPT's use the same keys:
//   transformer.wte (token embedding), transformer.wpe (positions),
//   transformer.h.<i>.{ln_1, attn.c_attn, attn.c_proj, ln_2, mlp.c_fc, mlp.c_proj},
//   transformer.ln_f; the output layer shares wte's weight (no lm_head tensor).
// Pre-norm blocks, causal self-attention, GELU, weights N(0, 0.02) with the
// residual projections scaled by 1/sqrt(2 * layers), biases zero.
// python/spot_models.py defines the same model in PyTorch.
#pragma once

#include <memory>

#include "train/model.h"
#include "train/train_spec.h"

namespace spot::train {

// Token ids [batch, T] (T <= context) -> next-token logits [batch, T, vocab].
// Initial weights come from LibTorch's default generator: seed it first.
// REQUIRES: spec is valid (the spec reader checks it) and spec.vocab > 0.
std::shared_ptr<Net> MakeGpt(const GptSpec& spec);

}  // namespace spot::train
