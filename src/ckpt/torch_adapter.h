// The tensor adapter: the only part of ckpt/ that sees LibTorch. Copies CPU
// tensors into Container records and back, so the container format can evolve
// without touching the trainer. LibTorch exceptions stop here and come back as
// Status values.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstddef>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "ckpt/container.h"
#include "ckpt/format.h"
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

// Decoding straight into tensors (a RecordPlacement for CheckpointFile::
// ReadAll and CheckpointStore::LoadNewestValid): the records added here go
// into their tensors' memory, the rest into the reader's own. GetTensorInto
// then has nothing to copy. A record goes into its tensor only when the
// tensor is a contiguous CPU tensor of the record's dtype and shape. When
// the read fails the tensors hold garbage: restore them another way, or
// start afresh. Not thread-safe to Add to; place() may run on many threads.
class TensorPlacement {
 public:
  TensorPlacement() = default;
  TensorPlacement(const TensorPlacement&) = delete;  // place() refers to this one
  TensorPlacement& operator=(const TensorPlacement&) = delete;

  void Add(std::string name, const at::Tensor& t);
  const RecordPlacement* place() const { return &place_; }

 private:
  std::unordered_map<std::string, at::Tensor> tensors_;
  RecordPlacement place_ = [this](const RecordEntry& e) { return Place(e); };
  SharedMemory Place(const RecordEntry& e) const;
};

// Copies record `name` into `dst` (any device) in place (nothing to copy when
// the record was decoded into dst's memory, see TensorPlacement); a large record into a
// contiguous CPU tensor is copied on LibTorch's intra-op threads. FailedPrecondition
// when the record is missing or its dtype or shape differ from dst's.
Status GetTensorInto(const Container& c, std::string_view name, const at::Tensor& dst);

// A CPU tensor holding record `name`'s bytes: for a record with a
// SharedOwner (a decoded one), the record's own memory, shared (the tensor
// keeps it alive, and writes to the tensor show in the record); otherwise a
// copy.
Result<at::Tensor> GetTensor(const Container& c, std::string_view name);

}  // namespace spot::ckpt
