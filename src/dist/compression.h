// Gradient compression for data-parallel training: a GradientReducer turns each rank's flat fp32
// gradient buffer into the (approximate) SUM over the ranks of a c10d process group.
//
// Choices (Compression):
//   kNone      one fp32 all-reduce of the whole buffer.
//   kFp16      cast to fp16, all-reduce (Gloo sums in fp16), cast back. Values beyond fp16's
//              range (65504) become inf: the buffer should already hold the rank's share.
//   kBf16      cast to bf16. Gloo in LibTorch 1.13 all-reduces and all-gathers neither
//              kBFloat16 nor kShort, so the bf16 bits travel by all-gather (as bytes) and
//              every rank sums them in fp32 locally, in rank order (the result is not
//              rounded back to bf16). Each rank receives (W-1)*2 bytes an element, so on the
//              wire this beats the fp32 ring all-reduce (~8 bytes an element) only for W < 5.
//   kPowerSgd  PowerSGD (Vogels et al. 2019, as PyTorch's powerSGD_hook) with error feedback:
//              each layout tensor with >= 2 dims and >= powersgd_min_numel elements is
//              reshaped to (shape[0], rest) and sent as rank-r factors P (n x r) and Q (m x r);
//              the rest goes uncompressed in the same all-reduce as P. Two collectives a step.
//   kTopK      top-k with error feedback: each rank sends its k = ceil(topk_ratio * numel)
//              largest |values| (int32 index + fp32 value) by one all-gather; every rank
//              scatter-adds all ranks' pairs in rank order.
//
// Every choice leaves BITWISE identical buffers on all ranks: all-reduce results are computed
// once per segment by Gloo and copied, local sums run in rank order, and local math (QR,
// matrix products) sees identical inputs. Identical local math assumes the same binary, BLAS
// and thread count on every rank.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <string_view>
#include <vector>

#include "core/status.h"

namespace at {
class Tensor;
}  // namespace at
namespace c10d {
class ProcessGroup;
}  // namespace c10d

namespace spot::dist {

enum class Compression { kNone, kFp16, kBf16, kPowerSgd, kTopK };

// "none", "fp16", "bf16", "powersgd", "topk"; otherwise InvalidArgument naming those values.
Result<Compression> ParseCompression(std::string_view name);
std::string_view CompressionName(Compression kind);

struct CompressionOptions {
  Compression kind = Compression::kNone;
  // PowerSGD: approximation rank r, >= 1 (clamped to min(n, m) per matrix).
  int powersgd_rank = 4;
  // PowerSGD: tensors with fewer elements, or fewer than 2 dims, go uncompressed. >= 0.
  int64_t powersgd_min_numel = 4096;
  // PowerSGD: compress an n x m matrix only when n*m >= rate * r*(n+m). >= 1.
  double powersgd_min_compression_rate = 2.0;
  // PowerSGD: seed of the initial Q factors. Must be equal on all ranks.
  uint64_t powersgd_seed = 0;
  // Top-k: fraction of elements each rank sends, in (0, 1]. k = ceil(ratio * numel).
  double topk_ratio = 0.01;
  // The first `warmup_steps` successful calls use a plain fp32 all-reduce (no error
  // feedback), as PyTorch's start_powerSGD_iter. >= 0.
  int64_t warmup_steps = 0;
};

// OK, or InvalidArgument naming the first field out of range.
Status ValidateCompressionOptions(const CompressionOptions& options);

// Where one parameter lives inside the flat buffer: `offset` elements from the start, with
// prod(shape) elements (a scalar has an empty shape and one element).
struct TensorSpan {
  int64_t offset = 0;
  std::vector<int64_t> shape;
};

// What one AllReduceSum call did on this rank.
struct CommStats {
  // Payload bytes this rank handed to collectives (the input tensors' sizes), not wire bytes:
  // Gloo's ring forwarding and all-gather fan-out are not counted.
  uint64_t bytes_sent = 0;
  int collectives = 0;      // collectives issued
  double seconds = 0;       // wall time of the whole call
  double comm_seconds = 0;  // part of `seconds` spent waiting on collectives
};

// Per-rank state a checkpoint may hold to resume bitwise. Empty vectors mean "fresh"
// (zero error memory, Q from powersgd_seed).
struct ReducerState {
  int64_t step = 0;               // successful calls so far (warm-up counter)
  std::vector<float> error;       // error-feedback memory: numel floats, or empty
  std::vector<float> powersgd_q;  // PowerSGD Q factors, concatenated; equal on all ranks
};

// One per process-group generation (or carried over by ExportState/ImportState).
// Not thread-safe: one call at a time.
class GradientReducer {
 public:
  virtual ~GradientReducer() = default;

  // `layout` places the parameters inside a buffer of `numel` elements (spans must not
  // overlap or leave [0, numel); elements outside every span are sent uncompressed). Only
  // PowerSGD uses it. InvalidArgument on bad options or layout.
  static Result<std::unique_ptr<GradientReducer>> Create(const CompressionOptions& options,
                                                         std::vector<TensorSpan> layout,
                                                         int64_t numel);

  // Replaces `flat` (CPU, fp32, contiguous, `numel` elements, same layout on every rank) by
  // the (approximate) sum over the ranks of `pg`. Every rank must call it with the same
  // options. Each collective waits at most `timeout` (give the group's own timeout the same
  // bound so its worker thread is freed too).
  // Errors: InvalidArgument for a bad `flat`; Aborted when a collective fails or times out
  // (re-form the group and retry) -- then `flat` and the error-feedback state are unchanged,
  // and the group should not be used again.
  virtual Result<CommStats> AllReduceSum(c10d::ProcessGroup& pg, const at::Tensor& flat,
                                         std::chrono::milliseconds timeout) = 0;

  virtual ReducerState ExportState() const = 0;
  // InvalidArgument when the vector sizes do not fit this reducer (state left unchanged).
  virtual Status ImportState(ReducerState state) = 0;
  // Clears error memory, the step counter and PowerSGD's Q.
  virtual void Reset() = 0;

  virtual const CompressionOptions& options() const = 0;
};

}  // namespace spot::dist
