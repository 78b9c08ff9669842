// Token streams for language models: flat files of token ids with no header
// (little-endian uint16 or uint32), as nanoGPT's prepare scripts write
// train.bin and val.bin, and the vocabulary `spot prepare-text` writes beside
// them (vocab.json: {"kind": "bytes", "tokens": [10, 32, 33, ...]}, token id i
// standing for byte tokens[i]: a character-level tokenizer for ASCII text,
// byte-level for any other). LibTorch-free.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"

namespace spot::train {

struct Vocabulary {
  std::vector<uint8_t> bytes;  // token id -> the byte it stands for
  int64_t size() const { return static_cast<int64_t>(bytes.size()); }
};

// The vocabulary of a text: its distinct bytes, in byte order.
Vocabulary VocabularyOf(std::string_view text);
// InvalidArgument naming the file: not JSON, another kind, a token that is no
// byte or repeats.
Result<Vocabulary> ReadVocabulary(const std::string& path);
Status WriteVocabulary(const Vocabulary& v, const std::string& path);

// InvalidArgument naming the first byte (and its offset) the vocabulary lacks.
Result<std::vector<int64_t>> Encode(const Vocabulary& v, std::string_view text);
// Ids outside the vocabulary decode as '?'.
std::string Decode(const Vocabulary& v, const std::vector<int64_t>& ids);

// Reads a token file of `dtype` (uint16 | uint32). InvalidArgument naming
// the file: a size that is not a whole number of tokens, fewer than
// `min_tokens`, or (vocab > 0) the first token id >= vocab and its index.
Result<std::vector<int64_t>> ReadTokenFile(const std::string& path, const std::string& dtype,
                                           int64_t vocab, int64_t min_tokens);
// Written crash-safely. InvalidArgument for an id that does not fit `dtype`.
Status WriteTokenFile(const std::string& path, const std::string& dtype,
                      const std::vector<int64_t>& ids);

// Tokenizes `text` byte by byte into `dir`: vocab.json, train.bin (the first
// 1 - val_fraction of the tokens) and val.bin (the rest), uint16. With
// `vocab`, its ids (another corpus's, to fine-tune a model trained on it);
// else the text's own bytes.
struct PreparedText {
  Vocabulary vocab;
  int64_t train_tokens = 0;
  int64_t val_tokens = 0;
};
Result<PreparedText> PrepareText(std::string_view text, double val_fraction, const std::string& dir,
                                 const Vocabulary* vocab = nullptr);

}  // namespace spot::train
