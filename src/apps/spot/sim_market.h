// Builds the market a `spot sim` command runs on from its flags: traces from
// files (with an optional price CSV) or the market layer's default synthetic
// zones. Every error names the flag or file; all are bad input (exit 2).
#pragma once

#include <string>
#include <vector>

#include "core/status.h"
#include "market/trace.h"

namespace spot::cli {

struct MarketFlags {
  std::vector<std::string> traces;  // --trace (repeatable)
  std::string prices;               // --prices F.csv
  uint64_t synthetic_seed = 1;      // --seed, for the synthetic default
};

// InvalidArgument naming the flag/file on any failure.
Result<std::vector<market::Trace>> LoadSimMarket(const MarketFlags& flags);

}  // namespace spot::cli
