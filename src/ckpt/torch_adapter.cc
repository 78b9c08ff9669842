#include "ckpt/torch_adapter.h"

#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <fmt/format.h>

#include <algorithm>
#include <cstring>
#include <memory>

namespace spot::ckpt {
namespace {

Result<DType> FromScalarType(at::ScalarType t) {
  switch (t) {
    case at::kByte:
      return DType::kU8;
    case at::kChar:
      return DType::kI8;
    case at::kShort:
      return DType::kI16;
    case at::kInt:
      return DType::kI32;
    case at::kLong:
      return DType::kI64;
    case at::kHalf:
      return DType::kF16;
    case at::kBFloat16:
      return DType::kBF16;
    case at::kFloat:
      return DType::kF32;
    case at::kDouble:
      return DType::kF64;
    case at::kBool:
      return DType::kBool;
    default:
      return InvalidArgumentError(fmt::format("dtype {} cannot be checkpointed", at::toString(t)));
  }
}

at::ScalarType ToScalarType(DType t) {
  switch (t) {
    case DType::kU8:
      return at::kByte;
    case DType::kI8:
      return at::kChar;
    case DType::kI16:
      return at::kShort;
    case DType::kI32:
      return at::kInt;
    case DType::kI64:
      return at::kLong;
    case DType::kF16:
      return at::kHalf;
    case DType::kBF16:
      return at::kBFloat16;
    case DType::kF32:
      return at::kFloat;
    case DType::kF64:
      return at::kDouble;
    case DType::kBool:
      return at::kBool;
  }
  return at::kByte;
}

std::string ShapeString(c10::IntArrayRef s) { return fmt::format("[{}]", fmt::join(s, ", ")); }

// Pieces of at most 1 MiB, so that a few big tensors still split evenly.
constexpr size_t kCopyPiece = size_t{1} << 20;

// memcpy spread over LibTorch's intra-op threads: a restore copies the whole
// state, and the threads are idle while training waits for it.
void ParallelCopy(char* dst, const char* src, size_t bytes) {
  if (bytes < 2 * kCopyPiece) {
    std::memcpy(dst, src, bytes);
    return;
  }
  const auto pieces = static_cast<int64_t>((bytes + kCopyPiece - 1) / kCopyPiece);
  at::parallel_for(0, pieces, 1, [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) {
      const size_t off = static_cast<size_t>(i) * kCopyPiece;
      std::memcpy(dst + off, src + off, std::min(kCopyPiece, bytes - off));
    }
  });
}

}  // namespace

Status PutTensor(Container* c, std::string name, const at::Tensor& device_tensor) {
  try {
    if (!device_tensor.defined()) return InvalidArgumentError("tensor '" + name + "' is undefined");
    // A GPU's tensor is copied to the host first (and synchronously).
    const at::Tensor t = device_tensor.device().is_cpu() ? device_tensor : device_tensor.cpu();
    SPOT_ASSIGN_OR_RETURN(DType dtype, FromScalarType(t.scalar_type()));
    // Reading the bytes needs no detach(): that would be a dispatcher call per
    // record on the path training waits for.
    std::span<char> dst = c->AddUninitialized(std::move(name), dtype, t.sizes().vec());
    if (dst.empty()) return Status::Ok();
    if (t.is_contiguous()) {
      std::memcpy(dst.data(), t.data_ptr(), dst.size());
    } else {
      at::Tensor view = at::from_blob(dst.data(), t.sizes(), t.options().requires_grad(false));
      at::NoGradGuard no_grad;  // copy_ from a parameter records no graph
      view.copy_(t);
    }
    return Status::Ok();
  } catch (const c10::Error& e) {
    return InternalError(std::string("copying tensor into checkpoint: ") +
                         e.what_without_backtrace());
  }
}

Status TensorCapture::Put(std::string name, const at::Tensor& t) {
  try {
    if (!t.defined() || !t.device().is_cpu() || !t.is_contiguous()) {
      return PutTensor(c_, std::move(name), t);  // the same checks and errors
    }
    SPOT_ASSIGN_OR_RETURN(DType dtype, FromScalarType(t.scalar_type()));
    const auto* src = static_cast<const char*>(t.data_ptr());
    std::span<char> dst = c_->AddUninitialized(std::move(name), dtype, t.sizes().vec());
    if (!dst.empty()) copies_.push_back({src, dst.data(), dst.size()});
    return Status::Ok();
  } catch (const c10::Error& e) {  // e.g. a sparse tensor, which has no is_contiguous()
    return InternalError(std::string("copying tensor into checkpoint: ") +
                         e.what_without_backtrace());
  }
}

void TensorCapture::Finish() {
  constexpr size_t kPiece = kCopyPiece;
  std::vector<Copy> pieces;
  for (const Copy& c : copies_) {
    for (size_t off = 0; off < c.bytes; off += kPiece) {
      pieces.push_back({c.src + off, c.dst + off, std::min(kPiece, c.bytes - off)});
    }
  }
  copies_.clear();
  at::parallel_for(0, static_cast<int64_t>(pieces.size()), 1, [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) {
      const Copy& p = pieces[static_cast<size_t>(i)];
      std::memcpy(p.dst, p.src, p.bytes);
    }
  });
}

void TensorPlacement::Add(std::string name, const at::Tensor& t) {
  tensors_.insert_or_assign(std::move(name), t);
}

SharedMemory TensorPlacement::Place(const RecordEntry& e) const {
  auto it = tensors_.find(e.name);
  if (it == tensors_.end()) return {};
  const at::Tensor& t = it->second;
  try {
    if (!t.defined() || !t.device().is_cpu() || !t.is_contiguous() ||
        t.scalar_type() != ToScalarType(e.dtype) || t.sizes().vec() != e.shape ||
        static_cast<uint64_t>(t.nbytes()) != e.raw_bytes || e.raw_bytes == 0) {
      return {};
    }
    return {{static_cast<char*>(t.data_ptr()), static_cast<size_t>(e.raw_bytes)},
            std::make_shared<at::Tensor>(t)};
  } catch (const c10::Error&) {
    return {};  // e.g. a sparse tensor: the reader's own memory, and GetTensorInto says why
  }
}

Status GetTensorInto(const Container& c, std::string_view name, const at::Tensor& dst) {
  const Record* r = c.Find(name);
  if (r == nullptr) return FailedPreconditionError(fmt::format("checkpoint has no '{}'", name));
  if (ToScalarType(r->dtype) != dst.scalar_type() || r->shape != dst.sizes().vec()) {
    return FailedPreconditionError(fmt::format(
        "checkpoint's '{}' is {}{}, the model expects {}{}", name, DTypeName(r->dtype),
        ShapeString(r->shape), at::toString(dst.scalar_type()), ShapeString(dst.sizes())));
  }
  try {
    if (r->data.empty()) return Status::Ok();
    if (dst.device().is_cpu() && dst.is_contiguous() &&
        static_cast<const char*>(dst.data_ptr()) == r->data.data()) {
      return Status::Ok();  // decoded in place (TensorPlacement)
    }
    at::NoGradGuard no_grad;
    if (!dst.device().is_cpu()) {
      // A GPU's tensor: through a host tensor over the record's bytes.
      at::Tensor src = at::from_blob(const_cast<char*>(r->data.data()), dst.sizes(),
                                     at::TensorOptions().dtype(dst.scalar_type()));
      dst.copy_(src);
    } else if (dst.is_contiguous()) {
      ParallelCopy(static_cast<char*>(dst.data_ptr()), r->data.data(), r->data.size());
    } else {
      // from_blob needs a mutable pointer; the source is only read.
      at::Tensor src = at::from_blob(const_cast<char*>(r->data.data()), dst.sizes(),
                                     dst.options().requires_grad(false));
      dst.copy_(src);
    }
    return Status::Ok();
  } catch (const c10::Error& e) {
    return InternalError(std::string("restoring tensor from checkpoint: ") +
                         e.what_without_backtrace());
  }
}

Result<at::Tensor> GetTensor(const Container& c, std::string_view name) {
  const int i = c.FindIndex(name);
  if (i < 0) return FailedPreconditionError(fmt::format("checkpoint has no '{}'", name));
  const Record* r = &c.records()[static_cast<size_t>(i)];
  try {
    const auto options = at::TensorOptions().dtype(ToScalarType(r->dtype));
    if (std::shared_ptr<void> owner = c.SharedOwner(static_cast<size_t>(i))) {
      // The tensor takes a share of the decoded bytes instead of a copy of them.
      return at::from_blob(
          const_cast<char*>(r->data.data()), r->shape,
          [owner = std::move(owner)](void*) mutable { owner.reset(); }, options);
    }
    at::Tensor t = at::empty(r->shape, options);
    if (!r->data.empty()) std::memcpy(t.data_ptr(), r->data.data(), r->data.size());
    return t;
  } catch (const c10::Error& e) {
    return InternalError(std::string("restoring tensor from checkpoint: ") +
                         e.what_without_backtrace());
  }
}

}  // namespace spot::ckpt
