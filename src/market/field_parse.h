// Strict parsers for the text fields of market files. Each accepts the whole
// field or nothing (no trailing junk, no empty strings) and returns nullopt on
// failure, so the caller can name the file, line and field in its error.
#pragma once

#include <cstdint>
#include <optional>
#include <string_view>

namespace spot::market {

// A finite decimal number ("1.25", "-3", "2e-3"); surrounding spaces allowed.
std::optional<double> ParseDouble(std::string_view s);

// A decimal integer that fits in int64_t; surrounding spaces allowed.
std::optional<int64_t> ParseInt64(std::string_view s);

// A UTC time as Unix seconds: "YYYY-MM-DD HH:MM:SS" or "YYYY-MM-DDTHH:MM:SS",
// optionally with fractional seconds and a "Z" or "+HH:MM"/"-HH:MM" offset.
std::optional<double> ParseUtcTime(std::string_view s);

}  // namespace spot::market
