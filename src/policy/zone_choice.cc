#include "policy/zone_choice.h"

namespace spot::policy {

int PickSpotZone(const Observation& obs) {
  const MarketView& m = obs.market;
  if (obs.current.kind == InstanceKind::kSpot && m.AvailableNow(obs.current.zone)) {
    return obs.current.zone;
  }
  int best = -1;
  for (int z = 0; z < m.num_zones(); ++z) {
    if (!m.AvailableNow(z)) continue;
    if (best < 0 || m.PriceNow(z) < m.PriceNow(best)) best = z;
  }
  return best;
}

}  // namespace spot::policy
