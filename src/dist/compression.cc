#include "dist/compression.h"

#include <ATen/ATen.h>
#include <fmt/format.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <torch/csrc/distributed/c10d/ProcessGroup.hpp>
#include <utility>

namespace spot::dist {
namespace {

using Clock = std::chrono::steady_clock;

double SecondsSince(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

constexpr std::pair<Compression, std::string_view> kNames[] = {
    {Compression::kNone, "none"}, {Compression::kFp16, "fp16"},
    {Compression::kBf16, "bf16"}, {Compression::kPowerSgd, "powersgd"},
    {Compression::kTopK, "topk"},
};

std::string ErrorText(const std::exception& e) {
  if (const auto* err = dynamic_cast<const c10::Error*>(&e)) return err->what_without_backtrace();
  return e.what();
}

// Issues collectives on one group, waits at most `timeout` for each, and counts payload
// bytes. Exceptions from c10d stop here and become Aborted.
class Collectives {
 public:
  Collectives(c10d::ProcessGroup& pg, std::chrono::milliseconds timeout)
      : pg_(pg), timeout_(timeout) {}

  Status AllReduce(const at::Tensor& t) {
    return Run("all-reduce", t, [&] {
      std::vector<at::Tensor> tensors{t};
      c10d::AllreduceOptions opts;
      opts.timeout = timeout_;
      return pg_.allreduce(tensors, opts);
    });
  }

  // Returns every rank's `t`, in rank order.
  Result<std::vector<at::Tensor>> AllGather(const at::Tensor& t) {
    std::vector<std::vector<at::Tensor>> out(1);
    for (int r = 0; r < pg_.getSize(); ++r) out[0].push_back(at::empty_like(t));
    SPOT_RETURN_IF_ERROR(Run("all-gather", t, [&] {
      std::vector<at::Tensor> in{t};
      c10d::AllgatherOptions opts;
      opts.timeout = timeout_;
      return pg_.allgather(out, in, opts);
    }));
    return std::move(out[0]);
  }

  int world() const { return pg_.getSize(); }
  CommStats& stats() { return stats_; }

 private:
  template <typename Issue>
  Status Run(std::string_view what, const at::Tensor& t, Issue issue) {
    const auto start = Clock::now();
    try {
      issue()->wait(timeout_);
    } catch (const std::exception& e) {
      return AbortedError(fmt::format("{} of {} bytes (rank {} of {}): {}", what, t.nbytes(),
                                      pg_.getRank(), pg_.getSize(), ErrorText(e)));
    }
    stats_.comm_seconds += SecondsSince(start);
    stats_.bytes_sent += t.nbytes();
    ++stats_.collectives;
    return Status::Ok();
  }

  c10d::ProcessGroup& pg_;
  std::chrono::milliseconds timeout_;
  CommStats stats_;
};

// Elements of `span`, or -1 when a dimension is negative or the product exceeds `limit`.
int64_t CheckedNumel(const TensorSpan& span, int64_t limit) {
  int64_t n = 1;
  for (int64_t d : span.shape) {
    if (d < 0 || (d > 0 && n > limit / d)) return -1;
    n *= d;
  }
  return n;
}

// Sorts spans by offset and checks that they fit in [0, numel) without overlapping.
Result<std::vector<TensorSpan>> SortedLayout(std::vector<TensorSpan> layout, int64_t numel) {
  std::sort(layout.begin(), layout.end(),
            [](const TensorSpan& a, const TensorSpan& b) { return a.offset < b.offset; });
  int64_t end = 0;
  for (const TensorSpan& span : layout) {
    const int64_t size = CheckedNumel(span, numel);
    if (size < 0) return InvalidArgumentError("layout: a shape is negative or too large");
    if (span.offset < end || size > numel - span.offset) {
      return InvalidArgumentError(
          fmt::format("layout: span at offset {} with {} elements overlaps or leaves [0, {})",
                      span.offset, size, numel));
    }
    end = span.offset + size;
  }
  return layout;
}

// One PowerSGD matrix: elements [offset, offset + n*m) of the buffer, rank r; its P lives at
// p_offset of the first all-reduce buffer, its Q at q_offset of the Q buffer.
struct Matrix {
  int64_t offset, n, m, r, p_offset, q_offset;
};
struct Range {
  int64_t offset, len;
};
struct PowerSgdPlan {
  std::vector<Matrix> matrices;
  std::vector<Range> plain;  // sent uncompressed, at the head of the first buffer
  int64_t plain_numel = 0;
  int64_t q_numel = 0;
  int64_t first_numel = 0;  // plain part + all P's
};

PowerSgdPlan MakePlan(const std::vector<TensorSpan>& sorted, int64_t numel,
                      const CompressionOptions& o) {
  PowerSgdPlan plan;
  int64_t cursor = 0, p_numel = 0;
  auto add_plain = [&](int64_t begin, int64_t end) {
    if (end > begin) plan.plain.push_back({begin, end - begin});
    plan.plain_numel += std::max<int64_t>(0, end - begin);
  };
  for (const TensorSpan& s : sorted) {
    const int64_t size = CheckedNumel(s, numel);
    if (s.shape.size() < 2 || size == 0 || size < o.powersgd_min_numel) continue;
    const int64_t n = s.shape[0], m = size / n;
    const int64_t r = std::min<int64_t>({o.powersgd_rank, n, m});
    if (double(n) * m < o.powersgd_min_compression_rate * double(r) * (n + m)) continue;
    add_plain(cursor, s.offset);
    plan.matrices.push_back({s.offset, n, m, r, p_numel, plan.q_numel});
    p_numel += n * r;
    plan.q_numel += m * r;
    cursor = s.offset + size;
  }
  add_plain(cursor, numel);
  for (Matrix& mx : plan.matrices) mx.p_offset += plan.plain_numel;
  plan.first_numel = plan.plain_numel + p_numel;
  return plan;
}

at::Tensor MView(const at::Tensor& flat, const Matrix& mx) {
  return flat.narrow(0, mx.offset, mx.n * mx.m).view({mx.n, mx.m});
}
at::Tensor PView(const at::Tensor& first, const Matrix& mx) {
  return first.narrow(0, mx.p_offset, mx.n * mx.r).view({mx.n, mx.r});
}
at::Tensor QView(const at::Tensor& q, const Matrix& mx) {
  return q.narrow(0, mx.q_offset, mx.m * mx.r).view({mx.m, mx.r});
}

// out = a b, written in place into the view `out` (taken by value: views are rvalues).
void MatMulInto(at::Tensor out, const at::Tensor& a, const at::Tensor& b) { at::mm_out(out, a, b); }

// Modified Gram-Schmidt on the columns of a contiguous n x r matrix, accumulating in double.
// A column that vanishes exactly is left zero.
void Orthogonalize(const at::Tensor& matrix) {
  float* p = matrix.data_ptr<float>();
  const int64_t n = matrix.size(0), r = matrix.size(1);
  for (int64_t j = 0; j < r; ++j) {
    for (int64_t k = 0; k < j; ++k) {
      double dot = 0;
      for (int64_t i = 0; i < n; ++i) dot += double(p[i * r + k]) * p[i * r + j];
      for (int64_t i = 0; i < n; ++i) p[i * r + j] -= float(dot * p[i * r + k]);
    }
    double norm = 0;
    for (int64_t i = 0; i < n; ++i) norm += double(p[i * r + j]) * p[i * r + j];
    norm = std::sqrt(norm);
    const float scale = (norm > 0 && std::isfinite(norm)) ? float(1.0 / norm) : 0.0f;
    for (int64_t i = 0; i < n; ++i) p[i * r + j] *= scale;
  }
}

// Uniform in [-1, 1) from a fully specified generator, so every rank draws the same values.
float UniformSigned(std::mt19937_64& rng) {
  return float(rng() >> 40) * (2.0f / float(1 << 24)) - 1.0f;
}

at::Tensor ToTensor(const std::vector<float>& v) {
  at::Tensor t = at::empty({int64_t(v.size())}, at::kFloat);
  std::memcpy(t.data_ptr<float>(), v.data(), v.size() * sizeof(float));
  return t;
}
std::vector<float> ToVector(const at::Tensor& t) {
  const float* p = t.data_ptr<float>();
  return std::vector<float>(p, p + t.numel());
}

// Sums (index, value) packets in rank order into `out` (zeroed first), so every rank adds in
// the same order and ends bitwise identical.
Status ScatterAddInRankOrder(const std::vector<at::Tensor>& packets, int64_t k, float* out,
                             int64_t numel) {
  std::fill(out, out + numel, 0.0f);
  for (const at::Tensor& packet : packets) {
    const int32_t* p = packet.data_ptr<int32_t>();
    for (int64_t j = 0; j < k; ++j) {
      if (p[j] < 0 || p[j] >= numel) return InternalError("top-k: peer sent a bad index");
      out[p[j]] += std::bit_cast<float>(p[k + j]);
    }
  }
  return Status::Ok();
}

// Next error-feedback state, committed only when the whole call succeeded.
struct Feedback {
  at::Tensor error;
  at::Tensor q;
};

class ReducerImpl final : public GradientReducer {
 public:
  ReducerImpl(const CompressionOptions& options, PowerSgdPlan plan, int64_t numel)
      : options_(options), plan_(std::move(plan)), numel_(numel) {}

  Result<CommStats> AllReduceSum(c10d::ProcessGroup& pg, const at::Tensor& flat,
                                 std::chrono::milliseconds timeout) override;
  ReducerState ExportState() const override;
  Status ImportState(ReducerState state) override;
  void Reset() override { ImportStateUnchecked(ReducerState{}); }
  const CompressionOptions& options() const override { return options_; }

 private:
  Status CheckFlat(const at::Tensor& flat) const;
  Status Dispatch(Collectives& comm, at::Tensor& work, Feedback* next);
  Status Fp16(Collectives& comm, at::Tensor& work);
  Status Bf16(Collectives& comm, at::Tensor& work);
  Status TopK(Collectives& comm, at::Tensor& work, Feedback* next);
  Status PowerSgd(Collectives& comm, at::Tensor& work, Feedback* next);
  void FillRandomColumns(const at::Tensor& q, bool only_zero_columns, uint64_t salt) const;
  at::Tensor WithError(const at::Tensor& work) const {
    return error_.defined() ? work + error_ : work.clone();
  }
  void ImportStateUnchecked(const ReducerState& state);

  const CompressionOptions options_;
  const PowerSgdPlan plan_;
  const int64_t numel_;
  int64_t step_ = 0;
  at::Tensor error_;  // fp32 [numel_]; undefined means zeros
  at::Tensor q_;      // fp32 [plan_.q_numel]; undefined means fresh from the seed
};

Result<CommStats> ReducerImpl::AllReduceSum(c10d::ProcessGroup& pg, const at::Tensor& flat,
                                            std::chrono::milliseconds timeout) {
  const auto start = Clock::now();
  SPOT_RETURN_IF_ERROR(CheckFlat(flat));
  Collectives comm(pg, timeout);
  Feedback next;
  try {
    // Work on a copy so that a failed call leaves the caller's gradients untouched.
    at::Tensor work = flat.clone();
    SPOT_RETURN_IF_ERROR(Dispatch(comm, work, &next).WithContext(CompressionName(options_.kind)));
    flat.copy_(work);
  } catch (const std::exception& e) {
    return InternalError(
        fmt::format("{} reducer: {}", CompressionName(options_.kind), ErrorText(e)));
  }
  if (next.error.defined()) error_ = std::move(next.error);
  if (next.q.defined()) q_ = std::move(next.q);
  ++step_;
  comm.stats().seconds = SecondsSince(start);
  return comm.stats();
}

Status ReducerImpl::CheckFlat(const at::Tensor& flat) const {
  if (!flat.defined() || !flat.device().is_cpu() || flat.scalar_type() != at::kFloat ||
      !flat.is_contiguous() || flat.numel() != numel_) {
    return InvalidArgumentError(
        fmt::format("gradient buffer must be a contiguous CPU fp32 tensor of {} elements", numel_));
  }
  return Status::Ok();
}

Status ReducerImpl::Dispatch(Collectives& comm, at::Tensor& work, Feedback* next) {
  if (step_ < options_.warmup_steps) return comm.AllReduce(work);
  switch (options_.kind) {
    case Compression::kNone:
      return comm.AllReduce(work);
    case Compression::kFp16:
      return Fp16(comm, work);
    case Compression::kBf16:
      return Bf16(comm, work);
    case Compression::kTopK:
      return TopK(comm, work, next);
    case Compression::kPowerSgd:
      return PowerSgd(comm, work, next);
  }
  return InternalError("unknown compression kind");
}

// fp16 keeps full precision only between 6.1e-5 and 65504, and gradients
// mostly sit far below that range (measured: an MLP's lost 6 points of
// accuracy when cast as they are). Scale by a power of two, chosen from the
// largest magnitude on any rank, so that the sum of all ranks stays below
// 2^14; powers of two scale exactly.
Status ReducerImpl::Fp16(Collectives& comm, at::Tensor& work) {
  at::Tensor peak = work.abs().max().reshape({1}).to(at::kDouble);
  SPOT_ASSIGN_OR_RETURN(std::vector<at::Tensor> peaks, comm.AllGather(peak));
  double max_abs = 0;
  for (const at::Tensor& p : peaks) max_abs = std::max(max_abs, p.item<double>());
  int exponent = 0;
  if (max_abs > 0 && std::isfinite(max_abs)) {
    exponent = static_cast<int>(std::floor(std::log2(16384.0 / (max_abs * comm.world()))));
    exponent = std::clamp(exponent, -24, 60);
  }
  const double scale = std::ldexp(1.0, exponent);
  at::Tensor half = (work * scale).to(at::kHalf);
  SPOT_RETURN_IF_ERROR(comm.AllReduce(half));
  work.copy_(half.to(at::kFloat) / scale);
  return Status::Ok();
}

Status ReducerImpl::Bf16(Collectives& comm, at::Tensor& work) {
  // Gloo 1.13 moves neither kBFloat16 nor kShort: send the bf16 bits as bytes.
  at::Tensor bf16 = work.to(at::kBFloat16);
  at::Tensor bytes = at::empty({2 * numel_}, at::kByte);
  std::memcpy(bytes.data_ptr(), bf16.data_ptr(), 2 * numel_);
  SPOT_ASSIGN_OR_RETURN(std::vector<at::Tensor> all, comm.AllGather(bytes));
  float* out = work.data_ptr<float>();
  std::fill(out, out + numel_, 0.0f);
  for (const at::Tensor& t : all) {  // rank order: the same float sums on every rank
    const auto* bits = static_cast<const uint16_t*>(t.data_ptr());
    for (int64_t j = 0; j < numel_; ++j) out[j] += std::bit_cast<float>(uint32_t{bits[j]} << 16);
  }
  return Status::Ok();
}

Status ReducerImpl::TopK(Collectives& comm, at::Tensor& work, Feedback* next) {
  at::Tensor acc = WithError(work);
  const int64_t k =
      std::clamp<int64_t>(int64_t(std::ceil(options_.topk_ratio * double(numel_))), 1, numel_);
  at::Tensor index = std::get<1>(at::topk(acc.abs(), k, 0, /*largest=*/true, /*sorted=*/false));
  const int64_t* ix = index.data_ptr<int64_t>();
  float* a = acc.data_ptr<float>();
  at::Tensor packet = at::empty({2 * k}, at::kInt);  // k indices, then k values' bits
  int32_t* p = packet.data_ptr<int32_t>();
  for (int64_t j = 0; j < k; ++j) {
    p[j] = int32_t(ix[j]);
    p[k + j] = std::bit_cast<int32_t>(a[ix[j]]);
  }
  SPOT_ASSIGN_OR_RETURN(std::vector<at::Tensor> all, comm.AllGather(packet));
  SPOT_RETURN_IF_ERROR(ScatterAddInRankOrder(all, k, work.data_ptr<float>(), numel_));
  for (int64_t j = 0; j < k; ++j) a[ix[j]] = 0.0f;  // memory = input - what this rank sent
  next->error = acc;
  return Status::Ok();
}

Status ReducerImpl::PowerSgd(Collectives& comm, at::Tensor& work, Feedback* next) {
  at::Tensor acc = WithError(work);
  at::Tensor q = q_;
  if (!q.defined()) {
    q = at::empty({plan_.q_numel}, at::kFloat);
    FillRandomColumns(q, /*only_zero_columns=*/false, 0);
  }
  // First all-reduce: the uncompressed elements, then P = M Q for every matrix.
  at::Tensor first = at::empty({plan_.first_numel}, at::kFloat);
  int64_t pos = 0;
  for (const Range& r : plan_.plain) {
    first.narrow(0, pos, r.len).copy_(acc.narrow(0, r.offset, r.len));
    pos += r.len;
  }
  for (const Matrix& mx : plan_.matrices)
    MatMulInto(PView(first, mx), MView(acc, mx), QView(q, mx));
  SPOT_RETURN_IF_ERROR(comm.AllReduce(first));
  at::Tensor error = at::zeros_like(acc);
  if (!plan_.matrices.empty()) {
    // Second all-reduce: Q = M^T P with P orthonormal; P Q^T then approximates the SUM of M.
    at::Tensor second = at::empty({plan_.q_numel}, at::kFloat);
    for (const Matrix& mx : plan_.matrices) {
      Orthogonalize(PView(first, mx));
      MatMulInto(QView(second, mx), MView(acc, mx).t(), PView(first, mx));
    }
    SPOT_RETURN_IF_ERROR(comm.AllReduce(second));
    const double world = comm.world();
    for (const Matrix& mx : plan_.matrices) {
      at::Tensor approx = MView(work, mx);
      MatMulInto(approx, PView(first, mx), QView(second, mx).t());
      // Each rank keeps its own input minus its 1/W share of the approximation, so the
      // ranks' memories add up to (sum of inputs) - approximation.
      MView(error, mx).copy_(MView(acc, mx) - approx / world);
    }
    FillRandomColumns(second, /*only_zero_columns=*/true, uint64_t(step_) + 1);
    next->q = second;
  }
  pos = 0;
  for (const Range& r : plan_.plain) {
    work.narrow(0, r.offset, r.len).copy_(first.narrow(0, pos, r.len));
    pos += r.len;
  }
  next->error = error;
  return Status::Ok();
}

// Fills Q's columns with seeded random values: all of them, or only those that are exactly
// zero (a zero gradient would otherwise keep Q at zero forever). Q is equal on all ranks, so
// all ranks draw the same values.
void ReducerImpl::FillRandomColumns(const at::Tensor& q, bool only_zero_columns,
                                    uint64_t salt) const {
  std::mt19937_64 rng(options_.powersgd_seed ^ (salt * 0x9E3779B97F4A7C15ull));
  float* data = q.data_ptr<float>();
  for (const Matrix& mx : plan_.matrices) {
    float* col0 = data + mx.q_offset;
    for (int64_t c = 0; c < mx.r; ++c) {
      bool zero = true;
      for (int64_t i = 0; i < mx.m && zero; ++i) zero = col0[i * mx.r + c] == 0.0f;
      if (only_zero_columns && !zero) continue;
      for (int64_t i = 0; i < mx.m; ++i) col0[i * mx.r + c] = UniformSigned(rng);
    }
  }
}

ReducerState ReducerImpl::ExportState() const {
  ReducerState state;
  state.step = step_;
  if (error_.defined()) state.error = ToVector(error_);
  if (q_.defined()) state.powersgd_q = ToVector(q_);
  return state;
}

Status ReducerImpl::ImportState(ReducerState state) {
  if (state.step < 0) return InvalidArgumentError("reducer state: negative step");
  if (!state.error.empty() && int64_t(state.error.size()) != numel_) {
    return InvalidArgumentError(fmt::format("reducer state: error memory has {} floats, want {}",
                                            state.error.size(), numel_));
  }
  if (!state.powersgd_q.empty() && int64_t(state.powersgd_q.size()) != plan_.q_numel) {
    return InvalidArgumentError(fmt::format("reducer state: PowerSGD Q has {} floats, want {}",
                                            state.powersgd_q.size(), plan_.q_numel));
  }
  ImportStateUnchecked(state);
  return Status::Ok();
}

void ReducerImpl::ImportStateUnchecked(const ReducerState& state) {
  step_ = state.step;
  error_ = state.error.empty() ? at::Tensor() : ToTensor(state.error);
  q_ = state.powersgd_q.empty() ? at::Tensor() : ToTensor(state.powersgd_q);
}

}  // namespace

Result<Compression> ParseCompression(std::string_view name) {
  for (const auto& [kind, text] : kNames) {
    if (name == text) return kind;
  }
  return InvalidArgumentError(
      fmt::format("unknown compression '{}' (allowed: none, fp16, bf16, powersgd, topk)", name));
}

std::string_view CompressionName(Compression kind) {
  for (const auto& [k, text] : kNames) {
    if (k == kind) return text;
  }
  return "unknown";
}

Status ValidateCompressionOptions(const CompressionOptions& o) {
  if (o.powersgd_rank < 1) return InvalidArgumentError("powersgd_rank must be >= 1");
  if (o.powersgd_min_numel < 0) return InvalidArgumentError("powersgd_min_numel must be >= 0");
  if (!(o.powersgd_min_compression_rate >= 1.0) ||
      !std::isfinite(o.powersgd_min_compression_rate)) {
    return InvalidArgumentError("powersgd_min_compression_rate must be a finite number >= 1");
  }
  if (!(o.topk_ratio > 0.0 && o.topk_ratio <= 1.0)) {
    return InvalidArgumentError("topk_ratio must be in (0, 1]");
  }
  if (o.warmup_steps < 0) return InvalidArgumentError("warmup_steps must be >= 0");
  return Status::Ok();
}

Result<std::unique_ptr<GradientReducer>> GradientReducer::Create(const CompressionOptions& options,
                                                                 std::vector<TensorSpan> layout,
                                                                 int64_t numel) {
  SPOT_RETURN_IF_ERROR(ValidateCompressionOptions(options));
  if (numel < 1) return InvalidArgumentError("gradient buffer must have >= 1 element");
  if (options.kind == Compression::kTopK && numel > std::numeric_limits<int32_t>::max()) {
    return InvalidArgumentError("top-k sends int32 indices: numel must be < 2^31");
  }
  SPOT_ASSIGN_OR_RETURN(std::vector<TensorSpan> sorted, SortedLayout(std::move(layout), numel));
  PowerSgdPlan plan;
  if (options.kind == Compression::kPowerSgd) plan = MakePlan(sorted, numel, options);
  return std::unique_ptr<GradientReducer>(new ReducerImpl(options, std::move(plan), numel));
}

}  // namespace spot::dist
