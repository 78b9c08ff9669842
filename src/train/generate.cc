#include "train/generate.h"

#include <ATen/ATen.h>
#include <fmt/format.h>
#include <torch/utils.h>

#include <algorithm>
#include <filesystem>
#include <limits>

#include "train/checkpointer.h"
#include "train/model.h"
#include "train/token_stream.h"
#include "train/train_setup.h"
#include "train/train_state.h"

namespace spot::train {
namespace {

// The next token after `ids` ([1, T], T <= the model's context).
int64_t NextToken(Net& model, const at::Tensor& ids, const GenerateOptions& o) {
  at::Tensor logits = model.forward(ids).select(1, ids.size(1) - 1).squeeze(0);
  if (o.temperature <= 0) return logits.argmax().item<int64_t>();
  logits = logits.div(o.temperature);
  if (o.top_k > 0 && o.top_k < logits.size(0)) {
    const double kth = std::get<0>(logits.topk(o.top_k)).min().item<double>();
    logits = logits.masked_fill(logits.lt(kth), -std::numeric_limits<float>::infinity());
  }
  return at::multinomial(logits.softmax(0), 1).item<int64_t>();
}

}  // namespace

Result<Generated> GenerateText(const TrainSpec& job, const GenerateOptions& o) {
  if (job.loss != "lm" || job.dataset != "tokens") {
    return InvalidArgumentError(
        job.source + ": not a language model (generate needs loss lm on dataset tokens)");
  }
  SPOT_ASSIGN_OR_RETURN(Vocabulary vocab, ReadVocabulary(job.dataset_path + "/vocab.json"));
  Result<std::vector<int64_t>> prompt =
      Encode(vocab, o.prompt.empty() ? std::string("\n") : o.prompt);
  if (!prompt.ok()) return prompt.status().WithContext("--prompt");
  TrainSpec spec = job;
  spec.resume = "auto";
  spec.threads = 0;
  spec.device = "cpu";  // sampling runs on the host, whatever device trained the job
  const int threads = PrepareProcess(spec);
  SPOT_ASSIGN_OR_RETURN(std::shared_ptr<Net> model, BuildModel(spec, {spec.context}));
  SPOT_ASSIGN_OR_RETURN(auto optimizer, MakeOptimizer(spec, *model));
  TrainerCounters counters = FreshCounters(spec, threads);
  const TrainRefs refs{
      model.get(), optimizer.get(), spec.optimizer.type, &counters, {spec.context}};
  std::error_code ec;
  if (!std::filesystem::exists(spec.checkpoint.dir, ec) &&
      (spec.checkpoint.durable_dir.empty() ||
       !std::filesystem::exists(spec.checkpoint.durable_dir, ec))) {
    return NotFoundError(fmt::format("{}: no checkpoint in {} yet: train the job first", job.source,
                                     spec.checkpoint.dir));
  }
  SPOT_ASSIGN_OR_RETURN(std::unique_ptr<Checkpointer> ckpt, Checkpointer::Open(spec));
  SPOT_ASSIGN_OR_RETURN(ResumeInfo found, ckpt->Resume(refs));
  if (found.version < 0) {
    return NotFoundError(fmt::format("{}: no checkpoint in {} yet: train the job first", job.source,
                                     spec.checkpoint.dir));
  }
  torch::NoGradGuard no_grad;
  model->eval();
  at::manual_seed(static_cast<uint64_t>(o.seed));
  std::vector<int64_t> ids = *prompt;
  for (int64_t i = 0; i < o.tokens; ++i) {
    const int64_t from = std::max<int64_t>(0, static_cast<int64_t>(ids.size()) - spec.context);
    at::Tensor window = at::tensor(std::vector<int64_t>(ids.begin() + from, ids.end()), at::kLong);
    ids.push_back(NextToken(*model, window.unsqueeze(0), o));
  }
  return Generated{.text = Decode(vocab, ids),
                   .step = counters.step,
                   .version = found.version,
                   .tier = found.tier};
}

}  // namespace spot::train
