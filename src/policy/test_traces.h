// Test helpers (header-only, tests only): hand-made and random traces.
#pragma once

#include <cstdint>
#include <random>
#include <vector>

#include "market/trace.h"
#include "policy/observation.h"

namespace spot::policy::testing {

inline market::Trace MakeTrace(double gap_s, std::vector<int32_t> available,
                               std::vector<double> price = {}, const char* name = "hand") {
  market::Trace t;
  t.name = name;
  t.source = "test";
  t.gap_seconds = gap_s;
  t.available = std::move(available);
  t.price = std::move(price);
  return t;
}

// A two-state Markov availability trace: mean up and down run lengths in ticks;
// with `prices`, a spot price that random-walks in [0.3, 1.2].
inline market::Trace RandomTrace(std::mt19937_64& rng, double gap_s, int64_t ticks, double mean_up,
                                 double mean_down, bool prices) {
  std::uniform_real_distribution<double> u(0, 1);
  market::Trace t = MakeTrace(gap_s, {}, {}, "random");
  bool up = u(rng) < 0.5;
  double price = 0.3 + 0.9 * u(rng);
  for (int64_t i = 0; i < ticks; ++i) {
    if (u(rng) < 1.0 / (up ? mean_up : mean_down)) up = !up;
    t.available.push_back(up ? 1 : 0);
    if (prices) {
      if (u(rng) < 0.1) price = 0.3 + 0.9 * u(rng);
      t.price.push_back(price);
    }
  }
  return t;
}

// The gang placement of a decision; a non-gang fleet reads as a placement no
// policy returns (kind idle, zone -99), so comparisons with gangs fail.
inline Placement TargetOf(const Decision& d, int nodes = 1) {
  auto gang = AsGang(d.fleet, nodes);
  return gang ? *gang : Placement{InstanceKind::kIdle, -99};
}

}  // namespace spot::policy::testing
