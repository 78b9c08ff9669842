#include "policy/fleet_up.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "policy/uniform_progress.h"
#include "policy/zone_choice.h"

namespace spot::policy {
namespace {

using fleet::PoolRef;

constexpr double kEps = 1e-9;

// Instances of throughput `thr` that cover `need` units (0 when none is needed).
int InstancesFor(double need, double thr) {
  return need > kEps ? static_cast<int>(std::ceil(need / thr - kEps)) : 0;
}

bool IsGang(const JobSpec& job) { return job.min_nodes <= 0 || job.min_nodes >= job.nodes; }

class FleetUpPolicy final : public Policy {
 public:
  explicit FleetUpPolicy(FleetUpOptions o) : o_(o), up_(MakeUniformProgressPolicy()) {
    o_.spread = std::max<int64_t>(1, o_.spread);
  }
  std::string_view name() const override { return "fleet-up"; }
  void Start(const JobStart& start) override {
    up_->Start(start);
    net_.Reset();
  }
  Decision Decide(const Observation& obs) override;

 private:
  // The catalog facts of the observation, or the uniform ones.
  struct Facts {
    std::span<const fleet::TypeFacts> types;  // empty: uniform
    double Throughput(int z) const { return types.empty() ? 1.0 : types[z].throughput; }
  };
  void CountHeld(const Observation& obs);
  void RankPools(const Observation& obs, const Facts& facts, double bid);
  bool Cheaper(int a, int b) const {
    return unit_price_[a] != unit_price_[b] ? unit_price_[a] < unit_price_[b] : a < b;
  }
  // Adds up to `room` instances of zone z's pool while `need` units or
  // `min_nodes` instances are missing.
  int Take(int z, int room, const Facts& facts, double* need, int* count) const;
  // New spot from the usable pools, cheapest first, while anything is missing.
  void Fill(const Facts& facts, double* need, int* count);
  Decision Build(int od, double bid) const;

  FleetUpOptions o_;
  std::unique_ptr<Policy> up_;  // gang jobs
  LatchedSafetyNet net_;
  int min_nodes_ = 1;
  int per_pool_ = 1;
  // Scratch space, kept between ticks to spare the allocations.
  std::vector<int> held_;           // live spot instances per zone
  std::vector<int> held_zones_;     // zones with any
  int held_od_ = 0;                 // live on-demand reference instances
  std::vector<int> room_;           // spot instances a zone's pool may hold now (0: unusable)
  std::vector<int> take_;           // instances to hold per zone
  std::vector<int> order_;          // usable zones
  std::vector<double> unit_price_;  // $ per unit of throughput per zone
};

void FleetUpPolicy::CountHeld(const Observation& obs) {
  const int zones = obs.market.num_zones();
  held_.assign(zones, 0);
  held_zones_.clear();
  held_od_ = 0;
  for (const fleet::Instance& i : obs.fleet) {
    if (i.state == fleet::InstanceState::kPreempted) continue;
    if (i.pool.spot() && i.pool.zone >= 0 && i.pool.zone < zones) {
      if (held_[i.pool.zone]++ == 0) held_zones_.push_back(i.pool.zone);
    } else if (i.pool == PoolRef::OnDemand()) {
      ++held_od_;
    }
  }
}

// The pools usable now: capacity, under the bid, not dearer per unit than
// on-demand.
void FleetUpPolicy::RankPools(const Observation& obs, const Facts& facts, double bid) {
  const MarketView& m = obs.market;
  const int zones = m.num_zones();
  const double od_unit = facts.types.empty()
                             ? obs.job.ondemand_price
                             : facts.types.back().ondemand_price / facts.types.back().throughput;
  room_.assign(zones, 0);
  unit_price_.resize(zones);
  order_.clear();
  for (int z = 0; z < zones; ++z) {
    const double price = m.PriceNow(z);
    unit_price_[z] = price / facts.Throughput(z);
    const int capacity = m.AvailabilityHistory(z).back();
    if (capacity <= 0 || (bid > 0 && price > bid) || unit_price_[z] > od_unit + kEps) continue;
    room_[z] = std::min(capacity, per_pool_);
    order_.push_back(z);
  }
}

int FleetUpPolicy::Take(int z, int room, const Facts& facts, double* need, int* count) const {
  const int n =
      std::min(room, std::max(InstancesFor(*need, facts.Throughput(z)), min_nodes_ - *count));
  if (n <= 0) return 0;
  *need -= n * facts.Throughput(z);
  *count += n;
  return n;
}

// Usually a few pools place the fleet: order the usable ones a few at a
// time (partial sorts) rather than all of them every tick.
void FleetUpPolicy::Fill(const Facts& facts, double* need, int* count) {
  const auto cheaper = [this](int a, int b) { return Cheaper(a, b); };
  const size_t chunk = static_cast<size_t>(o_.spread) + 1;
  size_t sorted = 0;
  for (size_t i = 0; i < order_.size() && (*need > kEps || *count < min_nodes_); ++i) {
    if (i == sorted) {
      sorted = std::min(order_.size(), i + chunk);
      std::partial_sort(order_.begin() + i, order_.begin() + sorted, order_.end(), cheaper);
    }
    const int z = order_[i];
    take_[z] += Take(z, room_[z] - take_[z], facts, need, count);
  }
}

Decision FleetUpPolicy::Build(int od, double bid) const {
  Decision d;
  d.fleet.reserve(std::count_if(take_.begin(), take_.end(), [](int n) { return n > 0; }) + 1);
  for (int z = 0; z < static_cast<int>(take_.size()); ++z) {
    if (take_[z] > 0)
      d.fleet.push_back({.pool = PoolRef::Spot(z), .count = take_[z], .max_price = bid});
  }
  if (od > 0) d.fleet.push_back({.pool = PoolRef::OnDemand(), .count = od});
  return d;
}

Decision FleetUpPolicy::Decide(const Observation& obs) {
  const JobSpec& job = obs.job;
  if (IsGang(job)) return up_->Decide(obs);
  if (net_.Engaged(obs)) return obs.Gang(Placement::OnDemand());
  min_nodes_ = job.min_nodes;
  per_pool_ = static_cast<int>((job.nodes + o_.spread - 1) / o_.spread);
  const int zones = obs.market.num_zones();
  const Facts facts{obs.types.size() == static_cast<size_t>(zones) + 1
                        ? obs.types
                        : std::span<const fleet::TypeFacts>()};
  const double ref_thr = facts.types.empty() ? 1.0 : facts.types.back().throughput;
  const double bid = o_.max_price_factor > 0 ? o_.max_price_factor * job.ondemand_price : 0;
  CountHeld(obs);
  RankPools(obs, facts, bid);
  double need = job.nodes;  // reference units of throughput still to place
  int count = 0;
  take_.assign(zones, 0);
  // Keep what is held where its pool still has room (a move costs a
  // changeover), the cheapest first should the fleet hold more than it needs.
  std::sort(held_zones_.begin(), held_zones_.end(), [this](int a, int b) { return Cheaper(a, b); });
  for (int z : held_zones_) take_[z] = Take(z, std::min(held_[z], room_[z]), facts, &need, &count);
  const double p = obs.progress_hours;
  const bool hysteresis =
      held_od_ > 0 && p < ExpectedProgress(job, obs.time_hours + 2 * job.changeover_hours);
  const bool behind = hysteresis || p < ExpectedProgress(job, obs.time_hours);
  int od = 0;
  if (hysteresis) {
    od = std::min(held_od_, InstancesFor(need, ref_thr));
    need -= od * ref_thr;
    count += od;
  }
  Fill(facts, &need, &count);
  if (behind) {
    const int more = std::max(InstancesFor(need, ref_thr), min_nodes_ - count);
    od += more;
    count += more;
  }
  if (count < min_nodes_) return {};  // too few to make progress: none billed
  return Build(od, bid);
}

}  // namespace

void DeclareFields(FleetUpOptions& o, FieldVisitor& v) {
  v.Int("spread", &o.spread, {.min = 1},
        "at most ceil(N / spread) instances in one spot pool (1: one pool may hold the fleet)");
  v.Double("max_price_factor", &o.max_price_factor, {.min = 0},
           "spot bid as a multiple of the on-demand price; 0: no bid");
}

std::unique_ptr<Policy> MakeFleetUpPolicy(FleetUpOptions options) {
  return std::make_unique<FleetUpPolicy>(options);
}

}  // namespace spot::policy
