// Ec2MarketFeed: a live market::MarketFeed from EC2's spot price history
// (DescribeSpotPriceHistory) in the zones that offer the instance type
// (DescribeInstanceTypeOfferings, or the zones given).
//
// Each zone's trace starts at `start_unix_s` on a grid of `gap_seconds`;
// Advance(abs) asks EC2 for the prices since the last tick it knows (one
// DescribeSpotPriceHistory per Advance that needs new ticks, all zones in
// one call) and fills ticks up to `abs` with the step function of those
// prices (a price holds until the next one; ticks before the first price
// known take it). EC2 publishes no capacity: every tick's `available` is
// `assumed_available`, and the controller learns real capacity from launch
// outcomes (InsufficientInstanceCapacity is Unavailable: "no capacity in
// this pool now"). An Advance that cannot reach EC2 is Unavailable and the
// traces keep what they had.
#pragma once

#include <memory>
#include <span>
#include <string>
#include <vector>

#include "cloud/ec2_provider.h"
#include "market/feed.h"

namespace spot::cloud {

struct Ec2MarketFeedOptions {
  std::string instance_type;         // "p3.2xlarge" (required)
  std::vector<std::string> zones;    // empty: every zone of the region offering the type
  double gap_seconds = 300;          // tick length (>= 1)
  double start_unix_s = 0;           // UTC time of tick 0 (> 0)
  int32_t assumed_available = 1000;  // instances assumed obtainable at every tick
};

class Ec2MarketFeed final : public market::MarketFeed {
 public:
  // Resolves the zones (DescribeInstanceTypeOfferings when none are given).
  // InvalidArgument for bad options or a type no zone offers.
  static Result<std::unique_ptr<Ec2MarketFeed>> Create(Ec2Client* client,
                                                       Ec2MarketFeedOptions options);

  std::span<const market::Trace* const> zones() const override { return views_; }
  Status Advance(int64_t abs) override;
  int64_t known_ticks() const override { return known_; }

 private:
  Ec2MarketFeed() = default;
  Ec2Client* client_ = nullptr;
  Ec2MarketFeedOptions opt_;
  std::vector<std::unique_ptr<market::Trace>> traces_;
  std::vector<const market::Trace*> views_;
  // Per zone: the (unix time, price) points seen, in time order.
  std::vector<std::vector<std::pair<double, double>>> points_;
  int64_t known_ = 0;
};

// Unix seconds of an ISO 8601 UTC time ("2026-12-03T11:35:22.000Z");
// InvalidArgument naming the text otherwise.
Result<double> ParseIsoTime(const std::string& text);

}  // namespace spot::cloud
