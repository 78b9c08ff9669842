#include "apps/spot/sim_market.h"

#include <fmt/format.h>

#include <algorithm>
#include <filesystem>

#include "market/loaders.h"
#include "market/synthetic.h"

namespace spot::cli {
namespace {

namespace fs = std::filesystem;

constexpr int64_t kDefaultTicks = 20158;  // the 45.5 days of the built-in fits' source

Status BadInput(const std::string& what, const Status& s) {
  return InvalidArgumentError(what + ": " + s.message());
}

bool Exists(const std::string& path) {
  std::error_code ec;
  return fs::exists(path, ec);
}

// The seed of zone `index`'s synthetic data (DefaultSyntheticZones' rule).
uint64_t ZoneSeed(uint64_t seed, size_t index) { return seed * 1000003 + index; }

// A synthetic trace standing in for the missing trace file `path` (the
// `index`-th of the job): fitted to a present trace (cycling through them),
// or, when none is present, the built-in fit of its zone or of a real zone.
Result<market::Trace> StandInTrace(const std::string& path, size_t index,
                                   const std::vector<const market::Trace*>& present, uint64_t seed,
                                   std::string* note) {
  SPOT_ASSIGN_OR_RETURN(std::string zone, ZoneOfTraceFile(path));
  market::SyntheticModel model;
  int64_t ticks = kDefaultTicks;
  if (present.empty()) {
    // The built-in fit of the same zone where there is one.
    std::vector<market::SyntheticModel> fits = market::DefaultSyntheticModels();
    auto same = std::find_if(fits.begin(), fits.end(),
                             [&](const market::SyntheticModel& f) { return f.pool.zone == zone; });
    model = same != fits.end() ? *same : fits[index % fits.size()];
  } else {
    const market::Trace& source = *present[index % present.size()];
    SPOT_ASSIGN_OR_RETURN(model, market::FitSyntheticModel(source));
    model.capacity =
        std::max(1, *std::max_element(source.available.begin(), source.available.end()));
    ticks = source.ticks();
  }
  *note = fmt::format("a synthetic trace of zone {} fitted to {} stands in for it", zone,
                      model.fitted_from);
  model.pool = {.zone = zone};
  model.name = fs::path(path).stem().string();
  return market::GenerateSyntheticTrace(model, ticks, ZoneSeed(seed, index));
}

// Synthetic spot prices for `t` (index `index` of the market), from the
// built-in fits of real prices, scaled to `ondemand_price` when > 0.
std::vector<double> StandInPrices(const market::Trace& t, size_t index, uint64_t seed,
                                  double ondemand_price) {
  std::vector<market::SyntheticModel> fits = market::DefaultSyntheticModels();
  market::SyntheticModel model;
  model.gap_seconds = t.gap_seconds;
  model.price = fits[index % fits.size()].price;
  const double scale = ondemand_price > 0 ? ondemand_price / market::kP3OnDemandUsdPerHour : 1;
  model.price.initial *= scale;
  model.price.level *= scale;
  return market::GenerateSyntheticTrace(model, t.ticks(), ZoneSeed(seed, index)).price;
}

Status AttachPrices(const MarketFlags& flags, std::vector<market::Trace>& traces) {
  const std::string what = flags.prices_name + " " + flags.prices;
  auto series = market::LoadPriceChangePoints(flags.prices, traces[0].gap_seconds);
  if (!series.ok()) return BadInput(what, series.status());
  for (market::Trace& t : traces) {
    auto it = series->find(t.pool.zone);
    if (it == series->end() || it->second.empty()) {
      std::string known;
      for (const auto& [zone, s] : *series) known += (known.empty() ? "" : ", ") + zone;
      return InvalidArgumentError(fmt::format(
          "{}: no prices for zone '{}' of trace {} (the zone is the trace file's name up to "
          "its first '_'; the file has prices for: {})",
          what, t.pool.zone, t.name, known.empty() ? "no zone" : known));
    }
    t.price = it->second.Resample(0, t.gap_seconds, t.ticks());
  }
  return Status::Ok();
}

// Loads the present trace files; the missing ones are left empty (name
// only) in `traces` and listed in `missing`.
Status LoadPresent(const MarketFlags& flags, std::vector<market::Trace>& traces,
                   std::vector<size_t>& missing) {
  for (size_t i = 0; i < flags.traces.size(); ++i) {
    const std::string& path = flags.traces[i];
    const std::string what = flags.traces_name + " " + path;
    if (!Exists(path)) {
      if (!flags.synthesize_missing) return InvalidArgumentError(what + ": no such file");
      missing.push_back(i);
      traces.emplace_back();
      continue;
    }
    auto t = market::LoadAvailabilityFile(path, flags.convention);
    if (!t.ok()) return BadInput(what, t.status());
    if (t->pool.zone.empty()) {
      auto zone = ZoneOfName(t->name.substr(0, t->name.find('#')));
      if (!zone.ok()) return BadInput(what, zone.status());
      t->pool.zone = *zone;
    }
    traces.push_back(std::move(t).value());
  }
  return Status::Ok();
}

}  // namespace

Result<std::string> ZoneOfTraceFile(const std::string& path) {
  return ZoneOfName(fs::path(path).stem().string());
}

Result<std::string> ZoneOfName(const std::string& stem) {
  const size_t us = stem.find('_');
  if (stem.empty() || us == 0) {
    return InvalidArgumentError(
        "the file name names no zone: it must be <zone>_<kind>.json (e.g. us-east-1a_v100_1.json) "
        "or <zone>.json");
  }
  return us == std::string::npos ? stem : stem.substr(0, us);
}

Result<LoadedMarket> LoadMarket(const MarketFlags& flags) {
  LoadedMarket out;
  if (flags.traces.empty()) {
    if (!flags.prices.empty()) {
      return InvalidArgumentError(flags.prices_name + " " + flags.prices +
                                  ": prices need trace files, and none is named");
    }
    out.zones = market::DefaultSyntheticZones(kDefaultTicks, flags.synthetic_seed);
    return out;
  }
  std::vector<size_t> missing;
  SPOT_RETURN_IF_ERROR(LoadPresent(flags, out.zones, missing));
  std::vector<const market::Trace*> present;
  for (size_t i = 0; i < out.zones.size(); ++i) {
    if (std::find(missing.begin(), missing.end(), i) == missing.end()) {
      present.push_back(&out.zones[i]);
    }
  }
  std::vector<market::Trace> stand_ins;
  for (size_t k = 0; k < missing.size(); ++k) {
    const std::string& path = flags.traces[missing[k]];
    std::string note;
    auto t = StandInTrace(path, missing[k], present, flags.synthetic_seed, &note);
    if (!t.ok()) return BadInput(flags.traces_name + " " + path, t.status());
    stand_ins.push_back(std::move(t).value());
    out.missing.push_back(path);
    out.stand_ins.push_back(fmt::format("{} {}: no such file; {}", flags.traces_name, path, note));
  }
  for (size_t k = 0; k < missing.size(); ++k) out.zones[missing[k]] = std::move(stand_ins[k]);
  if (flags.prices.empty()) return out;
  if (Exists(flags.prices)) {
    SPOT_RETURN_IF_ERROR(AttachPrices(flags, out.zones));
    return out;
  }
  if (!flags.synthesize_missing) {
    return InvalidArgumentError(flags.prices_name + " " + flags.prices + ": no such file");
  }
  out.missing.push_back(flags.prices);
  std::string zones;
  for (size_t i = 0; i < out.zones.size(); ++i) {
    market::Trace& t = out.zones[i];
    if (t.has_prices()) continue;
    t.price = StandInPrices(t, i, flags.synthetic_seed, flags.ondemand_price);
    zones += (zones.empty() ? "" : ", ") + t.pool.zone;
  }
  out.stand_ins.push_back(fmt::format(
      "{} {}: no such file; synthetic spot prices (fitted to p3.2xlarge's{}) stand in for it{}",
      flags.prices_name, flags.prices,
      flags.ondemand_price > 0
          ? fmt::format(", scaled to the on-demand price ${:.2f}", flags.ondemand_price)
          : "",
      zones.empty() ? " (no zone needed them)" : " in zones " + zones));
  return out;
}

RecordedOnDemand RecordedOnDemandPrices(const std::vector<market::Trace>& traces) {
  RecordedOnDemand r;
  for (const market::Trace& t : traces) {
    const double p = t.ondemand_price;
    r.labels.push_back(p > 0 ? fmt::format("{} ${:.4g}/h", t.name, p) : t.name + " none");
    if (!(p > 0)) continue;
    ++r.with;
    r.differ |= r.price > 0 && p != r.price;
    if (r.price == 0) r.price = p;
  }
  return r;
}

Result<std::vector<market::Trace>> LoadSimMarket(const MarketFlags& flags) {
  SPOT_ASSIGN_OR_RETURN(LoadedMarket m, LoadMarket(flags));
  return std::move(m.zones);
}

}  // namespace spot::cli
