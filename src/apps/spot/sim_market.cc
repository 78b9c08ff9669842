#include "apps/spot/sim_market.h"

#include "market/loaders.h"
#include "market/synthetic.h"

namespace spot::cli {
namespace {

Status BadInput(const std::string& what, const Status& s) {
  return InvalidArgumentError(what + ": " + s.message());
}

Status AttachPrices(const std::string& path, std::vector<market::Trace>& traces) {
  auto series = market::LoadPriceChangePoints(path, traces[0].gap_seconds);
  if (!series.ok()) return BadInput("--prices " + path, series.status());
  for (market::Trace& t : traces) {
    auto it = series->find(t.pool.zone);
    if (it == series->end() || it->second.empty()) {
      return InvalidArgumentError("--prices " + path + ": no prices for zone '" + t.pool.zone +
                                  "' of trace " + t.name);
    }
    t.price = it->second.Resample(0, t.gap_seconds, t.ticks());
  }
  return Status::Ok();
}

}  // namespace

Result<std::vector<market::Trace>> LoadSimMarket(const MarketFlags& flags) {
  std::vector<market::Trace> traces;
  if (flags.traces.empty()) {
    if (!flags.prices.empty()) return InvalidArgumentError("--prices needs --trace");
    return market::DefaultSyntheticZones(20158, flags.synthetic_seed);
  }
  for (const std::string& path : flags.traces) {
    auto t = market::LoadAvailabilityJson(path);
    if (!t.ok()) return BadInput("--trace " + path, t.status());
    traces.push_back(std::move(t).value());
  }
  if (!flags.prices.empty()) SPOT_RETURN_IF_ERROR(AttachPrices(flags.prices, traces));
  return traces;
}

}  // namespace spot::cli
