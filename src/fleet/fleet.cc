#include "fleet/fleet.h"

#include <algorithm>
#include <utility>

namespace spot::fleet {
namespace {

constexpr double kEps = 1e-9;

bool Live(const Instance& i) { return i.state != InstanceState::kPreempted; }

}  // namespace

const char* InstanceStateName(InstanceState s) {
  switch (s) {
    case InstanceState::kStarting:
      return "starting";
    case InstanceState::kRunning:
      return "running";
    case InstanceState::kNoticed:
      return "noticed";
    case InstanceState::kPreempted:
      return "preempted";
  }
  return "?";
}

FleetModel::FleetModel(std::span<const market::Trace* const> zones, std::vector<TypeFacts> types,
                       FleetJob job)
    : zones_(zones),
      types_(std::move(types)),
      job_(job),
      h_(zones.empty() ? 0 : zones[0]->gap_seconds / 3600.0) {
  if (job_.checkpoint_gb <= 0) return;
  std::vector<std::string> regions;
  for (const market::Trace* z : zones) regions.push_back(RegionOf(z->pool));
  // A pair without a price is caught by the drivers' validation (SpotSim's
  // ValidateMarket); here it leaves moves free.
  auto usd = MigrationMatrix(regions, job_.checkpoint_gb, job_.egress);
  if (usd.ok()) move_usd_ = std::move(usd).value();
}

int SpotCapacity(const market::Trace& t, int64_t abs) {
  return abs >= 0 && abs < t.ticks() ? t.available[abs] : 0;
}

double SpotPrice(const market::Trace& t, int64_t abs) {
  if (!t.has_prices()) return 1.0;
  return t.price[std::clamp<int64_t>(abs, 0, t.ticks() - 1)];
}

int FleetModel::Capacity(int z, int64_t abs) const { return SpotCapacity(*zones_[z], abs); }

const TypeFacts& FleetModel::Type(const PoolRef& pool) const {
  return pool.zone < 0 ? types_.back() : types_[pool.zone];
}

double FleetModel::Price(const PoolRef& pool, int64_t abs) const {
  return pool.spot() ? SpotPrice(*zones_[pool.zone], abs) : Type(pool).ondemand_price;
}

int FleetModel::Held(const PoolRef& pool) const {
  int n = 0;
  for (const Instance& i : instances_) n += Live(i) && i.pool == pool ? 1 : 0;
  return n;
}

double FleetModel::Rate(std::span<const Instance* const> ready) const {
  const int n = static_cast<int>(ready.size());
  if (n == 0 || n < job_.min_nodes) return 0;
  double sum = 0;
  double slowest = Type(ready[0]->pool).throughput;
  for (const Instance* i : ready) {
    const double thr = Type(i->pool).throughput;
    sum += thr;
    slowest = std::min(slowest, thr);
  }
  return (job_.balanced ? sum : slowest * n) / job_.nodes;
}

int FleetModel::Reclaim(int64_t abs) {
  if (preempted_ > 0) std::erase_if(instances_, [](const Instance& i) { return !Live(i); });
  preempted_ = 0;
  // Fast path: no bid below the price and no pool above its capacity.
  bool any = false;
  held_per_zone_.assign(zones_.size(), 0);
  for (const Instance& i : instances_) {
    if (!i.pool.spot()) continue;
    ++held_per_zone_[i.pool.zone];
    any = any || (i.max_price > 0 && Price(i.pool, abs) > i.max_price);
  }
  if (!any && !AnyAboveCapacity(abs)) return 0;
  std::vector<double> bids;
  std::vector<Instance*> held;
  for (int z = 0; z < static_cast<int>(zones_.size()); ++z) {
    if (held_per_zone_[z] == 0) continue;
    bids.clear();
    held.clear();
    for (Instance& i : instances_) {
      if (i.pool == PoolRef::Spot(z)) {
        bids.push_back(i.max_price);
        held.push_back(&i);
      }
    }
    for (size_t k : ReclaimedInPool(bids, Capacity(z, abs), Price(PoolRef::Spot(z), abs))) {
      held[k]->state = InstanceState::kPreempted;
      ++preempted_;
    }
  }
  return preempted_;
}

bool FleetModel::AnyAboveCapacity(int64_t abs) const {
  for (size_t z = 0; z < held_per_zone_.size(); ++z) {
    if (held_per_zone_[z] > Capacity(static_cast<int>(z), abs)) return true;
  }
  return false;
}

void FleetModel::Launch(const PoolTarget& t, int n, int64_t abs) {
  const int z = t.pool.zone;
  if (n > 0 && z >= 0) {  // the reference type's on-demand runs where the state is
    if (state_zone_ >= 0 && !move_usd_.empty()) {
      const double usd = move_usd_[state_zone_ * zones_.size() + z];
      if (usd > 0) {
        pending_migration_ += usd;
        ++migrations_;
      }
    }
    state_zone_ = z;
  }
  for (int k = 0; k < n; ++k) {
    instances_.push_back(
        {.id = next_id_++,
         .pool = t.pool,
         .state = job_.startup_hours > 0 ? InstanceState::kStarting : InstanceState::kRunning,
         .launched_tick = abs,
         .startup_left_hours = job_.startup_hours,
         .max_price = t.pool.spot() ? t.max_price : 0});
  }
}

void FleetModel::Terminate(const PoolRef& pool, int n) {
  for (int k = static_cast<int>(instances_.size()) - 1; n > 0 && k >= 0; --k) {
    if (Live(instances_[k]) && instances_[k].pool == pool) {
      instances_.erase(instances_.begin() + k);
      --n;
    }
  }
}

int FleetModel::Apply(std::span<const PoolTarget> targets, int64_t abs) {
  const int zones = static_cast<int>(zones_.size());
  auto valid = [zones](const PoolRef& p) {
    return p.zone < zones && (p.zone >= 0 || (p.zone == -1 && !p.spot()));
  };
  auto wanted = [&](const PoolRef& p) -> const PoolTarget* {
    for (const PoolTarget& t : targets) {
      if (t.pool == p && valid(p)) return &t;
    }
    return nullptr;
  };
  // Pools the decision does not name hold nothing.
  std::vector<PoolRef> held_pools;
  for (const Instance& i : instances_) {
    if (Live(i) && !wanted(i.pool)) held_pools.push_back(i.pool);
  }
  for (const PoolRef& p : held_pools) Terminate(p, Held(p));
  int launched = 0;
  for (size_t k = 0; k < targets.size(); ++k) {
    const PoolTarget& t = targets[k];
    if (!valid(t.pool) || wanted(t.pool) != &t) continue;  // invalid, or named twice
    const int held = Held(t.pool);
    int want = std::max(0, t.count);
    if (t.pool.spot()) {
      const bool price_ok = t.max_price <= 0 || Price(t.pool, abs) <= t.max_price;
      want = std::min(want, price_ok ? Capacity(t.pool.zone, abs) : held);
    }
    if (want < t.min_count) want = 0;
    if (want > held) {
      Launch(t, want - held, abs);
      launched += want - held;
    } else if (want < held) {
      Terminate(t.pool, held - want);
    }
  }
  return launched;
}

TickOutcome FleetModel::RunTick(int64_t abs, double progress) {
  TickOutcome out{.progress = progress, .cost = pending_migration_};
  out.migration_cost = pending_migration_;
  pending_migration_ = 0;
  // Each live instance is ready from offset `c` of the tick on.
  ready_at_.clear();
  for (Instance& i : instances_) {
    if (!Live(i)) continue;
    const double c = std::min(i.startup_left_hours, h_);
    i.startup_left_hours -= c;
    if (i.startup_left_hours <= 0 && i.state == InstanceState::kStarting) {
      i.state = InstanceState::kRunning;
    }
    ready_at_.emplace_back(c, &i);
  }
  if (ready_at_.empty()) return out;
  auto by_offset = [](const auto& a, const auto& b) { return a.first < b.first; };
  if (ready_at_.size() > 1 && !std::is_sorted(ready_at_.begin(), ready_at_.end(), by_offset)) {
    std::stable_sort(ready_at_.begin(), ready_at_.end(), by_offset);
  }
  double end = h_;
  ready_.clear();
  for (size_t k = 0; k < ready_at_.size() && !out.done && progress < job_.compute_hours;) {
    const double from = ready_at_[k].first;
    for (; k < ready_at_.size() && ready_at_[k].first == from; ++k) {
      ready_.push_back(ready_at_[k].second);
    }
    const double to = k < ready_at_.size() ? ready_at_[k].first : h_;
    const double rate = Rate(ready_);
    if (rate <= 0) continue;
    const double w = rate * (to - from);
    if (out.progress + w >= job_.compute_hours - kEps) {
      end = from + std::max(0.0, (job_.compute_hours - out.progress) / rate);
      out.progress = job_.compute_hours;
      out.done = true;
    } else {
      out.progress += w;
    }
  }
  out.used_hours = end;
  // Bill per pool: (price x instances) x hours, the gang's arithmetic.
  pools_.clear();
  for (const auto& [c, i] : ready_at_) {
    auto it = !pools_.empty() && pools_.back().first == i->pool
                  ? pools_.end() - 1
                  : std::find_if(pools_.begin(), pools_.end(),
                                 [&](const auto& p) { return p.first == i->pool; });
    if (it == pools_.end()) {
      pools_.emplace_back(i->pool, 1);
    } else {
      ++it->second;
    }
  }
  for (const auto& [pool, n] : pools_) {
    out.cost += Price(pool, abs) * n * end;
    (pool.spot() ? out.spot_hours : out.od_hours) += end * (static_cast<double>(n) / job_.nodes);
  }
  return out;
}

int64_t FleetModel::Add(const PoolRef& pool, double max_price, int64_t abs) {
  Launch({.pool = pool, .max_price = max_price}, 1, abs);
  return instances_.back().id;
}

bool FleetModel::Remove(int64_t id) {
  auto it = std::find_if(instances_.begin(), instances_.end(),
                         [id](const Instance& i) { return i.id == id && Live(i); });
  if (it == instances_.end()) return false;
  instances_.erase(it);
  return true;
}

void FleetModel::Clear() {
  instances_.clear();
  preempted_ = 0;
}

std::vector<size_t> ReclaimedInPool(std::span<const double> bids_in_launch_order, int capacity,
                                    double price) {
  std::vector<size_t> out;
  std::vector<bool> taken(bids_in_launch_order.size(), false);
  int left = 0;
  for (size_t k = 0; k < bids_in_launch_order.size(); ++k) {
    const double bid = bids_in_launch_order[k];
    taken[k] = bid > 0 && price > bid;
    left += taken[k] ? 0 : 1;
  }
  for (size_t k = bids_in_launch_order.size(); k-- > 0 && left > capacity;) {
    if (!taken[k]) {
      taken[k] = true;
      --left;
    }
  }
  for (size_t k = 0; k < taken.size(); ++k) {
    if (taken[k]) out.push_back(k);
  }
  return out;
}

std::vector<TypeFacts> UniformTypes(std::span<const market::Trace* const> zones,
                                    double ondemand_price) {
  std::vector<TypeFacts> types;
  for (const market::Trace* t : zones) {
    types.push_back({.instance_type = t->pool.instance_type, .ondemand_price = ondemand_price});
  }
  types.push_back({.instance_type = "reference", .ondemand_price = ondemand_price});
  return types;
}

}  // namespace spot::fleet
