// `spot prepare-text FILE --out DIR`: a text as token files for a language
// model; `spot generate JOB.yaml`: text from the job's newest checkpoint.
#include <fmt/format.h>

#include <CLI/CLI.hpp>
#include <cstdio>
#include <iostream>
#include <iterator>
#include <optional>

#include "apps/spot/commands.h"
#include "apps/spot/exit_code.h"
#include "core/file_io.h"
#include "train/generate.h"
#include "train/token_stream.h"
#include "train/train_spec.h"

namespace spot::cli {
namespace {

int Fail(const Status& s) {
  fmt::print(stderr, "error: {}\n", s.message());
  return ExitCodeFor(s);
}

}  // namespace

CLI::App* AddPrepareTextCommand(CLI::App& app, PrepareTextArgs* args) {
  CLI::App* cmd = app.add_subcommand(
      "prepare-text",
      "Tokenize a text byte by byte (characters, for ASCII) into DIR/train.bin, DIR/val.bin "
      "(uint16 token ids, nanoGPT's layout) and DIR/vocab.json, for dataset: {name: tokens}.");
  cmd->add_option("input", args->input, "Text file, or - for standard input")->required();
  cmd->add_option("--out", args->out, "Output directory")->required();
  cmd->add_option("--val-fraction", args->val_fraction,
                  "The last fraction of the text, held out for validation")
      ->check(CLI::Range(0.0001, 0.9999))
      ->capture_default_str();
  cmd->add_option("--vocab", args->vocab,
                  "Use this vocab.json (another corpus's: fine-tuning a model trained on it) "
                  "instead of the text's own characters");
  return cmd;
}

int RunPrepareText(const PrepareTextArgs& args) {
  std::string text;
  if (args.input == "-") {
    text.assign(std::istreambuf_iterator<char>(std::cin), std::istreambuf_iterator<char>());
  } else {
    Result<std::string> read = ReadFile(args.input);
    if (!read.ok()) return Fail(read.status());
    text = std::move(read).value();
  }
  std::optional<train::Vocabulary> vocab;
  if (!args.vocab.empty()) {
    Result<train::Vocabulary> v = train::ReadVocabulary(args.vocab);
    if (!v.ok()) return Fail(v.status());
    vocab = std::move(v).value();
  }
  Result<train::PreparedText> p =
      train::PrepareText(text, args.val_fraction, args.out, vocab ? &*vocab : nullptr);
  if (!p.ok()) return Fail(p.status().WithContext(args.input));
  fmt::print("{}: {} train and {} validation tokens, vocabulary of {}\n", args.out, p->train_tokens,
             p->val_tokens, p->vocab.size());
  return kExitOk;
}

CLI::App* AddGenerateCommand(CLI::App& app, GenerateArgs* args) {
  CLI::App* cmd = app.add_subcommand(
      "generate",
      "Sample text from a language-model job's newest valid checkpoint (local tier, else "
      "durable); runs while the job trains, or after it.");
  cmd->add_option("job", args->job_path, "Job file (YAML) with model gpt or loss lm")->required();
  cmd->add_option("--prompt", args->prompt, "Text to continue (default: a new line)");
  cmd->add_option("--tokens", args->tokens, "Tokens to add")
      ->check(CLI::Range(int64_t{1}, int64_t{1} << 20))
      ->capture_default_str();
  cmd->add_option("--temperature", args->temperature, "Softmax temperature (0: greedy)")
      ->check(CLI::Range(0.0, 100.0))
      ->capture_default_str();
  cmd->add_option("--top-k", args->top_k, "Sample among the k likeliest tokens (0: all)")
      ->check(CLI::Range(int64_t{0}, int64_t{1} << 24));
  cmd->add_option("--seed", args->seed, "Sampling seed")->check(CLI::NonNegativeNumber);
  return cmd;
}

int RunGenerate(const GenerateArgs& args) {
  Result<train::TrainSpec> spec = train::LoadTrainSpec(args.job_path);
  if (!spec.ok()) return Fail(spec.status());
  Result<train::Generated> g = train::GenerateText(*spec, {.prompt = args.prompt,
                                                           .tokens = args.tokens,
                                                           .temperature = args.temperature,
                                                           .top_k = args.top_k,
                                                           .seed = args.seed});
  if (!g.ok()) return Fail(g.status());
  fmt::print(stderr, "{}: checkpoint {} (step {}, {} tier)\n", spec->name, g->version, g->step,
             g->tier);
  fmt::print("{}\n", g->text);
  return kExitOk;
}

}  // namespace spot::cli
