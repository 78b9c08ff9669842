#include "market/feed.h"

namespace spot::market {
namespace {

class ReplayedFeed final : public MarketFeed {
 public:
  explicit ReplayedFeed(std::vector<const Trace*> zones) : zones_(std::move(zones)) {}
  std::span<const Trace* const> zones() const override { return zones_; }
  Status Advance(int64_t abs) override { return Status::Ok(); }
  int64_t known_ticks() const override { return zones_.empty() ? 0 : zones_[0]->ticks(); }

 private:
  std::vector<const Trace*> zones_;
};

}  // namespace

std::unique_ptr<MarketFeed> MakeReplayedFeed(std::vector<const Trace*> zones) {
  return std::make_unique<ReplayedFeed>(std::move(zones));
}

}  // namespace spot::market
