// Prometheus metrics: builders that enforce our naming rules, the text
// exposition format 0.0.4 written by our own serializer, and a parser of that
// format (to scrape workers, and in tests).
//
// Metrics live in a prometheus-cpp Registry (thread-safe; counters, gauges and
// histograms are updated lock-free from any thread). We do not use
// prometheus-cpp's TextSerializer: version 1.0.1 does not escape HELP text, so a
// help with a backslash yields an exposition Prometheus rejects.
//
// Naming conventions (https://prometheus.io/docs/practices/naming/):
//   - every name starts with kMetricPrefix ("spot_") and matches
//     [a-zA-Z_:][a-zA-Z0-9_:]*; use snake_case;
//   - counters end in "_total"; gauges and histograms do not;
//   - quantities are in base units, spelled as a suffix before "_total":
//     _seconds (never _ms), _bytes, _dollars, _ratio for 0..1 fractions
//     (spot_train_compute_seconds_total, spot_checkpoint_written_bytes_total);
//   - label names match [a-zA-Z_][a-zA-Z0-9_]*, do not start with "__", and
//     "le" is reserved (histogram buckets).
// A name that breaks these rules is a programming error: the builders print
// what is wrong to stderr and abort.
#pragma once

#include <prometheus/counter.h>
#include <prometheus/family.h>
#include <prometheus/gauge.h>
#include <prometheus/histogram.h>
#include <prometheus/labels.h>
#include <prometheus/metric_family.h>
#include <prometheus/registry.h>

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"

namespace spot::monitor {

inline constexpr std::string_view kMetricPrefix = "spot_";
// The Content-Type of ExposeText's output.
inline constexpr std::string_view kTextContentType = "text/plain; version=0.0.4; charset=utf-8";

// Text format 0.0.4 of `families`, in their order: for each family "# HELP"
// (backslash and newline escaped), "# TYPE", then its series sorted by labels
// (label values escape backslash, double quote and newline). A histogram
// series prints cumulative "_bucket" lines in the increasing "le" order
// prometheus-cpp keeps, ending with le="+Inf" equal to "_count" (added when
// missing), then "_sum" and "_count". Series timestamps, when not 0, follow
// their values. Values use the shortest text that reads back to the same
// double; NaN, +Inf, -Inf as such. A family without series prints its HELP and
// TYPE only (legal). Registry::Collect is thread-safe, so is this.
std::string ExposeText(const std::vector<prometheus::MetricFamily>& families);
std::string ExposeText(const prometheus::Registry& registry);

// Add (or find, when one with the same name and constant labels exists) a
// family in `registry`, after checking the naming rules above. Abort on a
// name or label that breaks them, or on a name already used by another type.
// The family lives as long as the registry. Label names of series added later
// with Family::Add are checked by prometheus-cpp (it throws
// std::invalid_argument on "__" names); do not use "le" there either.
prometheus::Family<prometheus::Counter>& AddCounter(prometheus::Registry& registry,
                                                    const std::string& name,
                                                    const std::string& help,
                                                    const prometheus::Labels& constant_labels = {});
prometheus::Family<prometheus::Gauge>& AddGauge(prometheus::Registry& registry,
                                                const std::string& name, const std::string& help,
                                                const prometheus::Labels& constant_labels = {});
prometheus::Family<prometheus::Histogram>& AddHistogram(
    prometheus::Registry& registry, const std::string& name, const std::string& help,
    const prometheus::Labels& constant_labels = {});

// `count` bucket bounds start, start*factor, start*factor^2, ...
// REQUIRES: start > 0, factor > 1, count >= 1 (aborts otherwise).
std::vector<double> ExponentialBuckets(double start, double factor, int count);

// One sample line of the text format.
struct MetricSample {
  std::string name;  // as written: "x_bucket", "x_sum", "x_count" for histograms
  std::map<std::string, std::string> labels;  // unescaped values
  double value = 0;
  std::optional<int64_t> timestamp_ms;
};

struct ParsedMetrics {
  std::vector<MetricSample> samples;         // in text order
  std::map<std::string, std::string> types;  // family -> counter|gauge|histogram|...
  std::map<std::string, std::string> help;   // family -> help text, unescaped

  // The value of the first sample named `name` whose labels include every
  // pair of `match`; nullopt when none does.
  std::optional<double> Value(std::string_view name,
                              const std::map<std::string, std::string>& match = {}) const;
  // The sum over the samples named `name` whose labels include `match` (0 when none).
  double Sum(std::string_view name, const std::map<std::string, std::string>& match = {}) const;
};

// Parses the text format 0.0.4 (ours and other clients'): comments, HELP and
// TYPE lines, samples with escaped label values, optional integer timestamps,
// NaN/+Inf/-Inf values. InvalidArgument "line N: reason" on malformed input.
Result<ParsedMetrics> ParseText(std::string_view text);

}  // namespace spot::monitor
