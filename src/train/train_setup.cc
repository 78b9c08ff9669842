#include "train/train_setup.h"

#include <ATen/Parallel.h>
#include <ATen/autocast_mode.h>
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <malloc.h>
#include <torch/nn/functional/loss.h>
#include <torch/optim/adam.h>
#include <torch/optim/sgd.h>
#include <torch/utils.h>

#include <map>
#include <set>

#include "core/process_cpu.h"
#include "train/folder_data.h"
#include "train/numpy_file.h"
#include "train/safetensors_file.h"
#include "train/token_stream.h"
#include "train/trainer.h"

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

// A split of an .npz archive or a safetensors file with Keras's names:
// x_<split> (float32/64 as is, uint8 scaled to [0, 1]; [n, H, W] gets a
// channel, [n, 1, H, W]) and y_<split> (integer class labels >= 0, [n]; for
// loss mse, float32/float64 targets [n] or [n, k], kept as float32).
Result<TensorSet> LoadArraySplit(const TrainSpec& spec, Split split) {
  const std::string part = split == Split::kTrain ? "train" : "test";
  const std::string xn = "x_" + part, yn = "y_" + part;
  const std::string& path = spec.dataset_path;
  SPOT_ASSIGN_OR_RETURN(auto arrays, spec.dataset == "npz" ? ReadNpz(path, {xn, yn})
                                                           : ReadSafetensors(path, {xn, yn}));
  const HostArray& x = arrays[xn];
  const HostArray& y = arrays[yn];
  if (x.dtype != "f4" && x.dtype != "f8" && x.dtype != "u1") {
    return InvalidArgumentError(fmt::format(
        "{}: {} has dtype {}; samples must be float32, float64 or uint8", path, xn, x.dtype));
  }
  const bool regression = spec.loss == "mse";
  static const std::set<std::string> kLabelTypes = {"u1", "i1", "i2", "i4", "i8"};
  if (regression && y.dtype != "f4" && y.dtype != "f8") {
    return InvalidArgumentError(fmt::format(
        "{}: {} has dtype {}; loss mse needs float32 or float64 targets (integers are class ids: "
        "use loss cross_entropy)",
        path, yn, y.dtype));
  }
  if (!regression && !kLabelTypes.count(y.dtype)) {
    return InvalidArgumentError(fmt::format(
        "{}: {} has dtype {}; labels must be integers (int8/16/32/64, uint8)", path, yn, y.dtype));
  }
  const bool y_shape_ok = y.shape.size() == 1 || (regression && y.shape.size() == 2);
  if (x.shape.size() < 2 || !y_shape_ok || x.shape[0] != y.shape[0] || x.shape[0] == 0) {
    return InvalidArgumentError(
        fmt::format("{}: {} is [{}] and {} is [{}]; expected [n, ...] samples and {}, n > 0", path,
                    xn, fmt::join(x.shape, ", "), yn, fmt::join(y.shape, ", "),
                    regression ? "[n] or [n, k] targets" : "[n] labels"));
  }
  TensorSet t;
  t.images = TensorFromHost(x);
  t.images = x.dtype == "u1" ? t.images.to(at::kFloat).div_(255) : t.images.to(at::kFloat);
  if (t.images.dim() == 3) t.images = t.images.unsqueeze(1);
  if (regression) {
    t.labels = TensorFromHost(y).to(at::kFloat);
    return t;
  }
  t.labels = TensorFromHost(y).to(at::kLong);
  const int64_t low = t.labels.min().item<int64_t>();
  if (low < 0) {
    const int64_t at = t.labels.lt(0).nonzero()[0][0].item<int64_t>();
    return InvalidArgumentError(
        fmt::format("{}: {}[{}] is {}; class labels must be >= 0", path, yn, at, low));
  }
  return t;
}

// dataset: tokens. train.bin or val.bin, every id below the vocabulary's size.
Result<TensorSet> LoadTokenSplit(const TrainSpec& spec, Split split) {
  const std::string file = spec.dataset_path + (split == Split::kTrain ? "/train.bin" : "/val.bin");
  const int64_t vocab = spec.model == "gpt" ? spec.gpt.vocab : 0;
  SPOT_ASSIGN_OR_RETURN(std::vector<int64_t> ids,
                        ReadTokenFile(file, spec.token_dtype, vocab, spec.context + 1));
  TensorSet t;
  t.tokens = at::from_blob(ids.data(), {static_cast<int64_t>(ids.size())}, at::kLong).clone();
  t.context = spec.context;
  t.stride = spec.stride;
  return t;
}

}  // namespace

int64_t TensorSet::size() const {
  if (!tokens.defined()) return images.size(0);
  return (tokens.size(0) - context - 1) / stride + 1;
}

std::vector<int64_t> TensorSet::SampleShape() const {
  if (tokens.defined()) return {context};
  return images.sizes().slice(1).vec();
}

namespace {
// uint8 images (an image folder's) are kept as bytes and scaled when taken.
at::Tensor Scaled(at::Tensor x) {
  return x.scalar_type() == at::kByte ? x.to(at::kFloat).div_(255) : x;
}
}  // namespace

std::pair<at::Tensor, at::Tensor> TensorSet::Take(const at::Tensor& idx) const {
  if (shards) shards->EnsureRows(idx);
  if (!tokens.defined()) return {Scaled(images.index_select(0, idx)), labels.index_select(0, idx)};
  at::Tensor pos = idx.mul(stride).unsqueeze(1) + at::arange(context + 1, at::kLong).unsqueeze(0);
  at::Tensor w = tokens.index_select(0, pos.flatten()).view({idx.size(0), context + 1});
  return {w.slice(1, 0, context).contiguous(), w.slice(1, 1, context + 1).contiguous()};
}

std::pair<at::Tensor, at::Tensor> TensorSet::Range(int64_t begin, int64_t end) const {
  if (shards) shards->EnsureRange(begin, end);
  if (!tokens.defined()) return {Scaled(images.slice(0, begin, end)), labels.slice(0, begin, end)};
  return Take(at::arange(begin, end, at::kLong));
}

void TensorSet::Truncate(int64_t n) {
  if (n <= 0 || n >= size()) return;
  if (tokens.defined()) {
    tokens = tokens.slice(0, 0, (n - 1) * stride + context + 1).clone();
    return;
  }
  if (shards) {  // the shards load into the whole tensor's rows
    images = images.slice(0, 0, n);
    labels = labels.slice(0, 0, n).clone();
    return;
  }
  images = images.slice(0, 0, n).clone();
  labels = labels.slice(0, 0, n).clone();
}

at::ScalarType TorchTypeOf(const std::string& dtype) {
  static const std::map<std::string, at::ScalarType> kTypes = {
      {"f4", at::kFloat}, {"f8", at::kDouble}, {"u1", at::kByte}, {"i1", at::kChar},
      {"b1", at::kBool},  {"i2", at::kShort},  {"i4", at::kInt},  {"i8", at::kLong}};
  auto it = kTypes.find(dtype);
  return it == kTypes.end() ? at::ScalarType::Undefined : it->second;
}

at::Tensor TensorFromHost(const HostArray& a) {
  return at::from_blob(const_cast<char*>(a.data.data()), a.shape, TorchTypeOf(a.dtype)).clone();
}

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

Result<TensorSet> LoadSplit(const TrainSpec& spec, Split split, int64_t limit, bool sharded) {
  Result<TensorSet> set = [&]() -> Result<TensorSet> {
    if (spec.dataset == "tokens") return LoadTokenSplit(spec, split);
    if (spec.dataset == "images") return LoadImageFolderSplit(spec, split, sharded);
    if (spec.dataset == "csv") return LoadCsvSplit(spec, split);
    if (spec.dataset != "fashion-mnist") return LoadArraySplit(spec, split);
    SPOT_ASSIGN_OR_RETURN(ImageSet images, LoadFashionMnist(spec.dataset_path, split));
    return ToTensors(images);
  }();
  if (!set.ok()) {
    const Status& s = set.status();
    return s.code() == StatusCode::kInvalidArgument ? s.WithContext(spec.source + ": dataset.path")
                                                    : s;
  }
  TensorSet t = std::move(set).value();
  t.Truncate(limit);
  return t;
}

namespace {

std::unique_ptr<torch::optim::Optimizer> MakeGroupedOptimizer(
    const OptimizerSpec& o, std::vector<torch::optim::OptimizerParamGroup> groups) {
  if (o.type == "adam") {
    return std::make_unique<torch::optim::Adam>(std::move(groups),
                                                torch::optim::AdamOptions(o.lr)
                                                    .betas({o.beta1, o.beta2})
                                                    .eps(o.eps)
                                                    .weight_decay(o.weight_decay));
  }
  return std::make_unique<torch::optim::SGD>(std::move(groups), torch::optim::SGDOptions(o.lr)
                                                                    .momentum(o.momentum)
                                                                    .nesterov(o.nesterov)
                                                                    .weight_decay(o.weight_decay));
}

}  // namespace

std::unique_ptr<torch::optim::Optimizer> MakeOptimizer(const OptimizerSpec& o, Net& model) {
  return MakeGroupedOptimizer(o, {torch::optim::OptimizerParamGroup(model.parameters())});
}

Result<std::unique_ptr<torch::optim::Optimizer>> MakeOptimizer(const TrainSpec& spec, Net& model) {
  const auto& entries = spec.param_groups;
  std::vector<std::vector<at::Tensor>> members(entries.size() + 1);
  for (const auto& p : model.named_parameters()) {
    size_t g = 0;
    while (g < entries.size() && p.key().rfind(entries[g].prefix, 0) != 0) ++g;
    members[g].push_back(p.value());
  }
  std::vector<torch::optim::OptimizerParamGroup> groups;
  for (size_t g = 0; g < members.size(); ++g) {
    if (g < entries.size() && members[g].empty()) {
      return InvalidArgumentError(fmt::format(
          "{}: param_groups: no parameter of model {} (after earlier prefixes) starts with \"{}\"",
          spec.source, ModelName(spec), entries[g].prefix));
    }
    if (!members[g].empty()) groups.emplace_back(std::move(members[g]));
  }
  return MakeGroupedOptimizer(spec.optimizer, std::move(groups));
}

int PrepareProcess(const TrainSpec& spec) {
  // 0: every CPU this process may run on (a Slurm allocation's, a
  // container's), not the machine's count.
  int threads = spec.threads > 0 ? static_cast<int>(spec.threads) : AvailableCpus();
  at::set_num_threads(threads);
  KeepActivationBuffersInHeap();
  torch::manual_seed(static_cast<uint64_t>(spec.seed));
  return threads;
}

TrainerCounters FreshCounters(const TrainSpec& spec, int threads) {
  TrainerCounters c;
  c.seed = spec.seed;
  c.batch_size = spec.batch_size;
  c.model = ModelName(spec);
  c.optimizer = spec.optimizer.type;
  c.threads = threads;
  c.blas = BlasLibrary();
  return c;
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
  if (loss == "mse") {
    // [b, 1] outputs against [b] targets; otherwise the shapes must agree
    // (CheckLossTargets says so before training).
    const at::Tensor out =
        output.dim() == 2 && labels.dim() == 1 && output.size(1) == 1 ? output.squeeze(1) : output;
    TORCH_CHECK(out.sizes() == labels.sizes(), "loss mse: model output ", out.sizes(),
                " does not match targets ", labels.sizes());
    const double per_sample = labels.dim() > 1 ? static_cast<double>(labels[0].numel()) : 1.0;
    return at::mse_loss(out, labels, at::Reduction::Sum).div(per_sample);
  }
  if (loss == "lm") {
    const int64_t tokens_per_sample = labels.size(1);
    return at::cross_entropy_loss(output.flatten(0, 1), labels.flatten(), {}, at::Reduction::Sum)
        .div(static_cast<double>(tokens_per_sample));
  }
  return at::cross_entropy_loss(output, labels, {}, at::Reduction::Sum);
}

PrecisionScope::PrecisionScope(const std::string& precision, const std::string& device)
    : cuda_(device == "cuda") {
  const bool bf16 = precision == "bf16" || (precision == "auto" && !cuda_);
  const bool fp16 = precision == "fp16" && cuda_;
  enabled_ = bf16 || fp16;
  if (!enabled_) return;
  if (cuda_) {
    was_enabled_ = at::autocast::is_enabled();
    at::autocast::set_autocast_gpu_dtype(fp16 ? at::kHalf : at::kBFloat16);
    at::autocast::set_enabled(true);
    return;
  }
  was_enabled_ = at::autocast::is_cpu_enabled();
  at::autocast::set_autocast_cpu_dtype(at::kBFloat16);
  at::autocast::set_cpu_enabled(true);
}

PrecisionScope::~PrecisionScope() {
  if (!enabled_) return;
  if (cuda_) {
    at::autocast::set_enabled(was_enabled_);
  } else {
    at::autocast::set_cpu_enabled(was_enabled_);
  }
  if (!was_enabled_) at::autocast::clear_cache();
}

Status CheckLossTargets(const TrainSpec& spec, Net& model, const TensorSet& train) {
  if (spec.loss != "mse" || train.size() == 0) return Status::Ok();
  auto [x, y] = train.Range(0, std::min<int64_t>(2, train.size()));
  at::Tensor out;
  {
    torch::NoGradGuard no_grad;
    model.eval();  // no dropout draws, no batch-norm statistics
    out = model.forward(x.to(model.parameters()[0].device()));
    model.train();
  }
  const bool fits = out.sizes() == y.sizes() || (out.dim() == 2 && y.dim() == 1 &&
                                                 out.size(1) == 1 && out.size(0) == y.size(0));
  if (fits) return Status::Ok();
  return InvalidArgumentError(fmt::format(
      "{}: model.loss: mse compares model {}'s outputs [{}] (for {} samples) with the targets "
      "y_train [{}] of dataset.path {}: their shapes must agree ([b, 1] outputs take [b] targets)",
      spec.source, ModelName(spec), fmt::join(out.sizes(), ", "), y.size(0),
      fmt::join(y.sizes(), ", "), spec.dataset_path));
}

EvalSums EvaluateRange(Net& model, const TensorSet& test, int64_t begin, int64_t end,
                       const TrainSpec& spec) {
  const int64_t batch_size = spec.eval_batch_size;
  const std::string& loss = spec.loss;
  const at::Device device(spec.device);
  torch::NoGradGuard no_grad;
  model.eval();
  EvalSums s;
  for (int64_t i = begin; i < end; i += batch_size) {
    int64_t stop = std::min(end, i + batch_size);
    auto [host_x, host_y] = test.Range(i, stop);
    const at::Tensor x = host_x.to(device), y = host_y.to(device);
    at::Tensor out;
    {
      PrecisionScope precision(spec.precision, spec.device);
      out = model.forward(x);
    }
    out = out.to(at::kFloat);
    s.loss_sum += LossSum(loss, out, y).item<double>();
    if (loss == "mse") continue;  // regression: no accuracy
    // Classes along the last dimension; a sample's share of its positions right.
    const double positions = y.dim() > 1 ? static_cast<double>(y[0].numel()) : 1.0;
    s.correct += static_cast<double>(out.argmax(-1).eq(y).sum().item<int64_t>()) / positions;
  }
  s.count = static_cast<double>(end - begin);
  model.train();
  return s;
}

}  // namespace spot::train
