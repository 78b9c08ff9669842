// The panels a `spot forecast` command runs on, from its flags: one panel of
// --trace files (zones of one market, optional --prices), a price-only panel
// from --prices alone, every record of a data directory (--all), or the
// synthetic market. Every error names the flag or file; all are bad input.
#pragma once

#include <string>
#include <vector>

#include "core/status.h"
#include "forecast/history.h"

namespace spot::cli {

struct ForecastDataFlags {
  std::vector<std::string> traces;  // --trace (repeatable)
  std::string prices;               // --prices F.csv
  double tick_seconds = 0;          // --tick-seconds: price grid (0: the traces' gap, or 195)
  std::string all;                  // --all DIR: every record under DIR
  int32_t min_count = 1;            // --min-count
  uint64_t seed = 1;                // --seed of the synthetic market
  double synthetic_days = 45.5;     // length of the synthetic market
};

Result<std::vector<forecast::Panel>> LoadForecastPanels(const ForecastDataFlags& flags);

}  // namespace spot::cli
