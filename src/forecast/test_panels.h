// Test helpers (header-only, tests only): small panels from the synthetic
// market and hand-made series.
#pragma once

#include <cmath>
#include <vector>

#include "forecast/history.h"
#include "market/synthetic.h"

namespace spot::forecast::testing {

// The first `zones` synthetic default zones, `days` long (195 s ticks).
inline Panel SyntheticPanel(int zones, double days, uint64_t seed = 3) {
  auto traces = market::DefaultSyntheticZones(static_cast<int64_t>(days * 86400 / 195), seed);
  traces.resize(zones);
  return PanelFromTraces("synthetic", traces).value();
}

// One zone of hourly ticks with the given prices and availability.
inline Panel HandPanel(std::vector<double> price, std::vector<int32_t> available = {}) {
  Panel p{.name = "hand", .gap_seconds = 3600};
  p.zones = {"z0"};
  p.ticks = static_cast<int64_t>(!price.empty() ? price.size() : available.size());
  if (!price.empty()) p.price = {std::move(price)};
  if (!available.empty()) p.available = {std::move(available)};
  return p;
}

}  // namespace spot::forecast::testing
