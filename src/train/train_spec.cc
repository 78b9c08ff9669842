#include "train/train_spec.h"

#include <fmt/format.h>

#include <cmath>
#include <filesystem>

#include "core/spec_reader.h"
#include "train/fashion_mnist.h"
#include "train/token_stream.h"

namespace spot::train {
namespace {

namespace fs = std::filesystem;

// Upper bounds of counts of steps and epochs: far beyond any run (10^12 steps
// of a microsecond are 11 days), and far enough from 2^63 that the arithmetic
// on them (epochs x steps per epoch, sums of steps) cannot overflow.
constexpr double kMaxSteps = 1e12;
constexpr double kMaxEpochs = 1e6;

void ReadOptimizer(SpecReader& r, OptimizerSpec* o) {
  r.Enum("type", &o->type, {"sgd", "adam"});
  if (o->type == "adam") o->lr = 1e-3;  // the conventional default for Adam
  r.Double("lr", &o->lr, {.min = 0, .min_exclusive = true});
  r.Double("weight_decay", &o->weight_decay, {.min = 0});
  if (o->type == "sgd") {
    r.Double("momentum", &o->momentum, {.min = 0, .max = 1, .max_exclusive = true});
    r.Bool("nesterov", &o->nesterov);
    for (const char* k : {"beta1", "beta2", "eps"}) {
      if (r.Has(k)) r.AddError(k, "applies to adam only");
    }
  } else {
    r.Double("beta1", &o->beta1, {.min = 0, .max = 1, .max_exclusive = true});
    r.Double("beta2", &o->beta2, {.min = 0, .max = 1, .max_exclusive = true});
    r.Double("eps", &o->eps, {.min = 0, .min_exclusive = true});
    for (const char* k : {"momentum", "nesterov"}) {
      if (r.Has(k)) r.AddError(k, "applies to sgd only");
    }
  }
}

void ReadSchedule(SpecReader& r, ScheduleSpec* s) {
  r.Enum("type", &s->type, {"constant", "step", "cosine"});
  r.Int("warmup_steps", &s->warmup_steps, {.min = 0, .max = kMaxSteps});
  r.Int("step_size", &s->step_size, {.min = 1, .max = kMaxSteps});
  r.Double("gamma", &s->gamma, {.min = 0, .max = 1, .min_exclusive = true});
  r.Double("min_lr", &s->min_lr, {.min = 0});
}

void ReadCheckpoint(SpecReader& r, CheckpointSpec* c) {
  r.String("dir", &c->dir);
  r.String("durable_dir", &c->durable_dir);
  // Giving interval_steps alone means a fixed interval.
  if (r.Has("interval_steps") && !r.Has("interval")) c->interval = "steps";
  r.Enum("interval", &c->interval, {"auto", "steps"});
  r.Int("interval_steps", &c->interval_steps, {.min = 1, .max = kMaxSteps});
  r.Double("mtbf_hours", &c->mtbf_hours, {.min = 0, .min_exclusive = true});
  r.Double("max_overhead", &c->max_overhead, {.min = 0, .max = 1, .min_exclusive = true});
  r.Int("keep", &c->keep, {.min = 1, .max = 1000});
  r.Int("keep_every", &c->keep_every, {.min = 0, .max = kMaxSteps});
  r.String("keep_best", &c->keep_best);
  r.Enum("codec", &c->codec, {"raw", "shuffle-zstd", "planes-zstd"});
  r.Enum("delta", &c->delta, {"none", "sub", "xor", "q8"});
  r.Bool("q8_optimizer", &c->q8_optimizer);
  if (c->q8_optimizer && c->delta != "q8") r.AddError("q8_optimizer", "applies to delta: q8 only");
  r.Int("full_every", &c->full_every, {.min = 1, .max = 1000});
  r.Int("durable_max_chain", &c->durable_max_chain, {.min = 0, .max = 1000});
  r.Bool("async", &c->async);
  r.Double("flush_deadline_s", &c->flush_deadline_s, {.min = 0, .min_exclusive = true});
  if (!c->keep_best.empty() && c->keep_best != "test_accuracy" && c->keep_best != "test_loss") {
    r.AddError("keep_best", "must be test_accuracy or test_loss (got " + c->keep_best + ")");
  }
  if (!c->durable_dir.empty() && c->durable_dir == c->dir) {
    r.AddError("durable_dir", "must differ from checkpoint.dir");
  }
}

void ReadRollback(SpecReader& r, RollbackSpec* b) {
  r.Bool("enabled", &b->enabled);
  r.Double("spike_factor", &b->spike_factor, {.min = 1, .min_exclusive = true});
  r.Int("window", &b->window, {.min = 1, .max = kMaxSteps});
  r.Int("warmup_steps", &b->warmup_steps, {.min = 0, .max = kMaxSteps});
  r.Int("skip_batches", &b->skip_batches, {.min = 1, .max = 1000});
  r.Double("lr_factor", &b->lr_factor, {.min = 0, .max = 1, .min_exclusive = true});
  r.Int("max_rollbacks", &b->max_rollbacks, {.min = 0, .max = kMaxSteps});
}

void ReadDistributed(SpecReader& r, DistributedSpec* d) {
  r.Int("min_workers", &d->min_workers, {.min = 1, .max = 4096});
  r.Int("max_workers", &d->max_workers, {.min = 1, .max = 4096});
  if (d->max_workers < d->min_workers) r.AddError("max_workers", "must be >= min_workers");
  r.Double("join_window_s", &d->join_window_s, {.min = 0, .max = 3600});
  r.Double("last_call_s", &d->last_call_s, {.min = 0, .max = 3600});
  r.Double("rendezvous_timeout_s", &d->rendezvous_timeout_s,
           {.min = 0, .max = 86400, .min_exclusive = true});
  r.Double("collective_timeout_s", &d->collective_timeout_s,
           {.min = 0, .max = 3600, .min_exclusive = true});
  r.Double("liveness_ttl_s", &d->liveness_ttl_s, {.min = 1, .max = 3600});
  r.Enum("compression", &d->compression, {"none", "fp16", "bf16", "powersgd", "topk"});
  r.Int("powersgd_rank", &d->powersgd_rank, {.min = 1, .max = 1024});
  r.Double("topk_ratio", &d->topk_ratio, {.min = 0, .max = 1, .min_exclusive = true});
  r.Int("compression_warmup_steps", &d->compression_warmup_steps, {.min = 0, .max = kMaxSteps});
  r.Bool("balance", &d->balance);
  r.Int("accumulation_steps", &d->accumulation_steps, {.min = 1, .max = 4096});
  r.Double("straggler_factor", &d->straggler_factor,
           {.min = 1, .max = 1000, .min_exclusive = true});
  r.Double("straggler_seconds", &d->straggler_seconds, {.min = 0, .max = 86400});
}

void ReadInit(SpecReader& r, InitSpec* init) {
  r.String("weights", &init->weights);
  r.StringList("skip", &init->skip);
  r.Bool("strict", &init->strict);
  if (r.IsMapping("rename")) {
    SpecReader& m = r.Section("rename");
    for (const std::string& from : m.Keys()) {
      std::string to;
      m.String(from, &to);
      init->rename.emplace_back(from, to);
    }
  } else if (r.Has("rename")) {
    r.AddError("rename", "must map old name prefixes to new ones, e.g. {\"backbone.\": \"\"}");
  }
  if (init->weights.empty()) return;
  std::error_code ec;
  if (!fs::is_regular_file(init->weights, ec)) {
    r.AddError("weights",
               init->weights + (fs::exists(init->weights, ec)
                                    ? ": not a regular file"
                                    : ": no such file (spot ckpt export ID --out FILE)"));
  }
}

void ReadGpt(SpecReader& m, GptSpec* g) {
  m.Int("layers", &g->layers, {.min = 1, .max = 64});
  m.Int("heads", &g->heads, {.min = 1, .max = 64});
  m.Int("width", &g->width, {.min = 8, .max = 8192});
  m.Int("context", &g->context, {.min = 2, .max = 65536});
  m.Int("vocab", &g->vocab, {.min = 0, .max = 1 << 24});
  m.Double("dropout", &g->dropout, {.min = 0, .max = 1, .max_exclusive = true});
  if (g->width % g->heads != 0) m.AddError("heads", "must divide width");
}

void ReadTorchScript(SpecReader& m, TrainSpec* s) {
  s->model = "torchscript";
  m.String("torchscript", &s->model_file, /*required=*/true);
  m.Enum("loss", &s->loss, {"cross_entropy", "nll", "lm", "mse"});
  if (s->model_file.empty()) return;
  std::error_code ec;
  const fs::path p = fs::absolute(s->model_file, ec);
  if (!ec) s->model_file = p.lexically_normal().string();
  if (!fs::is_regular_file(s->model_file, ec)) {
    m.AddError("torchscript", s->model_file + (fs::exists(s->model_file, ec)
                                                   ? ": not a regular file"
                                                   : ": no such file (torch.jit.script(m).save)"));
  }
}

// `model: cnn|mlp`, `model: {name: gpt, layers: ...}`, or
// `model: {torchscript: FILE, loss: ...}` for a module the user scripted or
// traced in Python.
void ReadModel(SpecReader& top, TrainSpec* s) {
  if (!top.IsMapping("model")) {
    top.Enum("model", &s->model, {"cnn", "mlp", "gpt"}, /*required=*/true);
    if (s->model == "gpt") top.AddError("model", "gpt takes its settings: model: {name: gpt}");
    return;
  }
  SpecReader& m = top.Section("model");
  if (m.Has("torchscript")) return ReadTorchScript(m, s);
  m.Enum("name", &s->model, {"cnn", "mlp", "gpt"}, /*required=*/true);
  if (s->model != "gpt") return m.Enum("loss", &s->loss, {"cross_entropy", "mse"});
  s->loss = "lm";
  ReadGpt(m, &s->gpt);
}

void ReadParamGroups(SpecReader& top, std::vector<ParamGroupSpec>* out) {
  if (!top.Has("param_groups")) return;
  if (!top.IsMapping("param_groups")) {
    top.AddError("param_groups",
                 "must map parameter-name prefixes to settings, e.g. {\"transformer.h.0.\": "
                 "{lr_scale: 0.1, frozen_until: 200}}");
    return;
  }
  SpecReader& groups = top.Section("param_groups");
  for (const std::string& prefix : groups.Keys()) {
    ParamGroupSpec g{.prefix = prefix};
    if (!groups.IsMapping(prefix)) {
      groups.AddError(prefix, "must be a mapping: {lr_scale: X, frozen_until: STEP}");
      continue;
    }
    SpecReader& r = groups.Section(prefix);
    r.Double("lr_scale", &g.lr_scale, {.min = 0, .max = 1000, .min_exclusive = true});
    r.Int("frozen_until", &g.frozen_until, {.min = -1, .max = kMaxSteps});
    out->push_back(std::move(g));
  }
}

// fp16 needs a GPU's half-precision units (LibTorch 1.13's CPU has no half
// matrix products) and dynamic loss scaling; bf16 has float32's range and
// needs none. auto measures each layer under CPU bf16 autocast, so it is for
// the CPU and for the built-in models, whose layers it can reach.
void ReadPrecision(SpecReader& top, TrainSpec* s) {
  top.Enum("device", &s->device, {"cpu", "cuda"});
  top.Enum("precision", &s->precision, {"fp32", "bf16", "fp16", "auto"});
  if (s->precision == "fp16" && s->device != "cuda") {
    top.AddError("precision",
                 "fp16 needs a GPU (device: cuda): LibTorch's CPU has no half-precision matrix "
                 "products; on CPUs use bf16 or auto");
  }
  if (s->precision == "auto" && s->device != "cpu") {
    top.AddError("precision", "auto measures layers under CPU bf16 autocast (device: cpu); on " +
                                  s->device + " use bf16 or fp16");
  }
  if (s->precision == "auto" && s->model == "torchscript") {
    top.AddError(
        "precision",
        "auto selects the precision of each layer of the built-in models (cnn, mlp, "
        "gpt); a TorchScript module's layers cannot be reached from C++: use bf16 or fp32");
  }
  SpecReader& o = top.Section("precision_options");
  PrecisionOptions& p = s->precision_options;
  o.Double("init_scale", &p.init_scale, {.min = 1, .max = 18446744073709551616.0});
  o.Double("growth_factor", &p.growth_factor, {.min = 1, .max = 1024, .min_exclusive = true});
  o.Double("backoff_factor", &p.backoff_factor,
           {.min = 0, .max = 1, .min_exclusive = true, .max_exclusive = true});
  o.Int("growth_interval", &p.growth_interval, {.min = 1, .max = 1 << 30});
  o.Double("budget", &p.budget, {.min = 0, .max = 1, .min_exclusive = true});
  o.Int("probe_batches", &p.probe_batches, {.min = 1, .max = 64});
  const bool scaling = o.Has("init_scale") || o.Has("growth_factor") || o.Has("backoff_factor") ||
                       o.Has("growth_interval");
  if (scaling && s->precision != "fp16") {
    o.AddError(o.Has("init_scale") ? "init_scale" : "growth_factor",
               "loss scaling applies to precision: fp16 only");
  }
  if ((o.Has("budget") || o.Has("probe_batches")) && s->precision != "auto") {
    o.AddError(o.Has("budget") ? "budget" : "probe_batches", "applies to precision: auto only");
  }
}

// loss: mse regresses float targets, which only the array files carry (and
// which have no classes to sample by or to be accurate about).
void CheckRegression(SpecReader& top, SpecReader& data, const TrainSpec& s) {
  if (s.loss != "mse") return;
  if (s.dataset != "npz" && s.dataset != "safetensors") {
    data.AddError("name",
                  "loss mse needs float targets: npz or safetensors with float32/float64 "
                  "y_train and y_test (" +
                      s.dataset + " has class labels)");
  }
  if (s.sampling != "shuffle") data.AddError("sampling", "needs class labels; loss mse has none");
  if (s.checkpoint.keep_best == "test_accuracy") {
    top.Section("checkpoint").AddError("keep_best", "loss mse reports no accuracy: use test_loss");
  }
}

// model.vocab from the data set's vocab.json.
void ResolveVocab(SpecReader& data, TrainSpec* s) {
  const std::string file = s->dataset_path + "/vocab.json";
  std::error_code ec;
  if (!fs::exists(file, ec)) {
    data.AddError("path", s->dataset_path +
                              ": no vocab.json: give model.vocab, or prepare the text with "
                              "spot prepare-text");
    return;
  }
  Result<Vocabulary> v = ReadVocabulary(file);
  if (!v.ok()) return data.AddError("path", v.status().message());
  s->gpt.vocab = v->size();
}

void ReadAugment(SpecReader& a, AugmentSpec* s) {
  a.Int("crop_padding", &s->crop_padding, {.min = 0, .max = 64});
  a.Bool("flip", &s->flip);
  a.Double("brightness", &s->brightness, {.min = 0, .max = 1});
  a.Double("contrast", &s->contrast, {.min = 0, .max = 1});
  a.Double("saturation", &s->saturation, {.min = 0, .max = 1});
}

// `cache: true|false` or `cache: {shard_size, memory_mb, local, durable}`
// (durable: none keeps the durable tier out).
void ReadDataCache(SpecReader& data, DataCacheSpec* c) {
  if (!data.Has("cache")) return;
  if (!data.IsMapping("cache")) {
    data.Bool("cache", &c->enabled);
    return;
  }
  SpecReader& r = data.Section("cache");
  r.Bool("enabled", &c->enabled);
  r.Int("shard_size", &c->shard_size, {.min = 1, .max = 1 << 20});
  r.Int("memory_mb", &c->memory_mb, {.min = 0, .max = 1 << 20});
  r.String("local", &c->local);
  r.String("durable", &c->durable);
  r.Enum("hold", &c->hold, {"whole", "own"});
  if (!c->local.empty() && c->local == c->durable) r.AddError("durable", "must differ from local");
}

// dataset: images (an image folder) and csv (a table): directories.
void ReadFolderData(SpecReader& data, TrainSpec* s) {
  const bool images = s->dataset == "images";
  if (images) {
    ReadDataCache(data, &s->cache);
    data.Int("image_size", &s->image_size, {.min = 4, .max = 1024});
    data.Int("channels", &s->channels, {.min = 1, .max = 3});
    if (s->channels == 2) data.AddError("channels", "must be 1 (grey) or 3 (RGB)");
  } else {
    data.String("label", &s->label_column);
  }
  std::error_code ec;
  const fs::path dir = s->dataset_path;
  if (!fs::is_directory(dir, ec)) {
    data.AddError("path", s->dataset_path + (images ? ": not a directory (train/<class>/<image>)"
                                                    : ": not a directory (train.csv, test.csv)"));
    return;
  }
  if (images) {
    if (!fs::is_directory(dir / "train", ec))
      data.AddError("path", s->dataset_path + ": no train/");
    if (!fs::is_directory(dir / "test", ec) && !fs::is_directory(dir / "val", ec)) {
      data.AddError("path", s->dataset_path + ": no test/ (or val/)");
    }
    return;
  }
  for (const char* f : {"train.csv", "test.csv"}) {
    if (!fs::is_regular_file(dir / f, ec)) data.AddError("path", s->dataset_path + ": no " + f);
  }
}

// dataset: tokens. A directory holding train.bin and val.bin (flat token ids,
// as nanoGPT's prepare scripts write them) and, from `spot prepare-text`,
// vocab.json.
void ReadTokens(SpecReader& data, TrainSpec* s) {
  data.Enum("dtype", &s->token_dtype, {"uint16", "uint32"});
  data.Int("context", &s->context, {.min = 0, .max = 65536});
  data.Int("stride", &s->stride, {.min = 0, .max = 1 << 30});
  if (s->context == 0 && s->model == "gpt") s->context = s->gpt.context;
  if (s->context == 0) data.AddError("context", "give the window length of a sample (tokens)");
  if (s->stride == 0) s->stride = s->context;
  if (s->model == "gpt" && s->context > s->gpt.context) {
    data.AddError("context", "is longer than model.context");
  }
  if (s->loss != "lm") data.AddError("name", "tokens train language models: loss lm (model gpt)");
  std::error_code ec;
  if (!fs::is_directory(s->dataset_path, ec)) {
    data.AddError("path", s->dataset_path + ": not a directory (train.bin, val.bin)");
    return;
  }
  for (const char* f : {"train.bin", "val.bin"}) {
    if (!fs::is_regular_file(fs::path(s->dataset_path) / f, ec)) {
      data.AddError("path", s->dataset_path + ": no " + f);
    }
  }
}

}  // namespace

void ReadTrainSpecFields(SpecReader& top, TrainSpec* out) {
  TrainSpec& s = *out;
  s.source = top.file();
  top.String("name", &s.name);
  ReadModel(top, &s);
  SpecReader& data = top.Section("dataset");
  data.Enum("name", &s.dataset, {"fashion-mnist", "npz", "safetensors", "tokens", "images", "csv"});
  if (s.dataset != "fashion-mnist" && !data.Has("path")) {
    const std::string what = s.dataset == "tokens"   ? "the directory of train.bin and val.bin"
                             : s.dataset == "images" ? "the directory of train/ and test/"
                             : s.dataset == "csv"    ? "the directory of train.csv and test.csv"
                                                     : "the file's path (x_train, y_train, ...)";
    data.AddError("path", "name: " + s.dataset + " needs " + what);
  }
  data.String("path", &s.dataset_path);
  if (s.dataset == "tokens") ReadTokens(data, &s);
  if (s.dataset == "images" || s.dataset == "csv") ReadFolderData(data, &s);
  if (s.dataset != "images" && data.Has("cache")) {
    data.AddError("cache", "keeps decoded images: only name: images has one");
  }
  ReadAugment(data.Section("augment"), &s.augment);
  data.Enum("prefetch", &s.prefetch, {"auto", "true", "false"});
  data.Enum("sampling", &s.sampling, {"shuffle", "stratified", "balanced"});
  if (s.sampling != "shuffle" && s.dataset == "tokens") {
    data.AddError("sampling", "needs class labels; token windows have none");
  }
  if (s.sampling != "shuffle" && s.cache.hold == "own" && s.dataset == "images") {
    data.AddError("sampling",
                  "cache.hold: own deals each batch from the workers' shards; only shuffle");
  }
  data.Int("train_limit", &s.train_limit, {.min = 0});
  data.Int("test_limit", &s.test_limit, {.min = 0});
  top.Int("batch_size", &s.batch_size, {.min = 1, .max = 60000}, /*required=*/true);
  top.Int("eval_batch_size", &s.eval_batch_size, {.min = 1});
  top.Int("eval_every", &s.eval_every, {.min = 0, .max = kMaxSteps});
  top.Int("epochs", &s.epochs, {.min = 0, .max = kMaxEpochs});
  top.Int("steps", &s.steps, {.min = 0, .max = kMaxSteps});
  top.Int("seed", &s.seed, {.min = 0});
  top.Int("threads", &s.threads, {.min = 0, .max = 256});
  ReadPrecision(top, &s);
  top.Enum("resume", &s.resume, {"auto", "never"});
  top.String("output_dir", &s.output_dir);
  ReadOptimizer(top.Section("optimizer", /*required=*/true), &s.optimizer);
  ReadSchedule(top.Section("schedule"), &s.schedule);
  ReadCheckpoint(top.Section("checkpoint"), &s.checkpoint);
  ReadRollback(top.Section("rollback"), &s.rollback);
  ReadDistributed(top.Section("distributed"), &s.distributed);
  ReadInit(top.Section("init"), &s.init);
  ReadParamGroups(top, &s.param_groups);
  SpecReader& faults = top.Section("faults");
  faults.Int("nan_loss_at_step", &s.faults.nan_loss_at_step, {.min = 0, .max = kMaxSteps});
  faults.Int("spike_loss_at_step", &s.faults.spike_loss_at_step, {.min = 0, .max = kMaxSteps});

  if (s.epochs == 0 && s.steps == 0) {
    top.AddError("epochs", "give epochs or steps (or both; training stops at the first reached)");
  }
  if (s.name.empty()) top.AddError("name", "must not be empty");
  if (s.output_dir.empty()) s.output_dir = "runs/" + s.name;
  if (s.checkpoint.dir.empty()) s.checkpoint.dir = s.output_dir + "/checkpoints";
  if (s.model == "gpt" && s.dataset != "tokens") {
    data.AddError("name", "model gpt trains on token ids: name: tokens");
  }
  if (s.model == "gpt" && s.gpt.vocab == 0) ResolveVocab(data, &s);
  CheckRegression(top, data, s);
  std::error_code ec;
  if (s.dataset == "tokens" || s.dataset == "images" || s.dataset == "csv") return;
  if (s.dataset != "fashion-mnist") {
    if (!fs::is_regular_file(s.dataset_path, ec)) {
      data.AddError(
          "path", s.dataset_path +
                      (fs::exists(s.dataset_path, ec) ? ": not a regular file" : ": no such file"));
    }
    return;
  }
  std::string missing = MissingFashionMnistFiles(s.dataset_path);
  if (!missing.empty()) {
    data.AddError("path", s.dataset_path + ": missing " + missing +
                              " (install Debian's dataset-fashion-mnist)");
  }
}

std::string EvalText(const std::string& loss, double accuracy, double mean_loss) {
  if (loss == "mse") return fmt::format("test mse {:.6g}", mean_loss);
  if (loss != "lm") {
    return fmt::format("test accuracy {:.2f}%, test loss {:.4f}", accuracy * 100, mean_loss);
  }
  return fmt::format("val loss {:.4f}, perplexity {:.2f}, token accuracy {:.1f}%", mean_loss,
                     std::exp(mean_loss), accuracy * 100);
}

Result<TrainSpec> ParseTrainSpec(const std::string& yaml, const std::string& file_name) {
  SPOT_ASSIGN_OR_RETURN(SpecReader top, SpecReader::FromString(yaml, file_name));
  TrainSpec s;
  ReadTrainSpecFields(top, &s);
  SPOT_RETURN_IF_ERROR(top.Finish());
  return s;
}

Result<TrainSpec> LoadTrainSpec(const std::string& path) {
  SPOT_ASSIGN_OR_RETURN(std::string text, ReadSpecFile(path));
  return ParseTrainSpec(text, path);
}

}  // namespace spot::train
