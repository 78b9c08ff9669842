// The tensor adapter: the only part of ckpt/ that sees LibTorch. Copies CPU
// tensors into Container records and back, so the container format can evolve
// without touching the trainer. LibTorch exceptions stop here and come back as
// Status values.
#pragma once

#include <string>
#include <string_view>

#include <ATen/core/Tensor.h>

#include "ckpt/container.h"
#include "core/status.h"

namespace spot::ckpt {

// Copies `t` (CPU, any strides) into a new record `name`.
Status PutTensor(Container* c, std::string name, const at::Tensor& t);

// Copies record `name` into `dst` in place. FailedPrecondition when the record is
// missing or its dtype or shape differ from dst's.
Status GetTensorInto(const Container& c, std::string_view name, const at::Tensor& dst);

// A new CPU tensor holding a copy of record `name`.
Result<at::Tensor> GetTensor(const Container& c, std::string_view name);

}  // namespace spot::ckpt
