// TrainSpec: the training section of a job, read from YAML (see
// docs/job-spec.md). Each field's meaning, default and bounds are declared once
// in train_spec.cc, where the reader checks them.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "core/spec_reader.h"
#include "core/status.h"

namespace spot::train {

struct OptimizerSpec {
  std::string type = "sgd";   // sgd | adam
  double lr = 0.01;           // > 0
  double momentum = 0.9;      // sgd only, [0, 1)
  bool nesterov = false;      // sgd only
  double beta1 = 0.9;         // adam only, [0, 1)
  double beta2 = 0.999;       // adam only, [0, 1)
  double eps = 1e-8;          // adam only, > 0
  double weight_decay = 0.0;  // >= 0
};

struct ScheduleSpec {
  std::string type = "constant";  // constant | step | cosine
  int64_t warmup_steps = 0;       // linear warm-up from 0 (step and cosine), >= 0
  int64_t step_size = 1000;       // step: multiply by gamma every step_size steps, >= 1
  double gamma = 0.1;             // step: factor, (0, 1]
  double min_lr = 0.0;            // cosine: floor, >= 0
};

struct CheckpointSpec {
  std::string dir;                    // local tier; default: <output_dir>/checkpoints
  std::string durable_dir;            // durable tier, replicated in the background; "" = none
  std::string interval = "auto";      // auto (Young/Daly, capped by max_overhead) | steps
  int64_t interval_steps = 500;       // interval: steps; save every N optimizer steps (>= 1)
  double mtbf_hours = 1.0;            // interval: auto; expected time between preemptions
  double max_overhead = 0.01;         // interval: auto; cap on the fraction of time spent saving
  int64_t keep = 3;                   // versions kept (the last N), >= 1
  int64_t keep_every = 0;             // also keep every N-th version (0 = off)
  std::string keep_best;              // also keep the best version by this metric ("" = off)
  std::string codec = "planes-zstd";  // full versions: raw | shuffle-zstd | planes-zstd
  std::string delta = "sub";          // none | sub | xor | q8 (lossy, off by default)
  bool q8_optimizer = false;          // delta: q8; also quantize optimizer state
  int64_t full_every = 8;             // a full version at least every N versions, >= 1
  // The deepest delta chain a version may sit on in the durable tier, >= 0:
  // deeper, its durable copy is written in full in the background. A restart
  // with no survivor decodes the chain it restores from the durable tier
  // (each delta about as costly as a full version), so the default 1 keeps
  // it to a full version and at most one delta, at the cost of re-encoding
  // every other delta on the replicator (0: every one).
  int64_t durable_max_chain = 1;
  bool async = true;             // write in the background; false: training waits
  double flush_deadline_s = 25;  // on SIGTERM: time allowed to finish saving
};

// Automatic rollback on divergence.
struct RollbackSpec {
  bool enabled = true;
  double spike_factor = 5.0;   // a loss above factor x its moving average is a spike (> 1)
  int64_t window = 50;         // moving average span in steps (EMA), >= 1
  int64_t warmup_steps = 100;  // steps observed before spikes are judged, >= 0
  int64_t skip_batches = 1;    // batches skipped from the one that diverged, >= 1
  double lr_factor = 1.0;      // learning rate multiplied by this after each rollback, (0, 1]
  int64_t max_rollbacks = 5;   // then give up, >= 0
};

// Faults injected on purpose (tests, demos of rollback).
struct FaultSpec {
  int64_t nan_loss_at_step = 0;    // the loss of the batch of this step (1-based) becomes NaN
  int64_t spike_loss_at_step = 0;  // the loss of the batch of this step is multiplied by 1000
};

// Elastic data parallelism (`spot worker`, `spot train --nproc`). A
// single-process `spot train` is one worker: only accumulation_steps applies.
struct DistributedSpec {
  int64_t min_workers = 1;               // a generation needs at least this many, >= 1
  int64_t max_workers = 64;              // and holds at most this many, >= min_workers
  double join_window_s = 0.5;            // the first generation waits this long for more workers
  double last_call_s = 5;                // a re-forming generation waits at most this long for a
                                         // live straggler
  double rendezvous_timeout_s = 120;     // a worker gives up joining after this long
  double collective_timeout_s = 10;      // every collective fails after this long (> 0)
  double liveness_ttl_s = 3;             // a worker silent this long counts as dead (>= 1)
  std::string compression = "none";      // none | fp16 | bf16 | powersgd | topk
  int64_t powersgd_rank = 4;             // powersgd: rank of the approximation, >= 1
  double topk_ratio = 0.01;              // topk: fraction of gradient entries sent, (0, 1]
  int64_t compression_warmup_steps = 0;  // powersgd/topk: plain all-reduce for the first N
                                         // steps of each generation, >= 0
  bool balance = false;                  // per-worker batch in proportion to measured throughput
                                         // (timing then shapes the split: runs are not repeatable)
  int64_t accumulation_steps = 1;  // micro-batches per worker per step (gradients summed), >= 1
  // A worker whose compute throughput stays below the median's 1/factor for
  // this long is flagged as a straggler (dist/straggler.h).
  double straggler_factor = 2;
  double straggler_seconds = 30;
};

// Pretrained weights a fresh run starts from (fine-tuning); a resume restores
// its checkpoint instead.
struct InitSpec {
  std::string weights;  // safetensors (e.g. `spot ckpt export`) or torch.save state dict; "" = none
  // Name prefixes of the file's tensors replaced before matching: {"backbone.": ""}.
  std::vector<std::pair<std::string, std::string>> rename;
  std::vector<std::string>
      skip;            // prefixes of the model's tensors left as initialized (a new head)
  bool strict = true;  // a model tensor with no match, or an unused file tensor, is an error
};

// dataset.augment: random transformations of training images ([b, C, H, W]),
// drawn per sample from (seed, epoch, its position in the epoch's order): an
// epoch's augmented batch is the same in every run and after every resume.
struct AugmentSpec {
  int64_t crop_padding = 0;  // random crop of the image padded by this many zero pixels, [0, 64]
  bool flip = false;         // random horizontal flip
  double brightness = 0;     // color jitter: a factor from [1 - x, 1 + x], [0, 1]
  double contrast = 0;       // likewise, around the image's mean
  double saturation = 0;     // likewise, around its grey (3 channels only)
  bool enabled() const {
    return crop_padding > 0 || flip || brightness > 0 || contrast > 0 || saturation > 0;
  }
};

// `dataset.cache` (images): the decoded, resized images kept in shards in
// memory, on this machine's disk and in the durable tier (data_cache.h), so a
// worker that loads the data set again, or a replacement worker with an
// empty disk, reads them instead of decoding every file. `cache: false` turns
// it off; `cache: true` (the default for images) takes the defaults below.
struct DataCacheSpec {
  bool enabled = true;
  int64_t shard_size = 256;  // images per shard, [1, 1048576]
  int64_t memory_mb = 0;     // the process's memory tier, [0, 1048576]; 0 = off
  std::string local;         // local tier; default: <checkpoint.dir>/data-cache
  // Durable tier; default: <checkpoint.durable_dir>/data-cache (none without
  // one); "none": no durable tier.
  std::string durable;
  // What an elastic worker holds: "whole" loads the whole split at its start
  // (every shard, from the nearest tier); "own" only the shards it owns in
  // its generation (rendezvous hashing of the members' ids), training on
  // their samples alone: 1/W of the memory and the load, and a membership
  // change moves only the shards of the member that left or joined, at the
  // price of parts of unequal size (docs/elastic.md). Ignored by one process.
  std::string hold = "whole";
};

// One entry of `param_groups: {PREFIX: {lr_scale, frozen_until}}`: the
// parameters whose names start with PREFIX (and no earlier entry's) form an
// optimizer group of their own (fine-tuning: gradual unfreezing, smaller
// learning rates for pretrained layers).
struct ParamGroupSpec {
  std::string prefix;
  double lr_scale = 1.0;     // the scheduled learning rate times this, > 0
  int64_t frozen_until = 0;  // no training before this step; -1 = frozen for the whole run
  bool FrozenAt(int64_t step) const { return frozen_until < 0 || step < frozen_until; }
};

// `model: {name: gpt, ...}`: a decoder-only Transformer (GPT-2's layout, as
// nanoGPT writes it) over token ids; its loss is lm.
struct GptSpec {
  int64_t layers = 4;     // blocks, [1, 64]
  int64_t heads = 4;      // attention heads, [1, 64]; divide width
  int64_t width = 128;    // embedding width, [8, 8192]
  int64_t context = 128;  // longest sequence it reads, [2, 65536]
  int64_t vocab = 0;      // token ids [0, vocab); 0: the data set's vocab.json
  double dropout = 0.0;   // [0, 1)
};

// precision_options: dynamic loss scaling (precision: fp16, as PyTorch's
// GradScaler) and the per-layer selection of precision: auto.
struct PrecisionOptions {
  double init_scale = 65536;       // fp16: the first loss scale (2^16), [1, 2^64]
  double growth_factor = 2;        // fp16: scale times this after growth_interval clean steps, > 1
  double backoff_factor = 0.5;     // fp16: scale times this when a gradient overflows, (0, 1)
  int64_t growth_interval = 2000;  // fp16: clean steps before the scale grows, >= 1
  double budget = 1e-2;            // auto: a layer whose bf16 output's relative error exceeds
                                   // this stays float32, (0, 1]
  int64_t probe_batches = 4;       // auto: training batches measured before the first step, [1, 64]
};

struct TrainSpec {
  std::string source;          // the file this came from, for messages
  std::string name = "train";  // job name
  std::string model = "cnn";   // cnn | mlp | gpt | torchscript (model: {torchscript: FILE})
  std::string model_file;      // torchscript: the scripted or traced module, absolute
  GptSpec gpt;                 // model: {name: gpt}
  // Of the model's output: cross_entropy (logits [b, classes]) | nll
  // (log-probabilities) | lm (next-token logits [b, T, vocab], mean over tokens)
  // | mse (regression: outputs against float targets [b] or [b, k]).
  std::string loss = "cross_entropy";
  // fashion-mnist | npz | safetensors (dataset.path: FILE) | tokens
  // (dataset.path: a directory with train.bin and val.bin, as nanoGPT writes them)
  // | images (DIR/train/<class>/*.png|jpg, DIR/test/...) | csv (DIR/train.csv, DIR/test.csv)
  std::string dataset = "fashion-mnist";
  std::string dataset_path = "/usr/share/datasets/fashion-mnist";
  std::string token_dtype = "uint16";  // tokens: the files' element type, uint16 | uint32
  int64_t context = 0;                 // tokens: window length; 0 = model.context (gpt)
  int64_t stride = 0;                  // tokens: offset between windows; 0 = context
  int64_t image_size = 32;             // images: resized to image_size x image_size, [4, 1024]
  int64_t channels = 3;                // images: 1 (grey) | 3 (RGB)
  std::string label_column = "label";  // csv: the class column; the others are features
  AugmentSpec augment;                 // training images only
  DataCacheSpec cache;                 // images: decoded shards in memory, on disk, durable
  // Prepare the next batch while a step computes: true | false | auto (true
  // on device cuda, whose host is idle while the GPU computes; false on CPUs,
  // where the step's threads already use the cores: see docs/benchmarks.md).
  std::string prefetch = "auto";
  bool PrefetchOn() const { return prefetch == "true" || (prefetch == "auto" && device == "cuda"); }
  std::string sampling = "shuffle";    // shuffle | stratified | balanced (by class; sampler.h)
  int64_t train_limit = 0;             // use only the first N training images; 0 = all
  int64_t test_limit = 0;              // evaluate on the first N test images; 0 = all
  int64_t batch_size = 64;             // >= 1
  int64_t eval_batch_size = 1000;      // >= 1
  int64_t eval_every = 0;              // also evaluate every N optimizer steps; 0 = epoch ends only
  int64_t epochs = 0;                  // epochs to train; 0 = bounded by steps only
  int64_t steps = 0;                   // optimizer steps; 0 = bounded by epochs only
  int64_t seed = 0;                    // data order, initial weights, dropout
  int64_t threads = 0;                 // intra-op threads; 0 = the number of cores
  std::string precision = "fp32";      // of forward passes: fp32 | bf16 | fp16 (cuda) | auto (cpu)
  PrecisionOptions precision_options;  // loss scaling (fp16), layer selection (auto)
  std::string device = "cpu";          // cpu | cuda (a LibTorch built with CUDA, a GPU)
  std::string resume = "auto";         // auto | never
  std::string output_dir;              // default: runs/<name>
  OptimizerSpec optimizer;
  ScheduleSpec schedule;
  CheckpointSpec checkpoint;
  RollbackSpec rollback;
  FaultSpec faults;
  DistributedSpec distributed;
  InitSpec init;
  std::vector<ParamGroupSpec> param_groups;  // in file order; the rest: lr_scale 1, trained
};

// How an evaluation reads in logs: "test accuracy 91.23%, test loss 0.2511",
// for loss lm "val loss 1.4821, perplexity 4.40, token accuracy 55.1%", for
// loss mse "test mse 0.01234" (no accuracy).
std::string EvalText(const std::string& loss, double accuracy, double mean_loss);

// Reads and validates a job file. InvalidArgument naming file, line and field
// for every problem, including dataset files that are missing.
Result<TrainSpec> LoadTrainSpec(const std::string& path);
Result<TrainSpec> ParseTrainSpec(const std::string& yaml, const std::string& file_name);
// Reads the fields of a training section into *out (defaults where absent),
// recording problems in the reader; the caller calls Finish(). Used for a
// `spot run` job's `train:` section.
void ReadTrainSpecFields(SpecReader& section, TrainSpec* out);

}  // namespace spot::train
