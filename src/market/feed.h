// MarketFeed: where a live job's view of the market comes from. A replayed
// feed serves recorded (or synthetic) traces; a provider's feed (EC2's spot
// price history and instance-type offerings, later) appends what it learns
// to traces of its own. Either way the controller, its fleet model and the
// policy read the same Trace objects, whose history grows as Advance() is
// called, and never see past what the feed knows.
//
// Not thread-safe: the controller's loop is its only caller. The traces it
// hands out stay valid (same addresses) for the feed's lifetime.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "core/status.h"
#include "market/trace.h"

namespace spot::market {

class MarketFeed {
 public:
  virtual ~MarketFeed() = default;
  // The zones of the market, in a fixed order, on one tick grid.
  virtual std::span<const Trace* const> zones() const = 0;
  // Makes the market known up to and including absolute tick `abs`. A live
  // feed asks its source (Unavailable when it cannot be reached: the zones
  // keep what they had); a replay already has it.
  virtual Status Advance(int64_t abs) = 0;
  // Ticks the feed knows (a replay: the whole record). Past them the market
  // is unknown; a replayed job that outlives its record finishes on demand.
  virtual int64_t known_ticks() const = 0;
};

// A feed over recorded traces (not owned; they must outlive it).
// REQUIRES: at least one zone, all on one tick grid.
std::unique_ptr<MarketFeed> MakeReplayedFeed(std::vector<const Trace*> zones);

}  // namespace spot::market
