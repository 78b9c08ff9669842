#include "monitor/metrics.h"

#include <fmt/format.h>

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <iterator>
#include <limits>
#include <numeric>

namespace spot::monitor {
namespace {

namespace pm = prometheus;

// ---- exposition ----

std::string FormatValue(double v) {
  if (std::isnan(v)) return "NaN";
  if (std::isinf(v)) return v > 0 ? "+Inf" : "-Inf";
  return fmt::format("{}", v);  // shortest round-trip text
}

std::string EscapeHelp(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  for (char c : s) {
    if (c == '\\') {
      out += "\\\\";
    } else if (c == '\n') {
      out += "\\n";
    } else {
      out += c;
    }
  }
  return out;
}

std::string EscapeLabelValue(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  for (char c : s) {
    if (c == '\\') {
      out += "\\\\";
    } else if (c == '"') {
      out += "\\\"";
    } else if (c == '\n') {
      out += "\\n";
    } else {
      out += c;
    }
  }
  return out;
}

std::string_view TypeName(pm::MetricType type) {
  switch (type) {
    case pm::MetricType::Counter:
      return "counter";
    case pm::MetricType::Gauge:
      return "gauge";
    case pm::MetricType::Summary:
      return "summary";
    case pm::MetricType::Histogram:
      return "histogram";
    default:
      return "untyped";
  }
}

// Appends "name{labels,extra_name="extra_value"} value[ timestamp]\n".
void WriteLine(std::string& out, std::string_view name, const pm::ClientMetric& m,
               std::string_view extra_name, std::string_view extra_value, std::string_view value) {
  out += name;
  if (!m.label.empty() || !extra_name.empty()) {
    out += '{';
    const char* sep = "";
    for (const pm::ClientMetric::Label& l : m.label) {
      fmt::format_to(std::back_inserter(out), "{}{}=\"{}\"", sep, l.name,
                     EscapeLabelValue(l.value));
      sep = ",";
    }
    if (!extra_name.empty()) {
      fmt::format_to(std::back_inserter(out), "{}{}=\"{}\"", sep, extra_name, extra_value);
    }
    out += '}';
  }
  out += ' ';
  out += value;
  if (m.timestamp_ms != 0) fmt::format_to(std::back_inserter(out), " {}", m.timestamp_ms);
  out += '\n';
}

void WriteHistogram(std::string& out, const std::string& name, const pm::ClientMetric& m) {
  const pm::ClientMetric::Histogram& h = m.histogram;
  const std::string bucket = name + "_bucket";
  for (const pm::ClientMetric::Bucket& b : h.bucket) {
    // The +Inf bucket is written last, from the sample count, whatever the input holds.
    if (std::isinf(b.upper_bound) && b.upper_bound > 0) continue;
    WriteLine(out, bucket, m, "le", FormatValue(b.upper_bound),
              fmt::format("{}", b.cumulative_count));
  }
  const std::string count = fmt::format("{}", h.sample_count);
  WriteLine(out, bucket, m, "le", "+Inf", count);
  WriteLine(out, name + "_sum", m, "", "", FormatValue(h.sample_sum));
  WriteLine(out, name + "_count", m, "", "", count);
}

void WriteSummary(std::string& out, const std::string& name, const pm::ClientMetric& m) {
  for (const pm::ClientMetric::Quantile& q : m.summary.quantile) {
    WriteLine(out, name, m, "quantile", FormatValue(q.quantile), FormatValue(q.value));
  }
  WriteLine(out, name + "_sum", m, "", "", FormatValue(m.summary.sample_sum));
  WriteLine(out, name + "_count", m, "", "", fmt::format("{}", m.summary.sample_count));
}

void WriteFamily(std::string& out, const pm::MetricFamily& f) {
  fmt::format_to(std::back_inserter(out), "# HELP {} {}\n# TYPE {} {}\n", f.name,
                 EscapeHelp(f.help), f.name, TypeName(f.type));
  // prometheus-cpp keeps a family's series in a hash map: sort them so that
  // the output does not change from one scrape to the next.
  std::vector<size_t> order(f.metric.size());
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(),
                   [&](size_t a, size_t b) { return f.metric[a].label < f.metric[b].label; });
  for (size_t i : order) {
    const pm::ClientMetric& m = f.metric[i];
    switch (f.type) {
      case pm::MetricType::Counter:
        WriteLine(out, f.name, m, "", "", FormatValue(m.counter.value));
        break;
      case pm::MetricType::Gauge:
        WriteLine(out, f.name, m, "", "", FormatValue(m.gauge.value));
        break;
      case pm::MetricType::Histogram:
        WriteHistogram(out, f.name, m);
        break;
      case pm::MetricType::Summary:
        WriteSummary(out, f.name, m);
        break;
      default:
        WriteLine(out, f.name, m, "", "", FormatValue(m.untyped.value));
        break;
    }
  }
}

// ---- naming rules ----

bool IsNameChar(char c, bool first, bool colon) {
  bool alpha = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_';
  return alpha || (colon && c == ':') || (!first && c >= '0' && c <= '9');
}

bool IsValidName(std::string_view s, bool colon) {
  if (s.empty()) return false;
  for (size_t i = 0; i < s.size(); ++i) {
    if (!IsNameChar(s[i], i == 0, colon)) return false;
  }
  return true;
}

[[noreturn]] void NamingBug(std::string_view name, std::string_view what) {
  std::fprintf(stderr, "spot::monitor: bad metric \"%.*s\": %.*s\n", static_cast<int>(name.size()),
               name.data(), static_cast<int>(what.size()), what.data());
  std::fflush(stderr);
  std::abort();
}

enum class Kind { kCounter, kGauge, kHistogram };

void CheckNaming(const std::string& name, const pm::Labels& labels, Kind kind) {
  if (!IsValidName(name, /*colon=*/true)) {
    NamingBug(name, "a metric name must match [a-zA-Z_:][a-zA-Z0-9_:]*");
  }
  if (!name.starts_with(kMetricPrefix)) {
    NamingBug(name, fmt::format("a metric name must start with \"{}\"", kMetricPrefix));
  }
  const bool total = name.ends_with("_total");
  if (kind == Kind::kCounter && !total) NamingBug(name, "a counter's name must end in \"_total\"");
  if (kind != Kind::kCounter && total) {
    NamingBug(name, "only a counter's name may end in \"_total\"");
  }
  if (kind == Kind::kHistogram &&
      (name.ends_with("_bucket") || name.ends_with("_sum") || name.ends_with("_count"))) {
    NamingBug(name, "a histogram's name must not end in _bucket, _sum or _count");
  }
  for (const auto& [label, value] : labels) {
    if (!IsValidName(label, /*colon=*/false)) {
      NamingBug(name, fmt::format("label name \"{}\" must match [a-zA-Z_][a-zA-Z0-9_]*", label));
    }
    if (label.starts_with("__")) {
      NamingBug(name, fmt::format("label name \"{}\" starts with the reserved \"__\"", label));
    }
    if (label == "le") NamingBug(name, "label name \"le\" is reserved for histogram buckets");
  }
}

template <typename T>
pm::Family<T>& Register(pm::detail::Builder<T> builder, pm::Registry& registry,
                        const std::string& name, const std::string& help,
                        const pm::Labels& labels) {
  try {
    return builder.Name(name).Help(help).Labels(labels).Register(registry);
  } catch (const std::exception& e) {
    // Same name as a family of another type, or with other constant labels.
    NamingBug(name, fmt::format("prometheus-cpp refused it: {}", e.what()));
  }
}

// ---- parsing ----

bool IsBlank(char c) { return c == ' ' || c == '\t'; }

void SkipBlanks(std::string_view s, size_t& i) {
  while (i < s.size() && IsBlank(s[i])) ++i;
}

std::string_view ReadName(std::string_view s, size_t& i, bool colon) {
  size_t start = i;
  while (i < s.size() && IsNameChar(s[i], i == start, colon)) ++i;
  return s.substr(start, i - start);
}

std::string_view ReadToken(std::string_view s, size_t& i) {
  size_t start = i;
  while (i < s.size() && !IsBlank(s[i])) ++i;
  return s.substr(start, i - start);
}

bool EqualsLower(std::string_view s, std::string_view lower) {
  return s.size() == lower.size() &&
         std::equal(s.begin(), s.end(), lower.begin(),
                    [](char a, char b) { return (a >= 'A' && a <= 'Z' ? a - 'A' + 'a' : a) == b; });
}

// Go's strconv.ParseFloat, which Prometheus uses: decimal or exponent forms,
// an optional sign, and Inf/Infinity/NaN in any case.
std::optional<double> ParseDouble(std::string_view s) {
  bool negative = false;
  std::string_view body = s;
  if (!body.empty() && (body[0] == '+' || body[0] == '-')) {
    negative = body[0] == '-';
    body.remove_prefix(1);
  }
  if (EqualsLower(body, "inf") || EqualsLower(body, "infinity")) {
    return negative ? -std::numeric_limits<double>::infinity()
                    : std::numeric_limits<double>::infinity();
  }
  if (EqualsLower(body, "nan")) {
    if (body.size() != s.size()) return std::nullopt;
    return std::numeric_limits<double>::quiet_NaN();
  }
  if (body.empty() || !((body[0] >= '0' && body[0] <= '9') || body[0] == '.')) return std::nullopt;
  double v = 0;
  auto [end, ec] = std::from_chars(body.data(), body.data() + body.size(), v);
  if (ec != std::errc() || end != body.data() + body.size()) return std::nullopt;
  return negative ? -v : v;
}

// Reads `"value"` at s[i] (i at the opening quote), unescaping \\, \" and \n.
Result<std::string> ReadQuoted(std::string_view s, size_t& i) {
  std::string out;
  for (++i; i < s.size(); ++i) {
    char c = s[i];
    if (c == '"') {
      ++i;
      return out;
    }
    if (c != '\\') {
      out += c;
      continue;
    }
    if (++i == s.size()) break;
    if (s[i] == 'n') {
      out += '\n';
    } else if (s[i] == '\\' || s[i] == '"') {
      out += s[i];
    } else {
      return InvalidArgumentError(fmt::format("invalid escape sequence \"\\{}\"", s[i]));
    }
  }
  return InvalidArgumentError("label value has no closing quote");
}

// Reads "{a="x",b="y"}" at s[i] (i at the brace).
Status ReadLabels(std::string_view s, size_t& i, std::map<std::string, std::string>& labels) {
  ++i;
  for (;;) {
    SkipBlanks(s, i);
    if (i < s.size() && s[i] == '}') {
      ++i;
      return Status::Ok();
    }
    std::string name(ReadName(s, i, /*colon=*/false));
    if (name.empty()) return InvalidArgumentError("expected a label name or '}'");
    SkipBlanks(s, i);
    if (i == s.size() || s[i] != '=') {
      return InvalidArgumentError(fmt::format("expected '=' after label name \"{}\"", name));
    }
    ++i;
    SkipBlanks(s, i);
    if (i == s.size() || s[i] != '"') {
      return InvalidArgumentError(fmt::format("expected '\"' to open the value of \"{}\"", name));
    }
    SPOT_ASSIGN_OR_RETURN(std::string value, ReadQuoted(s, i));
    if (!labels.emplace(name, std::move(value)).second) {
      return InvalidArgumentError(fmt::format("label \"{}\" appears twice", name));
    }
    SkipBlanks(s, i);
    if (i < s.size() && s[i] == ',') {
      ++i;
    } else if (i == s.size() || s[i] != '}') {
      return InvalidArgumentError("expected ',' or '}' after a label value");
    }
  }
}

Status ParseSample(std::string_view line, std::vector<MetricSample>& out) {
  MetricSample sample;
  size_t i = 0;
  sample.name = std::string(ReadName(line, i, /*colon=*/true));
  if (sample.name.empty()) return InvalidArgumentError("expected a metric name");
  SkipBlanks(line, i);
  if (i < line.size() && line[i] == '{') SPOT_RETURN_IF_ERROR(ReadLabels(line, i, sample.labels));
  SkipBlanks(line, i);
  std::string_view value = ReadToken(line, i);
  if (value.empty()) return InvalidArgumentError(fmt::format("{} has no value", sample.name));
  std::optional<double> v = ParseDouble(value);
  if (!v) return InvalidArgumentError(fmt::format("bad value \"{}\"", value));
  sample.value = *v;
  SkipBlanks(line, i);
  std::string_view ts = ReadToken(line, i);
  if (!ts.empty()) {
    int64_t t = 0;
    auto [end, ec] = std::from_chars(ts.data(), ts.data() + ts.size(), t);
    if (ec != std::errc() || end != ts.data() + ts.size()) {
      return InvalidArgumentError(fmt::format("bad timestamp \"{}\"", ts));
    }
    sample.timestamp_ms = t;
  }
  SkipBlanks(line, i);
  if (i != line.size()) return InvalidArgumentError("unexpected text after the timestamp");
  out.push_back(std::move(sample));
  return Status::Ok();
}

std::string UnescapeHelp(std::string_view s) {
  std::string out;
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '\\' && i + 1 < s.size() && (s[i + 1] == '\\' || s[i + 1] == 'n')) {
      out += s[++i] == 'n' ? '\n' : '\\';
    } else {
      out += s[i];
    }
  }
  return out;
}

// A line starting with '#': HELP, TYPE or a comment.
Status ParseComment(std::string_view line, ParsedMetrics& out) {
  size_t i = 1;
  SkipBlanks(line, i);
  std::string_view keyword = ReadToken(line, i);
  if ((keyword != "HELP" && keyword != "TYPE") || i == line.size()) return Status::Ok();
  SkipBlanks(line, i);
  std::string name(ReadName(line, i, /*colon=*/true));
  if (name.empty() || (i < line.size() && !IsBlank(line[i]))) {
    return InvalidArgumentError(fmt::format("bad metric name in # {} line", keyword));
  }
  if (i < line.size()) ++i;  // the one blank before the text
  std::string_view rest = line.substr(i);
  if (keyword == "HELP") {
    if (!out.help.emplace(name, UnescapeHelp(rest)).second) {
      return InvalidArgumentError(fmt::format("second HELP line for {}", name));
    }
    return Status::Ok();
  }
  size_t j = 0;
  SkipBlanks(rest, j);
  std::string type(ReadToken(rest, j));
  SkipBlanks(rest, j);
  static constexpr std::string_view kTypes[] = {"counter", "gauge", "histogram", "summary",
                                                "untyped"};
  if (j != rest.size() ||
      std::find(std::begin(kTypes), std::end(kTypes), type) == std::end(kTypes)) {
    return InvalidArgumentError(fmt::format("unknown metric type \"{}\"", rest));
  }
  if (!out.types.emplace(name, type).second) {
    return InvalidArgumentError(fmt::format("second TYPE line for {}", name));
  }
  return Status::Ok();
}

bool Matches(const MetricSample& s, std::string_view name,
             const std::map<std::string, std::string>& match) {
  if (s.name != name) return false;
  for (const auto& [k, v] : match) {
    auto it = s.labels.find(k);
    if (it == s.labels.end() || it->second != v) return false;
  }
  return true;
}

}  // namespace

std::string ExposeText(const std::vector<prometheus::MetricFamily>& families) {
  std::string out;
  for (const pm::MetricFamily& f : families) WriteFamily(out, f);
  return out;
}

std::string ExposeText(const prometheus::Registry& registry) {
  return ExposeText(registry.Collect());
}

pm::Family<pm::Counter>& AddCounter(pm::Registry& registry, const std::string& name,
                                    const std::string& help, const pm::Labels& constant_labels) {
  CheckNaming(name, constant_labels, Kind::kCounter);
  return Register(pm::BuildCounter(), registry, name, help, constant_labels);
}

pm::Family<pm::Gauge>& AddGauge(pm::Registry& registry, const std::string& name,
                                const std::string& help, const pm::Labels& constant_labels) {
  CheckNaming(name, constant_labels, Kind::kGauge);
  return Register(pm::BuildGauge(), registry, name, help, constant_labels);
}

pm::Family<pm::Histogram>& AddHistogram(pm::Registry& registry, const std::string& name,
                                        const std::string& help,
                                        const pm::Labels& constant_labels) {
  CheckNaming(name, constant_labels, Kind::kHistogram);
  return Register(pm::BuildHistogram(), registry, name, help, constant_labels);
}

std::vector<double> ExponentialBuckets(double start, double factor, int count) {
  std::vector<double> bounds;
  if (start > 0 && factor > 1 && count >= 1) {
    bounds.reserve(static_cast<size_t>(count));
    for (int i = 0; i < count; ++i) bounds.push_back(start * std::pow(factor, i));
  }
  if (bounds.empty() || !std::isfinite(bounds.back())) {
    std::fprintf(stderr,
                 "spot::monitor: ExponentialBuckets(%g, %g, %d): need start > 0, factor > 1, "
                 "count >= 1 and finite bounds\n",
                 start, factor, count);
    std::abort();
  }
  return bounds;
}

std::optional<double> ParsedMetrics::Value(std::string_view name,
                                           const std::map<std::string, std::string>& match) const {
  for (const MetricSample& s : samples) {
    if (Matches(s, name, match)) return s.value;
  }
  return std::nullopt;
}

double ParsedMetrics::Sum(std::string_view name,
                          const std::map<std::string, std::string>& match) const {
  double sum = 0;
  for (const MetricSample& s : samples) {
    if (Matches(s, name, match)) sum += s.value;
  }
  return sum;
}

Result<ParsedMetrics> ParseText(std::string_view text) {
  ParsedMetrics out;
  int line_no = 0;
  while (!text.empty()) {
    ++line_no;
    size_t nl = text.find('\n');
    std::string_view line = text.substr(0, nl);
    text.remove_prefix(nl == std::string_view::npos ? text.size() : nl + 1);
    if (line.ends_with('\r')) line.remove_suffix(1);
    size_t first = 0;
    SkipBlanks(line, first);
    line.remove_prefix(first);
    if (line.empty()) continue;
    Status s = line[0] == '#' ? ParseComment(line, out) : ParseSample(line, out.samples);
    if (!s.ok()) return InvalidArgumentError(fmt::format("line {}: {}", line_no, s.message()));
  }
  return out;
}

}  // namespace spot::monitor
