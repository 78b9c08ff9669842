#include "apps/spot/run_market.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <filesystem>

#include "apps/spot/sim_market.h"

namespace spot::cli {
namespace {

// "2 zones of aws-v100-2023-02 (195 s ticks, with spot prices)", and what
// stands in for missing files.
std::string Describe(const control::MarketSpec& m, const std::vector<market::Trace>& zones,
                     const std::vector<std::string>& missing) {
  const market::Trace& first = zones.front();
  std::string out =
      m.traces.empty()
          ? fmt::format("synthetic market, {} zone{} ({}; the job names no trace files)",
                        zones.size(), zones.size() == 1 ? "" : "s", first.source)
          : fmt::format("{} zone{} of {} ({:.0f} s ticks{})", zones.size(),
                        zones.size() == 1 ? "" : "s",
                        std::filesystem::path(m.traces.front()).parent_path().filename().string(),
                        first.gap_seconds, first.has_prices() ? ", with spot prices" : "");
  std::string files;
  for (const std::string& f : missing) {
    files += (files.empty() ? "" : ", ") + std::filesystem::path(f).filename().string();
  }
  if (!files.empty()) out += "; SYNTHETIC data stands in for the missing " + files;
  return out;
}

// The job's on-demand price: resources.ondemand_price when the job file gives
// it; else the price the candidate zones' traces record (SkyNomad's trace
// files carry one), which must agree, as a job has one on-demand price; else
// the field's default. `note` says where it came from when traces record one.
Result<double> OnDemandPriceOf(const control::RunSpec& spec,
                               const std::vector<market::Trace>& zones, std::string* note) {
  const RecordedOnDemand r = RecordedOnDemandPrices(zones);
  const double given = spec.resources.ondemand_price;
  if (spec.resources.ondemand_price_given || r.with == 0) {
    if (r.with > 0 && (r.differ || r.price != given)) {
      *note = fmt::format("on-demand ${:.4g}/h (resources.ondemand_price; the traces record {})",
                          given, fmt::join(r.labels, ", "));
    }
    return given;
  }
  if (r.differ) {
    return InvalidArgumentError(fmt::format(
        "{}: resources.ondemand_price: not given, and the zones' traces record different "
        "on-demand prices ({}); a job has one: name it",
        spec.source, fmt::join(r.labels, ", ")));
  }
  *note = fmt::format("on-demand ${:.4g}/h, as the traces record", r.price);
  return r.price;
}

// The job file's candidate zones of `traces`, in its order (every zone when
// it names none).
Result<std::vector<market::Trace>> CandidateZones(const control::RunSpec& spec,
                                                  std::vector<market::Trace> traces) {
  if (spec.resources.zones.empty()) return traces;
  std::vector<market::Trace> out;
  for (const std::string& name : spec.resources.zones) {
    auto it = std::find_if(traces.begin(), traces.end(),
                           [&](const market::Trace& t) { return t.pool.zone == name; });
    if (it == traces.end()) {
      std::string known;
      for (const market::Trace& t : traces) known += (known.empty() ? "" : ", ") + t.pool.zone;
      return InvalidArgumentError(
          fmt::format("{}: resources.zones: no zone '{}' in the market (it has: {})", spec.source,
                      name, known));
    }
    out.push_back(*it);
  }
  return out;
}

}  // namespace

Result<RunMarket> LoadRunMarket(const control::RunSpec& spec) {
  const control::MarketSpec& m = spec.market;
  RunMarket out;
  // The reader of the job file allowed only the three names.
  SPOT_ASSIGN_OR_RETURN(market::TraceConvention convention,
                        market::ParseTraceConvention(m.trace_convention));
  MarketFlags flags{.traces = m.traces,
                    .prices = m.prices,
                    .synthetic_seed = static_cast<uint64_t>(m.synthetic_seed),
                    .traces_name = spec.source + ": market.traces:",
                    .prices_name = spec.source + ": market.prices:",
                    .synthesize_missing = m.when_missing == "synthetic",
                    .ondemand_price = spec.resources.ondemand_price,
                    .convention = convention};
  SPOT_ASSIGN_OR_RETURN(LoadedMarket loaded, LoadMarket(flags));
  SPOT_ASSIGN_OR_RETURN(out.zones, CandidateZones(spec, loaded.zones));
  std::string od_note;
  SPOT_ASSIGN_OR_RETURN(out.ondemand_price, OnDemandPriceOf(spec, out.zones, &od_note));
  // Synthetic spot prices standing in for a missing price file are scaled to
  // the on-demand price; when that is the traces' and not the job file's, the
  // market is drawn again at it (the same seed: only the scale moves).
  const bool prices_stood_in =
      !m.prices.empty() &&
      std::find(loaded.missing.begin(), loaded.missing.end(), m.prices) != loaded.missing.end();
  if (prices_stood_in && out.ondemand_price != flags.ondemand_price) {
    flags.ondemand_price = out.ondemand_price;
    SPOT_ASSIGN_OR_RETURN(loaded, LoadMarket(flags));
    SPOT_ASSIGN_OR_RETURN(out.zones, CandidateZones(spec, loaded.zones));
  }
  out.synthetic = m.traces.empty();
  out.stand_ins = std::move(loaded.stand_ins);
  // Probe traces (0/1: "a spot instance could be had") stand for the gang.
  int32_t max_count = 0;
  for (const market::Trace& t : out.zones) {
    for (int32_t a : t.available) max_count = std::max(max_count, a);
  }
  out.capacity_scale = m.capacity_scale == 0
                           ? (max_count <= 1 ? static_cast<int>(spec.resources.nodes) : 1)
                           : m.capacity_scale;
  for (market::Trace& t : out.zones) {
    for (int32_t& a : t.available) a *= out.capacity_scale;
    // Every zone is a pool of the job's instance type.
    if (out.synthetic || t.pool.instance_type.empty()) {
      t.pool.instance_type = spec.resources.instance_type;
    }
  }
  const market::Trace& first = out.zones.front();
  if (m.start_tick >= first.ticks()) {
    return InvalidArgumentError(
        fmt::format("{}: market.start_tick: {} is past the market's {} ticks", spec.source,
                    m.start_tick, first.ticks()));
  }
  out.description = Describe(m, out.zones, loaded.missing);
  if (!od_note.empty()) out.description += "; " + od_note;
  return out;
}

}  // namespace spot::cli
