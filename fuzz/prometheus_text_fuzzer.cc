// Fuzzes the Prometheus text format 0.0.4 parser (monitor/metrics.h
// ParseText), which reads what workers expose, and checks it against the
// writer: the samples parsed, written back with ExposeText (as untyped
// families, one per sample name) and parsed again, are the same samples.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <map>
#include <string>
#include <tuple>
#include <vector>

#include "fuzz_support.h"
#include "monitor/metrics.h"

namespace {

namespace pm = prometheus;
using spot::monitor::MetricSample;
using spot::monitor::ParsedMetrics;

// A sample as the writer can say it: a timestamp of 0 is not written.
using Key = std::tuple<std::string, std::map<std::string, std::string>, int64_t>;

std::vector<std::pair<Key, double>> Normalized(const std::vector<MetricSample>& samples) {
  std::vector<std::pair<Key, double>> out;
  for (const MetricSample& s : samples) {
    out.push_back({Key{s.name, s.labels, s.timestamp_ms.value_or(0)}, s.value});
  }
  std::stable_sort(out.begin(), out.end(),
                   [](const auto& a, const auto& b) { return a.first < b.first; });
  return out;
}

bool SameValue(double a, double b) { return (std::isnan(a) && std::isnan(b)) || a == b; }

std::vector<pm::MetricFamily> Families(const ParsedMetrics& parsed) {
  std::map<std::string, pm::MetricFamily> by_name;
  for (const MetricSample& s : parsed.samples) {
    pm::MetricFamily& f = by_name[s.name];
    f.name = s.name;
    auto help = parsed.help.find(s.name);
    f.help = help == parsed.help.end() ? "" : help->second;
    f.type = pm::MetricType::Untyped;
    pm::ClientMetric m;
    for (const auto& [k, v] : s.labels) m.label.push_back({k, v});
    m.untyped.value = s.value;
    m.timestamp_ms = s.timestamp_ms.value_or(0);
    f.metric.push_back(std::move(m));
  }
  std::vector<pm::MetricFamily> out;
  for (auto& [name, f] : by_name) out.push_back(std::move(f));
  return out;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  auto parsed = spot::monitor::ParseText(spot::fuzz::AsString(data, size));
  if (!parsed.ok()) {
    FUZZ_CHECK(parsed.status().code() == spot::StatusCode::kInvalidArgument,
               parsed.status().ToString());
    return 0;
  }
  for (const MetricSample& s : parsed->samples) {
    FUZZ_CHECK(parsed->Value(s.name, s.labels).has_value(), "a parsed sample is not found");
    (void)parsed->Sum(s.name);
  }
  const std::string text = spot::monitor::ExposeText(Families(*parsed));
  auto again = spot::monitor::ParseText(text);
  FUZZ_CHECK(again.ok(), "ExposeText wrote what ParseText refuses: " + again.status().ToString() +
                             "\n--- text:\n" + text.substr(0, 2000));
  auto want = Normalized(parsed->samples);
  auto got = Normalized(again->samples);
  FUZZ_CHECK(want.size() == got.size(), "sample count changed in a round trip");
  for (size_t i = 0; i < want.size(); ++i) {
    FUZZ_CHECK(want[i].first == got[i].first && SameValue(want[i].second, got[i].second),
               "sample changed in a round trip: " + std::get<0>(want[i].first) + "\n--- text:\n" +
                   text.substr(0, 2000));
  }
  return 0;
}
