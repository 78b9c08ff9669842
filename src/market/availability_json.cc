// LoadAvailabilityJson: the availability/preemption JSON of the shared records,
// and the traces of SkyNomad's artifact (the same schema, inverted).
#include <cmath>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <optional>
#include <regex>

#include "core/file_io.h"
#include "core/strict_json.h"
#include "market/field_parse.h"
#include "market/loaders.h"

namespace spot::market {
namespace {

using nlohmann::json;

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

// `data`: counts of obtainable instances, or, with `preempted` (SkyNomad's
// convention, for the reason `why`), 0/1 flags where 1 is a tick without
// spot, read as 1 - flag.
Result<std::vector<int32_t>> Counts(const json& doc, const std::string& file, bool preempted,
                                    const std::string& why) {
  auto data = doc.find("data");
  if (data == doc.end() || !data->is_array()) return Bad(file, "data", "missing or not an array");
  std::vector<int32_t> out;
  out.reserve(data->size());
  for (size_t i = 0; i < data->size(); ++i) {
    const json& v = (*data)[i];
    double d = v.is_number() ? v.get<double>() : -1;
    if (preempted && !(v.is_number() && (d == 0 || d == 1))) {
      return Bad(file, "data[" + std::to_string(i) + "]",
                 "not 0 or 1 (got " + v.dump() + "): " + why +
                     ", whose data are preempted flags (1 = no spot at that tick)");
    }
    if (!v.is_number() || !(d >= 0) || d != std::floor(d) || d > kMaxAvailableCount) {
      return Bad(file, "data[" + std::to_string(i) + "]",
                 "not an integer count in [0, " + FormatCount(kMaxAvailableCount) + "] (got " +
                     v.dump() + ")");
    }
    out.push_back(preempted ? 1 - static_cast<int32_t>(d) : static_cast<int32_t>(d));
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

// A finite price > 0 at metadata.price_info.<key>; nullopt when absent.
Result<std::optional<double>> InfoPrice(const json& info, const std::string& file,
                                        const std::string& key) {
  auto v = info.find(key);
  if (v == info.end() || v->is_null()) return std::optional<double>{};
  if (!v->is_number() || !(v->get<double>() > 0) || !std::isfinite(v->get<double>())) {
    return Bad(file, "metadata.price_info." + key,
               "not a finite price > 0 (got " + v->dump() + ")");
  }
  return std::optional<double>{v->get<double>()};
}

// SkyNomad's metadata, where present: price_info {price, on_demand_price},
// zone, start_time.
Status ReadSkyNomadMetadata(const json& md, const std::string& file, Trace* trace) {
  if (auto info = md.find("price_info"); info != md.end()) {
    SPOT_ASSIGN_OR_RETURN(std::optional<double> od, InfoPrice(*info, file, "on_demand_price"));
    SPOT_ASSIGN_OR_RETURN(std::optional<double> spot, InfoPrice(*info, file, "price"));
    if (od) trace->ondemand_price = *od;
    if (spot && trace->price.empty()) trace->price.assign(trace->available.size(), *spot);
  }
  if (auto zone = md.find("zone"); zone != md.end()) {
    if (!zone->is_string() || zone->get<std::string>().empty()) {
      return Bad(file, "metadata.zone", "not a zone name (got " + zone->dump() + ")");
    }
    Pool pool = PoolOfZone(zone->get<std::string>());
    pool.instance_type = trace->pool.instance_type;
    trace->pool = pool;
  }
  if (auto start = md.find("start_time"); start != md.end()) {
    std::optional<double> t =
        start->is_string() ? ParseUtcTime(start->get<std::string>()) : std::nullopt;
    if (!t) return Bad(file, "metadata.start_time", "not a UTC time (got " + start->dump() + ")");
    trace->start_unix_s = *t;
  }
  return Status::Ok();
}

// The name a trace file gives its zone: its stem, or, for SkyNomad's
// "<zone>_<kind>/full.json" and its windows "<zone>_<kind>/<n>.json", the
// folder's name (with "#<n>" for a window).
std::string TraceName(const std::filesystem::path& p) {
  const std::string stem = p.stem().string();
  const std::string folder = p.parent_path().filename().string();
  const bool window = !stem.empty() && stem.find_first_not_of("0123456789") == std::string::npos;
  if (folder.empty() || (stem != "full" && !window)) return stem;
  return window ? folder + "#" + stem : folder;
}

}  // namespace

// AWS zones look like "us-east-1a" (region "us-east-1"); GCP zones like
// "us-central1-a" (region "us-central1").
Pool PoolOfZone(const std::string& zone) {
  static const std::regex kAws(R"(^([a-z]{2}(-gov)?-[a-z]+-\d+)[a-z]$)");
  static const std::regex kGcp(R"(^([a-z]+-[a-z]+\d+)-[a-z]$)");
  std::smatch m;
  Pool pool;
  pool.zone = zone;
  if (std::regex_match(zone, m, kAws)) {
    pool.cloud = "aws";
    pool.region = m[1];
  } else if (std::regex_match(zone, m, kGcp)) {
    pool.cloud = "gcp";
    pool.region = m[1];
  }
  return pool;
}

Pool PoolOfTraceName(const std::string& name) {
  size_t us = name.find('_');
  if (us == std::string::npos || us == 0) return Pool{};
  Pool pool = PoolOfZone(name.substr(0, us));
  pool.instance_type = name.substr(us + 1);
  return pool;
}

Result<Trace> LoadAvailabilityJson(const std::string& path, TraceConvention convention) {
  SPOT_ASSIGN_OR_RETURN(std::string text, ReadFile(path));
  const std::filesystem::path p(path);
  const std::string file = p.filename().string();
  SPOT_ASSIGN_OR_RETURN(json doc, ParseStrictJson(text, file));
  if (!doc.is_object()) return InvalidArgumentError(file + ": top level is not a JSON object");
  Trace trace;
  SPOT_ASSIGN_OR_RETURN(trace.gap_seconds, GapSeconds(doc, file));
  const json& md = doc.at("metadata");
  auto info = md.find("price_info");
  const bool priced = info != md.end();
  if (priced && !info->is_object()) return Bad(file, "metadata.price_info", "not an object");
  const bool preempted =
      convention == TraceConvention::kPreempted || (convention == TraceConvention::kAuto && priced);
  const std::string why = convention == TraceConvention::kAuto
                              ? "metadata.price_info marks a SkyNomad trace"
                              : "the trace convention asked is 'preempted'";
  SPOT_ASSIGN_OR_RETURN(trace.available, Counts(doc, file, preempted, why));
  SPOT_ASSIGN_OR_RETURN(trace.price, Prices(doc, file, trace.available.size()));
  trace.name = TraceName(p);
  trace.source = path;
  const std::string label = trace.name.substr(0, trace.name.find('#'));
  trace.pool = PoolOfTraceName(label);
  SPOT_RETURN_IF_ERROR(ReadSkyNomadMetadata(md, file, &trace));
  if (preempted) {
    trace.read_as = convention == TraceConvention::kAuto
                        ? "SkyNomad's trace format (metadata.price_info): data 1 = preempted"
                        : "preempted flags, as asked: data 1 = preempted";
  } else if (priced) {
    trace.read_as =
        "counts of obtainable instances, as asked (metadata.price_info would have "
        "marked SkyNomad's preempted flags)";
  }
  return trace;
}

}  // namespace spot::market
