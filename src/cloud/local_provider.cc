#include "cloud/local_provider.h"

#include <fmt/format.h>
#include <signal.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <system_error>
#include <utility>

#include "core/logging.h"
#include "core/process.h"
#include "fleet/fleet.h"

namespace spot::cloud {

std::string EncodeLocalInstanceData(const LocalInstanceData& d) {
  return nlohmann::json{{"pid", d.pid}, {"metadata_port", d.metadata_port}}.dump();
}

Result<LocalInstanceData> DecodeLocalInstanceData(const std::string& text) {
  auto j = nlohmann::json::parse(text, nullptr, false);
  if (j.is_discarded() || !j.is_object() || !j.contains("pid") || !j["pid"].is_number_integer() ||
      !j.contains("metadata_port") || !j["metadata_port"].is_number_integer()) {
    return InvalidArgumentError("not the local provider's instance data: '" + text + "'");
  }
  return LocalInstanceData{.pid = j["pid"].get<int64_t>(),
                           .metadata_port = j["metadata_port"].get<int>()};
}
namespace {

// SIGKILL to an instance's worker and everything it started (its session:
// the worker is spawned as a session leader), as a machine going away does.
void KillMachine(int64_t pid) {
  SignalProcess(pid, SIGKILL);
  SignalSession(pid, SIGKILL);
}

namespace fs = std::filesystem;

constexpr double kEps = 1e-9;  // of a tick: a time on a boundary is in the tick it starts

}  // namespace

const char* InstanceStateName(InstanceState s) {
  switch (s) {
    case InstanceState::kRunning:
      return "running";
    case InstanceState::kPreempted:
      return "preempted";
    case InstanceState::kTerminated:
      return "terminated";
    case InstanceState::kLost:
      return "lost";
  }
  return "?";
}

const char* ProviderEventName(ProviderEvent::Kind k) {
  switch (k) {
    case ProviderEvent::Kind::kNotice:
      return "notice";
    case ProviderEvent::Kind::kPreempted:
      return "preempt";
    case ProviderEvent::Kind::kExited:
      return "exit";
  }
  return "?";
}

LocalProvider::LocalProvider(LocalProviderOptions options) : opt_(std::move(options)) {
  if (!opt_.clock) opt_.clock = RealClock();
  gap_s_ = opt_.zones.empty() ? 1 : opt_.zones[0]->gap_seconds;
}

LocalProvider::~LocalProvider() = default;

int64_t LocalProvider::TickOf(double sim_s) const {
  return static_cast<int64_t>(std::floor(sim_s / gap_s_ + kEps));
}

int LocalProvider::Capacity(int zone, int64_t abs_tick) const {
  return fleet::SpotCapacity(*opt_.zones[zone], abs_tick);
}

double LocalProvider::Price(int zone, int64_t abs_tick) const {
  return fleet::SpotPrice(*opt_.zones[zone], abs_tick);
}

double LocalProvider::WallUnixS(double sim_s) const {
  return opt_.wall_epoch_unix_s + sim_s / opt_.time_compression;
}

Status LocalProvider::StartMetadata(Instance& inst, int port) {
  const InstanceSpec& s = inst.view.spec;
  SPOT_ASSIGN_OR_RETURN(inst.metadata, MetadataServer::Start({.instance_id = s.id,
                                                              .instance_type = s.instance_type,
                                                              .region = s.region,
                                                              .zone = s.zone_name,
                                                              .spot = s.spot},
                                                             "127.0.0.1", port, opt_.clock));
  inst.data.metadata_port = inst.metadata->port();
  inst.view.provider_data = EncodeLocalInstanceData(inst.data);
  if (inst.view.notice_s >= 0) {
    inst.metadata->SetNotice(
        {.action = "terminate", .time_unix_s = WallUnixS(inst.view.reclaim_s)});
  }
  return Status::Ok();
}

Result<InstanceView> LocalProvider::Launch(const InstanceSpec& spec, double now_s) {
  if (instances_.count(spec.id)) return InvalidArgumentError("instance " + spec.id + " exists");
  Advance(now_s);
  if (spec.spot) {
    if (spec.zone < 0 || spec.zone >= static_cast<int>(opt_.zones.size())) {
      return InvalidArgumentError(fmt::format("instance {}: no zone {}", spec.id, spec.zone));
    }
    const int64_t abs = opt_.start_tick + TickOf(now_s);
    int held = 0;
    for (const auto& [id, i] : instances_) {
      held += i.view.state == InstanceState::kRunning && i.view.spec.spot &&
                      i.view.spec.zone == spec.zone
                  ? 1
                  : 0;
    }
    const int capacity = Capacity(spec.zone, abs);
    if (held >= capacity) {
      return UnavailableError(fmt::format(
          "InsufficientInstanceCapacity: no spot capacity for another {} in {} at tick {} "
          "({} held, room for {})",
          spec.instance_type, spec.zone_name, abs, held, capacity));
    }
    const double price = Price(spec.zone, abs);
    if (spec.max_price > 0 && price > spec.max_price) {
      return UnavailableError(
          fmt::format("SpotMaxPriceTooLow: the bid {} $/h is below the spot price {} $/h of {} "
                      "at tick {}",
                      spec.max_price, price, spec.zone_name, abs));
    }
  }
  Instance inst;
  inst.view.spec = spec;
  inst.view.launched_s = now_s;
  inst.view.reclaim_s = -1;  // known once the market gives notice
  inst.seq = next_seq_++;
  inst.local_dir = (fs::path(opt_.instances_dir) / spec.id).string();
  std::error_code ec;
  fs::create_directories(inst.local_dir, ec);
  if (ec) return InternalError(fmt::format("{}: {}", inst.local_dir, ec.message()));
  SPOT_RETURN_IF_ERROR(StartMetadata(inst, 0));
  const std::string endpoint = inst.metadata->endpoint();
  std::vector<std::pair<std::string, std::string>> env;
  if (opt_.metadata_flavor == "gcp") {
    env.emplace_back("GCE_METADATA_HOST", endpoint.substr(endpoint.find("//") + 2));
  } else if (opt_.metadata_flavor == "azure") {
    env.emplace_back("SPOT_AZURE_METADATA_ENDPOINT", endpoint);
  } else {
    env.emplace_back("AWS_EC2_METADATA_SERVICE_ENDPOINT", endpoint);
  }
  // Its output goes to a file: JSON lines, with the job and the instance.
  for (auto& kv : ChildLogEnvironment({{"instance", spec.id}})) env.push_back(std::move(kv));
  SpawnOptions so{.argv = opt_.command(spec, inst.local_dir),
                  .env = std::move(env),
                  .log_path = (fs::path(opt_.instances_dir) / (spec.id + ".log")).string()};
  SPOT_ASSIGN_OR_RETURN(inst.data.pid, Spawn(so));
  inst.view.provider_data = EncodeLocalInstanceData(inst.data);
  InstanceView view = inst.view;
  instances_.emplace(spec.id, std::move(inst));
  return view;
}

void LocalProvider::End(Instance& inst, InstanceState state, double at_s) {
  inst.view.state = state;
  inst.view.ended_s = at_s;
  inst.metadata.reset();
}

Status LocalProvider::Terminate(const std::string& id, double now_s) {
  auto it = instances_.find(id);
  if (it == instances_.end()) return NotFoundError("no instance " + id);
  Advance(now_s);  // the market may have taken it first
  Instance& inst = it->second;
  if (inst.view.state != InstanceState::kRunning) return Status::Ok();
  if (inst.view.process_running) SignalProcess(inst.data.pid, SIGTERM);  // never a reaped pid
  inst.term_sent_wall = opt_.clock->NowUnixS();
  End(inst, InstanceState::kTerminated, now_s);
  return Status::Ok();
}

Status LocalProvider::Adopt(const InstanceView& recorded, double now_s) {
  const std::string& id = recorded.spec.id;
  Instance inst;
  inst.view = recorded;
  inst.view.state = InstanceState::kRunning;
  inst.view.ended_s = -1;
  inst.own_child = false;
  inst.seq = next_seq_++;
  inst.local_dir = (fs::path(opt_.instances_dir) / id).string();
  auto data = DecodeLocalInstanceData(recorded.provider_data);
  if (data.ok()) inst.data = *data;
  if (!data.ok() || !ProcessMatches(inst.data.pid, id)) {
    End(inst, InstanceState::kLost, now_s);
    inst.view.process_running = false;
    instances_[id] = std::move(inst);
    return NotFoundError(
        data.ok() ? fmt::format("instance {} (pid {}) is no longer running", id, inst.data.pid)
                  : fmt::format("instance {}: {}", id, data.status().message()));
  }
  // A notice given before the restart stands, for the boundary it named; none
  // is predicted from the launch (the rule depends on the whole fleet).
  if (!recorded.spec.spot || recorded.notice_s < 0) {
    inst.view.notice_s = -1;
    inst.view.reclaim_s = -1;
  } else {
    if (recorded.reclaim_s < 0) {
      // Only the notice's time was kept: its boundary is notice_s after it,
      // unless the notice came at the launch (inside the window): then it is
      // one of the boundaries up to notice_s after it, the first of them at
      // which the rule takes the instance, the last when none does.
      int64_t b = TickOf(recorded.notice_s + std::max(0.0, opt_.notice_s));
      if (static_cast<double>(b) * gap_s_ <= recorded.notice_s + kEps) {
        b = TickOf(recorded.notice_s) + 1;
      }
      inst.view.reclaim_s = static_cast<double>(b) * gap_s_;
      inst.boundary_guessed = recorded.notice_s <= recorded.launched_s + kEps;
    }
    inst.reclaim_why = "noticed before the restart";
  }
  // The boundaries since its launch are applied again at the next Poll, to
  // the fleet as adopted: none takes an instance the market had left running
  // (a fleet that lost instances since holds fewer above any capacity).
  done_tick_ = std::min(done_tick_, TickOf(recorded.launched_s));
  // Re-serve its metadata where the worker looks for it; a notice already due is set again.
  SPOT_RETURN_IF_ERROR(StartMetadata(inst, inst.data.metadata_port));
  instances_[id] = std::move(inst);
  return Status::Ok();
}

std::vector<InstanceView> LocalProvider::List() const {
  std::vector<InstanceView> out;
  for (const auto& [id, inst] : instances_) out.push_back(inst.view);
  return out;
}

void LocalProvider::CheckExit(Instance& inst, double now_s) {
  InstanceView& v = inst.view;
  if (!v.process_running) return;
  ProcessStatus ps = CheckProcess(inst.data.pid);
  if (ps.running) return;
  v.process_running = false;
  v.exit_code = ps.exit_code;
  if (v.state == InstanceState::kRunning) {
    pending_.push_back({ProviderEvent::Kind::kExited, v.spec.id, now_s,
                        ps.signal != 0 ? fmt::format("killed by signal {}", ps.signal)
                                       : fmt::format("exit code {}", ps.exit_code)});
  }
}

void LocalProvider::Notice(Instance& inst, double boundary_s, const std::string& why) {
  InstanceView& v = inst.view;
  v.reclaim_s = boundary_s;
  inst.reclaim_why = why;
  if (opt_.notice_s <= 0) return;
  v.notice_s = std::max(v.launched_s, boundary_s - opt_.notice_s);
  if (inst.metadata) {
    inst.metadata->SetNotice({.action = "terminate", .time_unix_s = WallUnixS(boundary_s)});
  }
  pending_.push_back({ProviderEvent::Kind::kNotice, v.spec.id, v.notice_s,
                      fmt::format("reclaim at {:.0f} s: {}", boundary_s, why)});
}

void LocalProvider::Reclaim(Instance& inst, double now_s) {
  CheckExit(inst, now_s);  // an exit before the reclaim is still reported
  InstanceView& v = inst.view;
  // The machine goes, with everything that runs on it (the worker's session).
  if (v.process_running) KillMachine(inst.data.pid);
  End(inst, InstanceState::kPreempted, v.reclaim_s);  // billed up to the boundary
  pending_.push_back({ProviderEvent::Kind::kPreempted, v.spec.id, v.reclaim_s,
                      inst.reclaim_why.empty() ? "spot capacity reclaimed" : inst.reclaim_why});
}

std::vector<std::vector<LocalProvider::Instance*>> LocalProvider::RunningSpotPools() {
  const int zones = static_cast<int>(opt_.zones.size());
  std::vector<std::vector<Instance*>> pools(zones);
  for (auto& [id, inst] : instances_) {
    const InstanceView& v = inst.view;
    if (v.state == InstanceState::kRunning && v.spec.spot && v.spec.zone >= 0 &&
        v.spec.zone < zones) {
      pools[v.spec.zone].push_back(&inst);
    }
  }
  for (auto& pool : pools) {
    std::sort(pool.begin(), pool.end(), [](const Instance* a, const Instance* b) {
      return std::pair(a->view.launched_s, a->seq) < std::pair(b->view.launched_s, b->seq);
    });
  }
  return pools;
}

std::vector<LocalProvider::Instance*> LocalProvider::TakenAt(int z, int64_t b,
                                                             const std::vector<Instance*>& pool) {
  const double at = static_cast<double>(b) * gap_s_;
  const int64_t abs = opt_.start_tick + b;
  std::vector<double> bids;
  std::vector<Instance*> held;
  std::vector<Instance*> taken;
  for (Instance* i : pool) {
    if (TickOf(i->view.launched_s) >= b) continue;  // launched after this boundary's reclaim
    if (i->view.reclaim_s >= 0 && TickOf(i->view.reclaim_s) <= b) {
      taken.push_back(i);  // noticed for this boundary: a commitment, whatever the fleet now
      continue;
    }
    bids.push_back(i->view.spec.max_price);
    held.push_back(i);
  }
  const int capacity = Capacity(z, abs);
  const double price = Price(z, abs);
  for (size_t k : fleet::ReclaimedInPool(bids, capacity, price)) {
    Instance* i = held[k];
    if (i->boundary_guessed) {
      // An adopted notice: the first boundary after it that takes the
      // instance is the one it named (none earlier on a fleet that can
      // only have lost instances since).
      if (at <= i->view.notice_s + kEps) continue;
      i->view.reclaim_s = at;
      i->boundary_guessed = false;
      if (i->metadata) {
        i->metadata->SetNotice({.action = "terminate", .time_unix_s = WallUnixS(at)});
      }
      taken.push_back(i);
      continue;
    }
    // Noticed for a later boundary: taken there, as the notice said (the
    // rule does not take it earlier: since the notice, the fleet can only
    // have lost instances or gained newer ones).
    if (i->view.reclaim_s >= 0) continue;
    Notice(
        *i, at,
        bids[k] > 0 && price > bids[k]
            ? fmt::format("the spot price {} $/h of {} is above the bid {} $/h", price,
                          i->view.spec.zone_name, bids[k])
            : fmt::format("{} has room for {} spot instances", i->view.spec.zone_name, capacity));
    taken.push_back(i);
  }
  return taken;
}

void LocalProvider::Advance(double now_s) {
  const int64_t now_tick = TickOf(now_s);
  // Boundaries up to now_tick happen; those up to `last` are foreseen (notices).
  const int64_t last =
      opt_.notice_s > 0 ? std::max(now_tick, TickOf(now_s + opt_.notice_s)) : now_tick;
  if (last <= done_tick_) return;
  std::vector<std::vector<Instance*>> pools = RunningSpotPools();
  size_t left = 0;
  for (const auto& pool : pools) left += pool.size();
  // One boundary after another on the fleet as it stands, each taking what
  // the market takes there: what is taken by now_tick is reclaimed, what is
  // taken later is only noticed (and gone for the boundaries after it).
  for (int64_t b = done_tick_ + 1; b <= last && left > 0; ++b) {
    for (int z = 0; z < static_cast<int>(pools.size()); ++z) {
      if (pools[z].empty()) continue;
      for (Instance* i : TakenAt(z, b, pools[z])) {
        if (b <= now_tick) Reclaim(*i, now_s);
        std::erase(pools[z], i);
        --left;
      }
    }
  }
  done_tick_ = std::max(done_tick_, now_tick);
}

Result<std::vector<ProviderEvent>> LocalProvider::Poll(double now_s) {
  const double wall = opt_.clock->NowUnixS();
  for (auto& [id, inst] : instances_) CheckExit(inst, now_s);
  // The market decides, whatever the processes did meanwhile.
  Advance(now_s);
  for (auto& [id, inst] : instances_) {
    InstanceView& v = inst.view;
    if (v.state != InstanceState::kRunning && v.process_running && inst.term_sent_wall >= 0 &&
        wall - inst.term_sent_wall > opt_.terminate_grace_wall_s) {
      KillMachine(inst.data.pid);
    }
    // An ended instance's local disk goes once its process is gone.
    if (v.state != InstanceState::kRunning && !v.process_running && !inst.local_dir.empty()) {
      std::error_code ec;
      fs::remove_all(inst.local_dir, ec);
      if (!ec) inst.local_dir.clear();
    }
  }
  std::vector<ProviderEvent> events = std::move(pending_);
  pending_.clear();
  std::stable_sort(
      events.begin(), events.end(),
      [](const ProviderEvent& a, const ProviderEvent& b) { return a.sim_s < b.sim_s; });
  return events;
}

}  // namespace spot::cloud
