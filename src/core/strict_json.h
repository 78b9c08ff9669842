// Parses a JSON file a user gave (a market trace, a price history) strictly:
// an object that names a key twice is an error, not "the last one wins" as
// nlohmann::json (and most JSON readers) would silently have it.
#pragma once

#include <cstdint>
#include <nlohmann/json_fwd.hpp>
#include <string>
#include <string_view>

#include "core/status.h"

namespace spot {

// The document in `text`, the contents of `file` (which only names it in
// messages). InvalidArgument naming the file and the line for a syntax error
// ("f.json:3: JSON syntax error: ..."), and the file and key for a duplicate
// key ("f.json: metadata.gap_seconds: given twice (JSON keys must be unique)")
// or for nesting deeper than kMaxJsonDepth.
inline constexpr int kMaxJsonDepth = 256;
Result<nlohmann::json> ParseStrictJson(std::string_view text, const std::string& file);

// The value of an integer field: a JSON integer that fits int64_t. A number
// with a fraction or an exponent (1e19, 5.0) is InvalidArgument, never
// converted: nlohmann's get<int64_t>() of a double casts it, undefined when it
// is out of range.
Result<int64_t> JsonInt64(const nlohmann::json& value);

}  // namespace spot
