#include "core/number_text.h"

#include <cctype>
#include <charconv>
#include <cmath>
#include <string>

namespace spot {
namespace {

bool IsDigit(char c) { return c >= '0' && c <= '9'; }

// Skips the digits at text[*i], returning how many there were.
size_t Digits(std::string_view text, size_t* i) {
  const size_t start = *i;
  while (*i < text.size() && IsDigit(text[*i])) ++*i;
  return *i - start;
}

std::string Got(std::string_view text) { return " (got '" + std::string(text) + "')"; }

// "010", "-007.5": the integer part has a leading zero.
bool LeadingZero(std::string_view text) {
  size_t i = text.empty() || (text[0] != '-' && text[0] != '+') ? 0 : 1;
  return i + 1 < text.size() && text[i] == '0' && IsDigit(text[i + 1]);
}

Status Ambiguous(std::string_view text) {
  return InvalidArgumentError("'" + std::string(text) +
                              "' has a leading zero, which is ambiguous (octal to YAML 1.1 "
                              "readers): write it without the zero");
}

bool NonFinite(std::string_view text) {
  std::string t;
  for (char c : text) t += static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  if (!t.empty() && (t[0] == '-' || t[0] == '+')) t.erase(0, 1);
  return t == ".inf" || t == "inf" || t == "infinity" || t == ".nan" || t == "nan";
}

// Drops one leading '+', which from_chars does not take.
std::string_view Unsigned(std::string_view text) {
  if (!text.empty() && text[0] == '+') text.remove_prefix(1);
  return text;
}

}  // namespace

Result<int64_t> ParseInteger(std::string_view text) {
  size_t i = !text.empty() && (text[0] == '-' || text[0] == '+') ? 1 : 0;
  if (Digits(text, &i) == 0 || i != text.size()) {
    return InvalidArgumentError("expected an integer" + Got(text));
  }
  if (LeadingZero(text)) return Ambiguous(text);
  const std::string_view t = Unsigned(text);
  int64_t v = 0;
  auto [end, ec] = std::from_chars(t.data(), t.data() + t.size(), v);
  if (ec == std::errc::result_out_of_range) {
    return InvalidArgumentError("is out of range for a 64-bit integer" + Got(text));
  }
  if (ec != std::errc() || end != t.data() + t.size()) {
    return InvalidArgumentError("expected an integer" + Got(text));
  }
  return v;
}

Result<double> ParseNumber(std::string_view text) {
  if (NonFinite(text)) return InvalidArgumentError("must be a finite number" + Got(text));
  size_t i = !text.empty() && (text[0] == '-' || text[0] == '+') ? 1 : 0;
  size_t mantissa = Digits(text, &i);
  if (i < text.size() && text[i] == '.') {
    ++i;
    mantissa += Digits(text, &i);
  }
  bool ok = mantissa > 0;
  if (ok && i < text.size() && (text[i] == 'e' || text[i] == 'E')) {
    ++i;
    if (i < text.size() && (text[i] == '-' || text[i] == '+')) ++i;
    ok = Digits(text, &i) > 0;
  }
  if (!ok || i != text.size()) return InvalidArgumentError("expected a number" + Got(text));
  if (LeadingZero(text)) return Ambiguous(text);
  const std::string_view t = Unsigned(text);
  double v = 0;
  auto [end, ec] = std::from_chars(t.data(), t.data() + t.size(), v);
  if (ec == std::errc::result_out_of_range || !std::isfinite(v)) {
    return InvalidArgumentError("is out of range for a number" + Got(text));
  }
  if (ec != std::errc() || end != t.data() + t.size()) {
    return InvalidArgumentError("expected a number" + Got(text));
  }
  return v;
}

}  // namespace spot
