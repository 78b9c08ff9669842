#include "train/token_stream.h"

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <nlohmann/json.hpp>

#include "core/file_io.h"
#include "core/strict_json.h"

namespace spot::train {
namespace {

int WidthOf(const std::string& dtype) { return dtype == "uint32" ? 4 : 2; }

}  // namespace

Vocabulary VocabularyOf(std::string_view text) {
  std::array<bool, 256> seen{};
  for (char c : text) seen[static_cast<uint8_t>(c)] = true;
  Vocabulary v;
  for (int b = 0; b < 256; ++b) {
    if (seen[b]) v.bytes.push_back(static_cast<uint8_t>(b));
  }
  return v;
}

Result<Vocabulary> ReadVocabulary(const std::string& path) {
  SPOT_ASSIGN_OR_RETURN(std::string text, ReadFile(path));
  SPOT_ASSIGN_OR_RETURN(nlohmann::json j, ParseStrictJson(text, path));
  if (!j.is_object()) return InvalidArgumentError(path + ": not a JSON object");
  if (j.value("kind", "") != "bytes") {
    return InvalidArgumentError(path + ": kind must be \"bytes\" (spot prepare-text)");
  }
  const nlohmann::json& tokens = j["tokens"];
  if (!tokens.is_array() || tokens.empty()) {
    return InvalidArgumentError(path + ": tokens must be a non-empty list of bytes");
  }
  Vocabulary v;
  std::array<bool, 256> seen{};
  for (size_t i = 0; i < tokens.size(); ++i) {
    const nlohmann::json& t = tokens[i];
    if (!t.is_number_unsigned() || t.get<uint64_t>() > 255 || seen[t.get<uint64_t>()]) {
      return InvalidArgumentError(fmt::format(
          "{}: tokens[{}] is {}; each must be a distinct byte 0..255", path, i, t.dump()));
    }
    seen[t.get<uint64_t>()] = true;
    v.bytes.push_back(static_cast<uint8_t>(t.get<uint64_t>()));
  }
  return v;
}

Status WriteVocabulary(const Vocabulary& v, const std::string& path) {
  nlohmann::json j = {{"kind", "bytes"}, {"size", v.size()}, {"tokens", v.bytes}};
  return WriteFileAtomically(path, j.dump() + "\n");
}

Result<std::vector<int64_t>> Encode(const Vocabulary& v, std::string_view text) {
  std::array<int64_t, 256> id;
  id.fill(-1);
  for (int64_t i = 0; i < v.size(); ++i) id[v.bytes[i]] = i;
  std::vector<int64_t> out;
  out.reserve(text.size());
  for (size_t i = 0; i < text.size(); ++i) {
    const int64_t t = id[static_cast<uint8_t>(text[i])];
    if (t < 0) {
      return InvalidArgumentError(fmt::format("byte {} at offset {} is not in the vocabulary",
                                              static_cast<int>(static_cast<uint8_t>(text[i])), i));
    }
    out.push_back(t);
  }
  return out;
}

std::string Decode(const Vocabulary& v, const std::vector<int64_t>& ids) {
  std::string out;
  out.reserve(ids.size());
  for (int64_t t : ids) out.push_back(t >= 0 && t < v.size() ? static_cast<char>(v.bytes[t]) : '?');
  return out;
}

Result<std::vector<int64_t>> ReadTokenFile(const std::string& path, const std::string& dtype,
                                           int64_t vocab, int64_t min_tokens) {
  SPOT_ASSIGN_OR_RETURN(std::string bytes, ReadFile(path));
  const int width = WidthOf(dtype);
  if (bytes.size() % width != 0) {
    return InvalidArgumentError(fmt::format(
        "{}: {} bytes is not a whole number of {} tokens (truncated, or another dtype?)", path,
        bytes.size(), dtype));
  }
  const int64_t n = static_cast<int64_t>(bytes.size() / width);
  if (n < min_tokens) {
    return InvalidArgumentError(
        fmt::format("{}: {} tokens; a window needs at least {}", path, n, min_tokens));
  }
  std::vector<int64_t> ids(n);
  for (int64_t i = 0; i < n; ++i) {
    const auto* p = reinterpret_cast<const uint8_t*>(bytes.data()) + i * width;
    uint32_t t = p[0] | (p[1] << 8);
    if (width == 4) t |= (static_cast<uint32_t>(p[2]) << 16) | (static_cast<uint32_t>(p[3]) << 24);
    if (vocab > 0 && t >= vocab) {
      return InvalidArgumentError(
          fmt::format("{}: token {} is {}, outside the vocabulary of {} (another data set's file?)",
                      path, i, t, vocab));
    }
    ids[i] = t;
  }
  return ids;
}

Status WriteTokenFile(const std::string& path, const std::string& dtype,
                      const std::vector<int64_t>& ids) {
  const int width = WidthOf(dtype);
  const int64_t limit = width == 4 ? (int64_t{1} << 32) : (int64_t{1} << 16);
  std::string bytes(ids.size() * width, '\0');
  for (size_t i = 0; i < ids.size(); ++i) {
    if (ids[i] < 0 || ids[i] >= limit) {
      return InvalidArgumentError(
          fmt::format("{}: token {} is {}, which {} cannot hold", path, i, ids[i], dtype));
    }
    const auto t = static_cast<uint32_t>(ids[i]);
    for (int b = 0; b < width; ++b) bytes[i * width + b] = static_cast<char>((t >> (8 * b)) & 0xff);
  }
  return WriteFileAtomically(path, bytes);
}

Result<PreparedText> PrepareText(std::string_view text, double val_fraction, const std::string& dir,
                                 const Vocabulary* vocab) {
  if (text.size() < 4) return InvalidArgumentError("the text has fewer than 4 bytes");
  if (!(val_fraction > 0 && val_fraction < 1)) {
    return InvalidArgumentError(fmt::format("val_fraction {} is not in (0, 1)", val_fraction));
  }
  PreparedText p;
  p.vocab = vocab ? *vocab : VocabularyOf(text);
  SPOT_ASSIGN_OR_RETURN(std::vector<int64_t> ids, Encode(p.vocab, text));
  const auto n = static_cast<int64_t>(ids.size());
  p.val_tokens =
      std::clamp<int64_t>(static_cast<int64_t>(static_cast<double>(n) * val_fraction), 2, n - 2);
  p.train_tokens = n - p.val_tokens;
  SPOT_RETURN_IF_ERROR(CreateDirectories(dir));
  const std::vector<int64_t> train(ids.begin(), ids.begin() + p.train_tokens);
  const std::vector<int64_t> val(ids.begin() + p.train_tokens, ids.end());
  const std::string d = dir + "/";
  SPOT_RETURN_IF_ERROR(WriteTokenFile(d + "train.bin", "uint16", train));
  SPOT_RETURN_IF_ERROR(WriteTokenFile(d + "val.bin", "uint16", val));
  SPOT_RETURN_IF_ERROR(WriteVocabulary(p.vocab, d + "vocab.json"));
  return p;
}

}  // namespace spot::train
