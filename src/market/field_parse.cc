#include "market/field_parse.h"

#include <charconv>
#include <cmath>

namespace spot::market {
namespace {

std::string_view Trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) s.remove_suffix(1);
  return s;
}

// Reads exactly `n` digits at s[*pos] into *out.
bool Digits(std::string_view s, size_t* pos, int n, int* out) {
  if (*pos + static_cast<size_t>(n) > s.size()) return false;
  int v = 0;
  for (int i = 0; i < n; ++i) {
    char c = s[*pos + static_cast<size_t>(i)];
    if (c < '0' || c > '9') return false;
    v = v * 10 + (c - '0');
  }
  *pos += static_cast<size_t>(n);
  *out = v;
  return true;
}

bool Expect(std::string_view s, size_t* pos, std::string_view chars) {
  if (*pos >= s.size() || chars.find(s[*pos]) == std::string_view::npos) return false;
  ++*pos;
  return true;
}

// Days from 1970-01-01 to the civil date y-m-d (H. Hinnant's algorithm).
int64_t DaysFromCivil(int64_t y, int m, int d) {
  y -= m <= 2;
  const int64_t era = (y >= 0 ? y : y - 399) / 400;
  const int64_t yoe = y - era * 400;
  const int64_t doy = (153 * (m + (m > 2 ? -3 : 9)) + 2) / 5 + d - 1;
  const int64_t doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
  return era * 146097 + doe - 719468;
}

// Parses "[.fff][Z|+HH:MM|-HH:MM]" at s[pos]; adds the fraction, subtracts the offset.
std::optional<double> Suffix(std::string_view s, size_t pos, double t) {
  if (pos < s.size() && s[pos] == '.') {
    size_t end = pos + 1;
    while (end < s.size() && s[end] >= '0' && s[end] <= '9') ++end;
    if (end == pos + 1) return std::nullopt;
    t += *ParseDouble(s.substr(pos, end - pos));
    pos = end;
  }
  if (pos == s.size() || s.substr(pos) == "Z") return t;
  const int sign = s[pos] == '-' ? -1 : 1;
  int hh = 0, mm = 0;
  bool ok = Expect(s, &pos, "+-") && Digits(s, &pos, 2, &hh) && Expect(s, &pos, ":") &&
            Digits(s, &pos, 2, &mm) && pos == s.size();
  if (!ok) return std::nullopt;
  return t - sign * (hh * 3600.0 + mm * 60.0);
}

}  // namespace

std::optional<double> ParseDouble(std::string_view s) {
  s = Trim(s);
  if (s.empty()) return std::nullopt;
  if (s.front() == '+') s.remove_prefix(1);
  double v = 0;
  auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (ec != std::errc() || end != s.data() + s.size() || !std::isfinite(v)) return std::nullopt;
  return v;
}

std::optional<int64_t> ParseInt64(std::string_view s) {
  s = Trim(s);
  if (s.empty()) return std::nullopt;
  int64_t v = 0;
  auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (ec != std::errc() || end != s.data() + s.size()) return std::nullopt;
  return v;
}

std::optional<double> ParseUtcTime(std::string_view s) {
  s = Trim(s);
  size_t pos = 0;
  int y = 0, mo = 0, d = 0, h = 0, mi = 0, se = 0;
  bool ok = Digits(s, &pos, 4, &y) && Expect(s, &pos, "-") && Digits(s, &pos, 2, &mo) &&
            Expect(s, &pos, "-") && Digits(s, &pos, 2, &d) && Expect(s, &pos, " T") &&
            Digits(s, &pos, 2, &h) && Expect(s, &pos, ":") && Digits(s, &pos, 2, &mi) &&
            Expect(s, &pos, ":") && Digits(s, &pos, 2, &se);
  if (!ok || mo < 1 || mo > 12 || d < 1 || d > 31 || h > 23 || mi > 59 || se > 60) {
    return std::nullopt;
  }
  double t = static_cast<double>(DaysFromCivil(y, mo, d)) * 86400.0 + h * 3600.0 + mi * 60.0 + se;
  return Suffix(s, pos, t);
}

}  // namespace spot::market
