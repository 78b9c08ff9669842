#include <fmt/format.h>

#include <algorithm>
#include <charconv>
#include <cstdlib>

#include "policy/observation.h"

namespace spot::policy {
namespace {

using fleet::PoolRef;
using fleet::PoolTarget;

bool Live(const fleet::Instance& i) { return i.state != fleet::InstanceState::kPreempted; }

// Parses a whole integer; false on anything else.
bool ParseInt(std::string_view s, int* out) {
  auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), *out);
  return ec == std::errc() && end == s.data() + s.size();
}

bool ParsePool(std::string_view item, PoolTarget* t) {
  const size_t colon = item.find(':');
  const size_t eq = item.find('=');
  if (colon == std::string_view::npos || eq == std::string_view::npos || eq < colon) return false;
  const std::string_view kind = item.substr(0, colon);
  if (kind != "spot" && kind != "od") return false;
  t->pool.lifecycle = kind == "spot" ? fleet::Lifecycle::kSpot : fleet::Lifecycle::kOnDemand;
  std::string_view count = item.substr(eq + 1);
  const size_t at = count.find('@');
  if (at != std::string_view::npos) {
    const std::string price(count.substr(at + 1));
    char* end = nullptr;
    t->max_price = std::strtod(price.c_str(), &end);
    if (price.empty() || *end != '\0') return false;
    count = count.substr(0, at);
  }
  const size_t slash = count.find('/');
  if (slash != std::string_view::npos) {
    if (!ParseInt(count.substr(slash + 1), &t->min_count)) return false;
    count = count.substr(0, slash);
  }
  return ParseInt(item.substr(colon + 1, eq - colon - 1), &t->pool.zone) &&
         ParseInt(count, &t->count);
}

}  // namespace

fleet::FleetJob ToFleetJob(const JobSpec& job) {
  return {.nodes = job.nodes,
          .min_nodes = job.min_nodes > 0 ? std::min(job.min_nodes, job.nodes) : job.nodes,
          .startup_hours = job.changeover_hours,
          .balanced = job.balanced,
          .compute_hours = job.compute_hours,
          .checkpoint_gb = job.checkpoint_gb,
          .egress = job.egress};
}

Decision GangDecision(const Placement& p, int nodes) {
  switch (p.kind) {
    case InstanceKind::kSpot:
      return {.fleet = {{.pool = PoolRef::Spot(p.zone), .count = nodes, .min_count = nodes}}};
    case InstanceKind::kOnDemand:
      return {.fleet = {{.pool = PoolRef::OnDemand(), .count = nodes, .min_count = nodes}}};
    case InstanceKind::kIdle:
      break;
  }
  return {};
}

std::optional<Placement> AsGang(std::span<const PoolTarget> fleet, int nodes) {
  if (fleet.empty()) return Placement::Idle();
  if (fleet.size() != 1) return std::nullopt;
  const PoolTarget& t = fleet[0];
  if (t.count == 0) return Placement::Idle();
  if (t.count != nodes || t.min_count != nodes || t.max_price != 0) return std::nullopt;
  if (t.pool.spot()) return Placement::Spot(t.pool.zone);
  if (t.pool.zone == -1) return Placement::OnDemand();
  return std::nullopt;
}

Placement GangOf(std::span<const fleet::Instance> instances, int nodes) {
  int live = 0;
  const fleet::Instance* first = nullptr;
  for (const fleet::Instance& i : instances) {
    if (!Live(i)) continue;
    if (first && !(first->pool == i.pool)) return Placement::Idle();
    first = first ? first : &i;
    ++live;
  }
  if (!first || live != nodes) return Placement::Idle();
  if (first->pool.spot()) return Placement::Spot(first->pool.zone);
  return first->pool.zone == -1 ? Placement::OnDemand() : Placement::Idle();
}

Observation ObserveFleet(int64_t tick, const JobSpec& job, double progress_hours, bool preempted,
                         const MarketView& market, std::span<const fleet::Instance> instances,
                         std::span<const fleet::TypeFacts> types) {
  const Placement current = GangOf(instances, job.nodes);
  double changeover_left = 0;  // of the gang; none when the fleet is not one
  for (const fleet::Instance& i : instances) {
    if (current.kind != InstanceKind::kIdle && Live(i)) {
      changeover_left = std::max(changeover_left, i.startup_left_hours);
    }
  }
  return {.tick = tick,
          .time_hours = static_cast<double>(tick) * market.gap_hours(),
          .job = job,
          .progress_hours = progress_hours,
          .current = current,
          .changeover_left_hours = changeover_left,
          .preempted_now = preempted,
          .market = market,
          .fleet = instances,
          .types = types};
}

std::string PlacementName(const Placement& p) {
  switch (p.kind) {
    case InstanceKind::kSpot:
      return fmt::format("spot:{}", p.zone);
    case InstanceKind::kOnDemand:
      return "od";
    case InstanceKind::kIdle:
      break;
  }
  return "idle";
}

std::string FleetName(std::span<const PoolTarget> fleet, int nodes) {
  if (auto gang = AsGang(fleet, nodes)) return PlacementName(*gang);
  std::string out;
  for (const PoolTarget& t : fleet) {
    if (t.count <= 0) continue;
    if (!out.empty()) out += '+';
    out += fmt::format("{}:{}={}", t.pool.spot() ? "spot" : "od", t.pool.zone, t.count);
    if (t.min_count > 0) out += fmt::format("/{}", t.min_count);
    if (t.max_price > 0) out += fmt::format("@{}", t.max_price);
  }
  return out.empty() ? "idle" : out;
}

std::vector<PoolTarget> ParseFleetName(const std::string& name, int nodes) {
  if (name == "od") return GangDecision(Placement::OnDemand(), nodes).fleet;
  int zone = 0;
  if (name.rfind("spot:", 0) == 0 && name.find('=') == std::string::npos) {
    if (!ParseInt(std::string_view(name).substr(5), &zone)) return {};
    return GangDecision(Placement::Spot(zone), nodes).fleet;
  }
  std::vector<PoolTarget> out;
  std::string_view rest = name;
  while (!rest.empty() && name != "idle") {
    const size_t plus = rest.find('+');
    PoolTarget t;
    if (!ParsePool(rest.substr(0, plus), &t)) return {};
    out.push_back(t);
    rest = plus == std::string_view::npos ? std::string_view() : rest.substr(plus + 1);
  }
  return out;
}

std::vector<PoolTarget> FleetOf(std::span<const fleet::Instance> instances, int nodes) {
  std::vector<PoolTarget> out;
  for (const fleet::Instance& i : instances) {
    if (!Live(i)) continue;
    auto it =
        std::find_if(out.begin(), out.end(), [&](const PoolTarget& t) { return t.pool == i.pool; });
    if (it == out.end()) {
      out.push_back({.pool = i.pool, .count = 1});
    } else {
      ++it->count;
    }
  }
  // A whole gang in one pool reads as the gang decision that made it.
  if (out.size() == 1 && out[0].count == nodes) out[0].min_count = nodes;
  return out;
}

}  // namespace spot::policy
