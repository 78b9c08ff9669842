#include "apps/spot/run_market.h"

#include <fmt/format.h>

#include <algorithm>
#include <filesystem>

#include "apps/spot/sim_market.h"

namespace spot::cli {

Result<RunMarket> LoadRunMarket(const control::RunSpec& spec) {
  const control::MarketSpec& m = spec.market;
  RunMarket out;
  MarketFlags flags{.traces = m.traces,
                    .prices = m.prices,
                    .synthetic_seed = static_cast<uint64_t>(m.synthetic_seed)};
  std::vector<std::string> missing;
  for (const std::string& t : m.traces) {
    if (!std::filesystem::exists(t)) missing.push_back(t);
  }
  if (!m.prices.empty() && !std::filesystem::exists(m.prices)) missing.push_back(m.prices);
  if (!missing.empty()) {
    if (m.when_missing == "error") {
      return InvalidArgumentError(
          fmt::format("{}: market.traces: {}: no such file", spec.source, missing.front()));
    }
    flags.traces.clear();
    flags.prices.clear();
    out.synthetic = true;
  }
  auto traces = LoadSimMarket(flags);
  if (!traces.ok()) {
    return InvalidArgumentError(spec.source +
                                ": market: " + std::string(traces.status().message()));
  }
  // Candidate zones, in the job file's order.
  if (spec.resources.zones.empty() || out.synthetic) {
    out.zones = std::move(traces).value();
  } else {
    for (const std::string& name : spec.resources.zones) {
      auto it = std::find_if(traces->begin(), traces->end(),
                             [&](const market::Trace& t) { return t.pool.zone == name; });
      if (it == traces->end()) {
        std::string known;
        for (const market::Trace& t : *traces) known += (known.empty() ? "" : ", ") + t.pool.zone;
        return InvalidArgumentError(
            fmt::format("{}: resources.zones: no zone '{}' in the market (it has: {})", spec.source,
                        name, known));
      }
      out.zones.push_back(*it);
    }
  }
  // Probe traces (0/1: "a spot instance could be had") stand for the gang.
  int32_t max_count = 0;
  for (const market::Trace& t : out.zones) {
    for (int32_t a : t.available) max_count = std::max(max_count, a);
  }
  out.capacity_scale = m.capacity_scale == "auto"
                           ? (max_count <= 1 ? static_cast<int>(spec.resources.nodes) : 1)
                           : std::stoi(m.capacity_scale);
  for (market::Trace& t : out.zones) {
    for (int32_t& a : t.available) a *= out.capacity_scale;
    // Every zone is a pool of the job's instance type.
    if (out.synthetic) t.pool.instance_type = spec.resources.instance_type;
  }
  const market::Trace& first = out.zones.front();
  if (m.start_tick >= first.ticks()) {
    return InvalidArgumentError(
        fmt::format("{}: market.start_tick: {} is past the market's {} ticks", spec.source,
                    m.start_tick, first.ticks()));
  }
  out.description =
      out.synthetic
          ? fmt::format("synthetic market, {} zones ({}; the trace files are absent)",
                        out.zones.size(), first.source)
          : fmt::format("{} zones of {} ({:.0f} s ticks{})", out.zones.size(),
                        std::filesystem::path(m.traces.front()).parent_path().filename().string(),
                        first.gap_seconds, first.has_prices() ? ", with spot prices" : "");
  return out;
}

}  // namespace spot::cli
