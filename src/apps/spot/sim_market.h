// Builds the market a `spot sim` or `spot run` command runs on: traces from
// files (with an optional price CSV), the market layer's default synthetic
// zones when no trace is named, and, where the caller allows it, synthetic
// stand-ins for named files that do not exist. Every error names the flag or
// field and the file; all are bad input (exit 2).
#pragma once

#include <string>
#include <vector>

#include "core/status.h"
#include "market/loaders.h"
#include "market/trace.h"

namespace spot::cli {

struct MarketFlags {
  std::vector<std::string> traces;  // --trace (repeatable): one availability JSON or CSV per zone
  std::string prices;               // --prices F.csv; "" = none
  uint64_t synthetic_seed = 1;      // --seed, for synthetic data
  // What errors call the two inputs: "--trace" for `spot sim`,
  // "job.yaml: market.traces:" for `spot run`.
  std::string traces_name = "--trace";
  std::string prices_name = "--prices";
  // A named file that does not exist: false, an error naming it; true,
  // synthetic data stands in for that file alone (see LoadMarket).
  bool synthesize_missing = false;
  // > 0: synthetic prices (p3.2xlarge's, fitted) are scaled to this on-demand
  // price from p3.2xlarge's; 0: unscaled.
  double ondemand_price = 0;
  // How the JSON traces' `data` read (market/loaders.h): auto tells
  // SkyNomad's preempted flags by their metadata.price_info.
  market::TraceConvention convention = market::TraceConvention::kAuto;
};

struct LoadedMarket {
  std::vector<market::Trace> zones;  // one per named trace, in order
  std::vector<std::string> missing;  // the named files that do not exist
  // One line per missing file: the file and what stands in for it.
  std::vector<std::string> stand_ins;
};

// The zone a trace file is named for: the part of its name before the first
// '_' ("us-east-1a_v100_1.json": "us-east-1a"), or the whole stem when it has
// no '_' ("zone-a.json": "zone-a"). InvalidArgument when the name starts with
// '_' (no zone).
Result<std::string> ZoneOfTraceFile(const std::string& path);
// The same rule on a trace's name (SkyNomad's "<zone>_<kind>/full.json" is
// named for its folder, market::LoadAvailabilityJson).
Result<std::string> ZoneOfName(const std::string& name);

// The traces of `flags` (the default synthetic zones when none is named),
// with the prices of flags.prices. With flags.synthesize_missing:
// - a missing trace file: a synthetic trace for its zone (named as the file
//   names it) on the present traces' tick grid, fitted to one of them
//   (cycling through them); when no trace file is present, the built-in fit
//   of that zone, or of another real zone;
// - a missing price file: synthetic prices (the built-in fits of real spot
//   prices) for every zone that has none.
// InvalidArgument naming the flag/field and file on any failure.
Result<LoadedMarket> LoadMarket(const MarketFlags& flags);

// LoadMarket's zones, for `spot sim`.
Result<std::vector<market::Trace>> LoadSimMarket(const MarketFlags& flags);

// The on-demand prices traces record (SkyNomad's metadata.price_info), for
// `spot sim` and `spot run` to choose from and to name in their messages.
struct RecordedOnDemand {
  std::vector<std::string> labels;  // per trace: "<name> $p/h", or "<name> none"
  size_t with = 0;                  // traces that record one
  double price = 0;                 // the first recorded; 0: none
  bool differ = false;              // two traces record different ones
};
RecordedOnDemand RecordedOnDemandPrices(const std::vector<market::Trace>& traces);

}  // namespace spot::cli
