// Test helper: a synthetic zone for the controller's virtual-time tests.
// Two-state Markov capacity: up runs of mean `up` ticks with `nodes` to
// nodes + 2 instances, down runs of mean `down` ticks with 0-1 (a gang of
// `nodes` loses one or all), and a price that moves now and then in
// [0.6, 1.4]. Deterministic in `seed`.
#pragma once

#include <cstdint>
#include <random>
#include <string>

#include "market/trace.h"

namespace spot::control::testing {

inline constexpr double kMarkovZoneGap = 195;  // seconds per tick, as the shared records

inline market::Trace MarkovZone(uint64_t seed, const std::string& name, int64_t ticks, double up,
                                double down, int nodes = 2) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<double> u(0, 1);
  market::Trace t;
  t.pool = {.cloud = "aws", .region = "us-east-1", .zone = name, .instance_type = "p3.2xlarge"};
  t.name = name;
  t.gap_seconds = kMarkovZoneGap;
  bool is_up = true;
  double price = 0.6 + 0.8 * u(rng);
  for (int64_t i = 0; i < ticks; ++i) {
    if (u(rng) < 1.0 / (is_up ? up : down)) is_up = !is_up;
    t.available.push_back(is_up ? nodes + static_cast<int>(u(rng) * 3)
                                : static_cast<int>(u(rng) * 2));
    if (u(rng) < 0.05) price = 0.6 + 0.8 * u(rng);
    t.price.push_back(price);
  }
  return t;
}

}  // namespace spot::control::testing
