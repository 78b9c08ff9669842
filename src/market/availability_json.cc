// LoadAvailabilityJson: the availability/preemption JSON of the shared records.
#include <cmath>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <regex>

#include "core/file_io.h"
#include "core/strict_json.h"
#include "market/loaders.h"

namespace spot::market {
namespace {

using nlohmann::json;

// AWS zones look like "us-east-1a" (region "us-east-1"); GCP zones like
// "us-central1-a" (region "us-central1").
void FillPoolFromZone(const std::string& zone, Pool* pool) {
  static const std::regex kAws(R"(^([a-z]{2}(-gov)?-[a-z]+-\d+)[a-z]$)");
  static const std::regex kGcp(R"(^([a-z]+-[a-z]+\d+)-[a-z]$)");
  std::smatch m;
  pool->zone = zone;
  if (std::regex_match(zone, m, kAws)) {
    pool->cloud = "aws";
    pool->region = m[1];
  } else if (std::regex_match(zone, m, kGcp)) {
    pool->cloud = "gcp";
    pool->region = m[1];
  }
}

// "<zone>_<kind>[_<n>]" -> zone and instance type ("v100_1", "c3-88").
Pool PoolFromStem(const std::string& stem) {
  Pool pool;
  size_t us = stem.find('_');
  if (us == std::string::npos || us == 0) return pool;
  FillPoolFromZone(stem.substr(0, us), &pool);
  pool.instance_type = stem.substr(us + 1);
  return pool;
}

std::string FormatCount(double v) { return std::to_string(static_cast<int64_t>(v)); }

Status Bad(const std::string& file, const std::string& field, const std::string& reason) {
  return InvalidArgumentError(file + ": " + field + ": " + reason);
}

Result<double> GapSeconds(const json& doc, const std::string& file) {
  auto md = doc.find("metadata");
  if (md == doc.end() || !md->is_object()) return Bad(file, "metadata", "missing or not an object");
  auto gap = md->find("gap_seconds");
  if (gap == md->end()) return Bad(file, "metadata.gap_seconds", "missing");
  const double g = gap->is_number() ? gap->get<double>() : 0;
  if (!(g >= kMinGapSeconds && g <= kMaxGapSeconds)) {
    return Bad(file, "metadata.gap_seconds",
               "must be a number of seconds in [" + FormatCount(kMinGapSeconds) + ", " +
                   FormatCount(kMaxGapSeconds) + "] (got " + gap->dump() + ")");
  }
  return g;
}

Result<std::vector<int32_t>> Counts(const json& doc, const std::string& file) {
  auto data = doc.find("data");
  if (data == doc.end() || !data->is_array()) return Bad(file, "data", "missing or not an array");
  std::vector<int32_t> out;
  out.reserve(data->size());
  for (size_t i = 0; i < data->size(); ++i) {
    const json& v = (*data)[i];
    double d = v.is_number() ? v.get<double>() : -1;
    if (!v.is_number() || !(d >= 0) || d != std::floor(d) || d > kMaxAvailableCount) {
      return Bad(file, "data[" + std::to_string(i) + "]",
                 "not an integer count in [0, " + FormatCount(kMaxAvailableCount) + "] (got " +
                     v.dump() + ")");
    }
    out.push_back(static_cast<int32_t>(d));
  }
  return out;
}

Result<std::vector<double>> Prices(const json& doc, const std::string& file, size_t ticks) {
  auto prices = doc.find("prices");
  if (prices == doc.end()) return std::vector<double>{};
  if (!prices->is_array()) return Bad(file, "prices", "not an array");
  if (prices->size() != ticks) {
    return Bad(file, "prices",
               std::to_string(prices->size()) + " values, data has " + std::to_string(ticks));
  }
  std::vector<double> out;
  out.reserve(ticks);
  for (size_t i = 0; i < ticks; ++i) {
    const json& v = (*prices)[i];
    if (!v.is_number() || !(v.get<double>() >= 0) || !std::isfinite(v.get<double>())) {
      return Bad(file, "prices[" + std::to_string(i) + "]",
                 "not a finite price >= 0 (got " + v.dump() + ")");
    }
    out.push_back(v.get<double>());
  }
  return out;
}

}  // namespace

Result<Trace> LoadAvailabilityJson(const std::string& path) {
  SPOT_ASSIGN_OR_RETURN(std::string text, ReadFile(path));
  const std::filesystem::path p(path);
  const std::string file = p.filename().string();
  SPOT_ASSIGN_OR_RETURN(json doc, ParseStrictJson(text, file));
  if (!doc.is_object()) return InvalidArgumentError(file + ": top level is not a JSON object");
  Trace trace;
  SPOT_ASSIGN_OR_RETURN(trace.gap_seconds, GapSeconds(doc, file));
  SPOT_ASSIGN_OR_RETURN(trace.available, Counts(doc, file));
  SPOT_ASSIGN_OR_RETURN(trace.price, Prices(doc, file, trace.available.size()));
  trace.name = p.stem().string();
  trace.source = path;
  trace.pool = PoolFromStem(trace.name);
  return trace;
}

}  // namespace spot::market
