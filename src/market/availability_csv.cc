// LoadAvailabilityCsv: probe records "<time>,<availability>" (the raw form of
// the 2023 V100 probe campaign, one row a probe), resampled to a regular tick;
// LoadAvailabilityFile: either format, by extension.
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <filesystem>

#include "market/csv.h"
#include "market/field_parse.h"
#include "market/loaders.h"

namespace spot::market {
namespace {

struct Probe {
  double time_s = 0;  // Unix seconds
  int32_t count = 0;
};

Result<std::vector<Probe>> ReadProbes(const CsvTable& t) {
  auto time = t.Column({"date", "timestamp", "time"});
  auto value = t.Column({"availability", "available", "count"});
  if (!time) return InvalidArgumentError(t.file() + ":1: no time column (date, timestamp, time)");
  if (!value) {
    return InvalidArgumentError(t.file() +
                                ":1: no availability column (availability, "
                                "available, count)");
  }
  std::vector<Probe> out;
  out.reserve(t.rows().size());
  for (const CsvRow& row : t.rows()) {
    const std::string& f = row.fields[*time];
    std::optional<double> s = ParseUtcTime(f);
    if (!s) return t.FieldError(row, *time, "not a UTC time '" + f + "'");
    if (!out.empty() && !(*s > out.back().time_s)) {
      return t.FieldError(row, *time,
                          "not after the row before (" + f + "): probes must be in time order");
    }
    const std::string& v = row.fields[*value];
    std::optional<int64_t> n = ParseInt64(v);
    if (!n || *n < 0 || *n > kMaxAvailableCount) {
      return t.FieldError(
          row, *value,
          fmt::format("not a count of instances in [0, {}] '{}'", kMaxAvailableCount, v));
    }
    out.push_back({*s, static_cast<int32_t>(*n)});
  }
  if (out.size() < 2) {
    return InvalidArgumentError(t.file() + ": " + std::to_string(out.size()) +
                                " probe rows; a trace needs at least 2 to have a tick length");
  }
  return out;
}

// The tick: the median time between probes, to the nearest second.
Result<double> TickSeconds(const std::vector<Probe>& probes, const std::string& file) {
  std::vector<double> gaps;
  gaps.reserve(probes.size() - 1);
  for (size_t i = 1; i < probes.size(); ++i)
    gaps.push_back(probes[i].time_s - probes[i - 1].time_s);
  std::nth_element(gaps.begin(), gaps.begin() + static_cast<std::ptrdiff_t>(gaps.size() / 2),
                   gaps.end());
  const double g = std::round(gaps[gaps.size() / 2]);
  if (!(g >= kMinGapSeconds && g <= kMaxGapSeconds)) {
    return InvalidArgumentError(
        fmt::format("{}: the median time between probes, {} s, is outside [{}, {}] s", file, g,
                    kMinGapSeconds, kMaxGapSeconds));
  }
  return g;
}

}  // namespace

Result<Trace> LoadAvailabilityCsv(const std::string& path) {
  SPOT_ASSIGN_OR_RETURN(CsvTable table, CsvTable::Read(path));
  SPOT_ASSIGN_OR_RETURN(std::vector<Probe> probes, ReadProbes(table));
  SPOT_ASSIGN_OR_RETURN(double gap, TickSeconds(probes, table.file()));
  const double t0 = probes.front().time_s;
  Trace trace;
  trace.gap_seconds = gap;
  trace.start_unix_s = t0;
  // Probes no further apart than 1.5 ticks are one tick each (the probe
  // campaign's convention: its 195 s probes, 194-280 s apart, are the shared
  // records' ticks); a longer hole lays the ticks on time instead, so a
  // pause in the probing does not shorten the market.
  size_t holes = 0;
  for (size_t i = 1; i < probes.size(); ++i) {
    holes += probes[i].time_s - probes[i - 1].time_s > 1.5 * gap ? 1 : 0;
  }
  if (holes == 0) {
    for (const Probe& p : probes) trace.available.push_back(p.count);
    trace.read_as = fmt::format("probe records, one a tick of {} s (their median spacing)", gap);
  } else {
    const double span = probes.back().time_s - t0;
    if (span / gap + 1 > static_cast<double>(kMaxTraceTicks)) {
      return InvalidArgumentError(fmt::format("{}: {} s of probes every {} s is more than {} ticks",
                                              table.file(), span, gap, kMaxTraceTicks));
    }
    const auto ticks = static_cast<int64_t>(std::floor(span / gap + 1e-9)) + 1;
    trace.available.reserve(static_cast<size_t>(ticks));
    size_t k = 0;  // the last probe at or before the tick's start
    for (int64_t i = 0; i < ticks; ++i) {
      const double at = t0 + static_cast<double>(i) * gap;
      while (k + 1 < probes.size() && probes[k + 1].time_s <= at) ++k;
      trace.available.push_back(probes[k].count);
    }
    trace.read_as = fmt::format(
        "probe records laid on a {} s tick by time ({} holes longer than 1.5 ticks: each tick "
        "holds the last probe before it)",
        gap, holes);
  }
  const std::filesystem::path p(path);
  trace.name = p.stem().string();
  trace.source = path;
  trace.pool = PoolOfTraceName(trace.name);
  return trace;
}

Result<TraceConvention> ParseTraceConvention(const std::string& name) {
  if (name == "auto") return TraceConvention::kAuto;
  if (name == "available") return TraceConvention::kAvailable;
  if (name == "preempted") return TraceConvention::kPreempted;
  return InvalidArgumentError("unknown trace convention '" + name +
                              "' (auto, available or preempted)");
}

Result<Trace> LoadAvailabilityFile(const std::string& path, TraceConvention convention) {
  std::string ext = std::filesystem::path(path).extension().string();
  std::transform(ext.begin(), ext.end(), ext.begin(),
                 [](unsigned char c) { return std::tolower(c); });
  return ext == ".csv" ? LoadAvailabilityCsv(path) : LoadAvailabilityJson(path, convention);
}

}  // namespace spot::market
