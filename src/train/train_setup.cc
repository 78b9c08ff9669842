#include "train/train_setup.h"

#include <ATen/Parallel.h>
#include <malloc.h>
#include <torch/nn/functional/loss.h>
#include <torch/optim/adam.h>
#include <torch/optim/sgd.h>
#include <torch/utils.h>

#include <thread>

namespace spot::train {
namespace {

TensorSet ToTensors(const ImageSet& s) {
  at::Tensor raw =
      at::from_blob(const_cast<uint8_t*>(s.pixels.data()), {s.count, 1, s.rows, s.cols}, at::kByte);
  TensorSet t;
  t.images = raw.to(at::kFloat).div_(255).sub_(kFashionMnistMean).div_(kFashionMnistStd);
  t.labels =
      at::from_blob(const_cast<uint8_t*>(s.labels.data()), {s.count}, at::kByte).to(at::kLong);
  return t;
}

}  // namespace

// Training allocates and frees the same large buffers every step (activations,
// gradients, the optimizer's temporaries). glibc serves blocks above its mmap
// threshold with fresh mmaps, so each step would page-fault and zero them
// again, and it returns freed heap tops to the kernel. Raising the trim
// threshold and serving every block from the heap keeps those buffers for
// reuse: ~20% more samples/s for the CNN at batch 256, and for the 50M MLP,
// whose 64 MB temporaries are above any mmap threshold glibc accepts (32 MB),
// 27,000 fewer page faults a step. Checkpoint buffers stay out of this heap
// (ckpt::RecordAllocator), so they cannot take its free chunks. Process-wide,
// set once; the trainer is the process's main work.
void KeepActivationBuffersInHeap() {
  static const bool done = [] {
    mallopt(M_MMAP_THRESHOLD, 32 << 20);  // glibc's maximum on 64-bit
    mallopt(M_MMAP_MAX, 0);               // and above it: the heap too, never mmap
    mallopt(M_TRIM_THRESHOLD, 1 << 30);
    return true;
  }();
  (void)done;
}

Result<TensorSet> LoadSplit(const TrainSpec& spec, Split split, int64_t limit) {
  auto set = LoadFashionMnist(spec.dataset_path, split);
  if (!set.ok()) {
    const Status& s = set.status();
    return s.code() == StatusCode::kInvalidArgument ? s.WithContext(spec.source + ": dataset.path")
                                                    : s;
  }
  TensorSet t = ToTensors(*set);
  if (limit > 0 && limit < t.size()) {
    t.images = t.images.slice(0, 0, limit).clone();
    t.labels = t.labels.slice(0, 0, limit).clone();
  }
  return t;
}

std::unique_ptr<torch::optim::Optimizer> MakeOptimizer(const OptimizerSpec& o, Net& model) {
  if (o.type == "adam") {
    return std::make_unique<torch::optim::Adam>(model.parameters(),
                                                torch::optim::AdamOptions(o.lr)
                                                    .betas({o.beta1, o.beta2})
                                                    .eps(o.eps)
                                                    .weight_decay(o.weight_decay));
  }
  return std::make_unique<torch::optim::SGD>(model.parameters(), torch::optim::SGDOptions(o.lr)
                                                                     .momentum(o.momentum)
                                                                     .nesterov(o.nesterov)
                                                                     .weight_decay(o.weight_decay));
}

int PrepareProcess(const TrainSpec& spec) {
  int threads = spec.threads > 0 ? static_cast<int>(spec.threads)
                                 : static_cast<int>(std::thread::hardware_concurrency());
  at::set_num_threads(threads);
  KeepActivationBuffersInHeap();
  torch::manual_seed(static_cast<uint64_t>(spec.seed));
  return threads;
}

ckpt::RetentionPolicy RetentionFor(const CheckpointSpec& c) {
  ckpt::RetentionPolicy r;
  r.keep_last = static_cast<int>(c.keep);
  r.keep_every = static_cast<int>(c.keep_every);
  r.best_metric = c.keep_best;
  r.best_higher = c.keep_best != "test_loss";
  return r;
}

ckpt::CodecPlan CodecPlanFor(const CheckpointSpec& c) {
  ckpt::CodecPlan p;
  // The spec reader admits only full codecs' names.
  Result<ckpt::Codec> full = ckpt::ParseCodec(c.codec);
  p.full = full.ok() ? *full : ckpt::Codec::kPlanesZstd;
  p.lossless_delta = c.delta == "xor" ? ckpt::Codec::kXorDelta : ckpt::Codec::kSubDelta;
  p.delta = c.delta == "q8" ? ckpt::Codec::kQ8Delta : p.lossless_delta;
  p.q8_optimizer_state = c.q8_optimizer;
  return p;
}

at::Tensor LossSum(const std::string& loss, const at::Tensor& output, const at::Tensor& labels) {
  if (loss == "nll") return at::nll_loss(output, labels, {}, at::Reduction::Sum);
  return at::cross_entropy_loss(output, labels, {}, at::Reduction::Sum);
}

EvalSums EvaluateRange(Net& model, const TensorSet& test, int64_t begin, int64_t end,
                       int64_t batch_size, const std::string& loss) {
  torch::NoGradGuard no_grad;
  model.eval();
  EvalSums s;
  for (int64_t i = begin; i < end; i += batch_size) {
    int64_t stop = std::min(end, i + batch_size);
    at::Tensor logits = model.forward(test.images.slice(0, i, stop));
    at::Tensor y = test.labels.slice(0, i, stop);
    s.loss_sum += LossSum(loss, logits, y).item<double>();
    s.correct += static_cast<double>(logits.argmax(1).eq(y).sum().item<int64_t>());
  }
  s.count = static_cast<double>(end - begin);
  model.train();
  return s;
}

}  // namespace spot::train
