#include "cloud/ec2_market_feed.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <ctime>

namespace spot::cloud {

Result<double> ParseIsoTime(const std::string& text) {
  std::tm tm{};
  const char* rest = strptime(text.c_str(), "%Y-%m-%dT%H:%M:%S", &tm);
  if (rest == nullptr) return InvalidArgumentError("'" + text + "' is not an ISO 8601 UTC time");
  double frac = 0;
  if (*rest == '.') {
    char* end = nullptr;
    frac = std::strtod(rest, &end);
    rest = end;
  }
  if (std::string_view(rest) != "Z" && std::string_view(rest) != "+00:00") {
    return InvalidArgumentError("'" + text + "' is not an ISO 8601 UTC time (want ...Z)");
  }
  return static_cast<double>(timegm(&tm)) + frac;
}

namespace {
std::string IsoTime(double unix_s) {
  const std::time_t t = static_cast<std::time_t>(std::floor(unix_s));
  std::tm tm{};
  gmtime_r(&t, &tm);
  char buf[32];
  std::strftime(buf, sizeof(buf), "%Y-%m-%dT%H:%M:%SZ", &tm);
  return buf;
}
}  // namespace

Result<std::unique_ptr<Ec2MarketFeed>> Ec2MarketFeed::Create(Ec2Client* client,
                                                             Ec2MarketFeedOptions o) {
  if (client == nullptr) return InvalidArgumentError("EC2 market feed: no client");
  if (o.instance_type.empty()) return InvalidArgumentError("EC2 market feed: no instance type");
  if (!(o.gap_seconds >= market::kMinGapSeconds && o.gap_seconds <= market::kMaxGapSeconds)) {
    return InvalidArgumentError(fmt::format("EC2 market feed: gap_seconds {} is outside [{}, {}]",
                                            o.gap_seconds, market::kMinGapSeconds,
                                            market::kMaxGapSeconds));
  }
  if (!(o.start_unix_s > 0)) return InvalidArgumentError("EC2 market feed: start_unix_s <= 0");
  if (o.assumed_available < 0 || o.assumed_available > market::kMaxAvailableCount) {
    return InvalidArgumentError("EC2 market feed: assumed_available out of range");
  }
  if (o.zones.empty()) {
    SPOT_ASSIGN_OR_RETURN(o.zones, OfferedZones(*client, o.instance_type));
    if (o.zones.empty()) {
      return InvalidArgumentError(fmt::format("EC2 market feed: no zone of {} offers {}",
                                              client->region(), o.instance_type));
    }
  }
  std::unique_ptr<Ec2MarketFeed> f(new Ec2MarketFeed());
  f->client_ = client;
  f->opt_ = o;
  for (const std::string& z : o.zones) {
    auto t = std::make_unique<market::Trace>();
    t->pool = {
        .cloud = "aws", .region = client->region(), .zone = z, .instance_type = o.instance_type};
    t->name = z;
    t->source = "ec2:DescribeSpotPriceHistory";
    t->gap_seconds = o.gap_seconds;
    t->start_unix_s = o.start_unix_s;
    f->views_.push_back(t.get());
    f->traces_.push_back(std::move(t));
  }
  f->points_.resize(o.zones.size());
  return f;
}

Status Ec2MarketFeed::Advance(int64_t abs) {
  if (abs < known_) return Status::Ok();
  // The prices since the last known tick (EC2 also returns the one in force then).
  const double since = opt_.start_unix_s + static_cast<double>(known_) * opt_.gap_seconds;
  SPOT_ASSIGN_OR_RETURN(std::vector<Ec2SpotPrice> prices,
                        DescribeSpotPrices(*client_, opt_.instance_type, opt_.zones,
                                           IsoTime(since - opt_.gap_seconds)));
  for (const Ec2SpotPrice& p : prices) {
    auto z = std::find(opt_.zones.begin(), opt_.zones.end(), p.zone);
    if (z == opt_.zones.end()) continue;
    SPOT_ASSIGN_OR_RETURN(double t, ParseIsoTime(p.timestamp));
    points_[z - opt_.zones.begin()].emplace_back(t, p.price);
  }
  for (size_t i = 0; i < traces_.size(); ++i) {
    auto& pts = points_[i];
    std::sort(pts.begin(), pts.end());
    pts.erase(std::unique(pts.begin(), pts.end()), pts.end());
    if (pts.empty()) {
      return UnavailableError(fmt::format("EC2 market feed: no spot price of {} in {} yet",
                                          opt_.instance_type, opt_.zones[i]));
    }
  }
  for (size_t i = 0; i < traces_.size(); ++i) {
    const auto& pts = points_[i];
    market::Trace& t = *traces_[i];
    for (int64_t k = known_; k <= abs; ++k) {
      const double at = opt_.start_unix_s + static_cast<double>(k) * opt_.gap_seconds;
      auto after = std::upper_bound(pts.begin(), pts.end(), std::make_pair(at, 1e300));
      const double price = after == pts.begin() ? pts.front().second : std::prev(after)->second;
      t.available.push_back(opt_.assumed_available);
      t.price.push_back(price);
    }
  }
  known_ = abs + 1;
  return Status::Ok();
}

}  // namespace spot::cloud
