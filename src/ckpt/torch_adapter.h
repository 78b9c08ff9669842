// The tensor adapter: the only part of ckpt/ that sees LibTorch. Copies CPU
// tensors into Container records and back, so the container format can evolve
// without touching the trainer. LibTorch exceptions stop here and come back as
// Status values.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

#include "ckpt/container.h"
#include "core/status.h"

namespace spot::ckpt {

// Copies `t` (any device, any strides; a GPU's through .cpu()) into a new
// record `name`.
Status PutTensor(Container* c, std::string name, const at::Tensor& t);

// Adds tensors as PutTensor does, but copies the bytes of contiguous ones in
// Finish(), spread over LibTorch's intra-op threads: training waits for a
// snapshot anyway, and those threads are idle while it does. Until Finish()
// returns the new records hold garbage, and the tensors must not change.
class TensorCapture {
 public:
  explicit TensorCapture(Container* c) : c_(c) {}
  Status Put(std::string name, const at::Tensor& t);
  // Does the deferred copies; the records are complete when it returns.
  void Finish();

 private:
  struct Copy {
    const char* src;
    char* dst;
    size_t bytes;
  };
  Container* c_;
  std::vector<Copy> copies_;
};

// Copies record `name` into `dst` (any device) in place; a large record into a
// contiguous CPU tensor is copied on LibTorch's intra-op threads. FailedPrecondition
// when the record is missing or its dtype or shape differ from dst's.
Status GetTensorInto(const Container& c, std::string_view name, const at::Tensor& dst);

// A new CPU tensor holding a copy of record `name`.
Result<at::Tensor> GetTensor(const Container& c, std::string_view name);

}  // namespace spot::ckpt
