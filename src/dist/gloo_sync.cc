#include "dist/gloo_sync.h"

#include <ATen/ATen.h>
#include <fmt/format.h>

#include <thread>

namespace spot::dist {
namespace {

using Clock = std::chrono::steady_clock;

double Since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

// Control values summed across the group after every step, then each rank's
// throughput, then the floating-point buffers.
enum Control { kReform, kStop, kLossSum, kCount, kControlSize };

}  // namespace

Status AllReduceOrAbort(c10d::ProcessGroup& pg, at::Tensor& t, const char* what) {
  try {
    std::vector<at::Tensor> v{t};
    pg.allreduce(v)->wait();
  } catch (const std::exception& e) {
    return AbortedError(fmt::format("{}: {}", what, e.what()));
  }
  return Status::Ok();
}

Result<std::unique_ptr<GlooSync>> GlooSync::Create(c10d::ProcessGroup& pg, train::Net& model,
                                                   const Options& options) {
  std::unique_ptr<GlooSync> s(new GlooSync(pg, model, options));
  int64_t numel = 0;
  for (const at::Tensor& p : model.parameters()) {
    s->params_.push_back(p);
    s->layout_.push_back({.offset = numel, .shape = p.sizes().vec()});
    numel += p.numel();
  }
  s->flat_ = at::zeros({numel}, at::kFloat);
  SPOT_ASSIGN_OR_RETURN(s->reducer_,
                        GradientReducer::Create(options.compression, s->layout_, numel));
  return s;
}

void GlooSync::Flatten() {
  for (size_t i = 0; i < params_.size(); ++i) {
    at::Tensor dst = flat_.slice(0, layout_[i].offset, layout_[i].offset + params_[i].numel());
    const at::Tensor& g = params_[i].grad();
    if (g.defined()) {
      dst.copy_(g.reshape({-1}));
    } else {
      dst.zero_();
    }
  }
}

void GlooSync::Unflatten() {
  for (size_t i = 0; i < params_.size(); ++i) {
    at::Tensor src = flat_.slice(0, layout_[i].offset, layout_[i].offset + params_[i].numel());
    if (!params_[i].requires_grad()) continue;  // frozen (param_groups): no gradient
    if (!params_[i].grad().defined()) params_[i].mutable_grad() = at::zeros_like(params_[i]);
    params_[i].mutable_grad().copy_(src.view(params_[i].sizes()));
  }
}

Result<train::GlobalLoss> GlooSync::Sync(const train::ReplicaLoss& mine) {
  const auto t0 = Clock::now();
  if (opt_.slowdown > 0) {
    std::this_thread::sleep_for(
        std::chrono::duration<double>(mine.compute_seconds * opt_.slowdown));
  }
  busy_seconds_ = mine.compute_seconds + Since(t0);
  Flatten();
  SPOT_ASSIGN_OR_RETURN(comm_, reducer_->AllReduceSum(pg_, flat_, opt_.timeout));
  std::vector<at::Tensor> buffers;
  int64_t nbuf = 0;
  for (const at::Tensor& b : model_.buffers()) {
    if (!b.is_floating_point()) continue;
    buffers.push_back(b);
    nbuf += b.numel();
  }
  const int64_t world = pg_.getSize();
  at::Tensor control = at::zeros({kControlSize + world + nbuf}, at::kDouble);
  double* c = control.data_ptr<double>();
  c[kReform] = control_.reform ? 1 : 0;
  c[kStop] = control_.stop ? 1 : 0;
  c[kLossSum] = mine.loss_sum;
  c[kCount] = static_cast<double>(mine.samples);
  c[kControlSize + pg_.getRank()] = control_.samples_per_s;
  // Buffers enter as this replica's value times its share of the batch: the
  // sum is the share-weighted mean.
  const double share = static_cast<double>(mine.samples) / static_cast<double>(mine.batch);
  int64_t off = kControlSize + world;
  for (const at::Tensor& b : buffers) {
    control.slice(0, off, off + b.numel()).copy_(b.reshape({-1}).to(at::kDouble) * share);
    off += b.numel();
  }
  const auto control_start = Clock::now();
  SPOT_RETURN_IF_ERROR(AllReduceOrAbort(pg_, control, "step control all-reduce"));
  control_seconds_ = Since(control_start);
  // Committed from here on: every collective of the step succeeded.
  Unflatten();
  off = kControlSize + world;
  for (at::Tensor& b : buffers) {
    b.copy_(control.slice(0, off, off + b.numel()).view(b.sizes()).to(b.scalar_type()));
    off += b.numel();
  }
  reform_ = c[kReform] > 0;
  stop_ = c[kStop] > 0;
  rates_.assign(c + kControlSize, c + kControlSize + world);
  return train::GlobalLoss{c[kLossSum], c[kCount]};
}

}  // namespace spot::dist
