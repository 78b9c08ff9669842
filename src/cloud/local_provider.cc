#include "cloud/local_provider.h"

#include <fmt/format.h>
#include <signal.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <system_error>

#include "cloud/process.h"

namespace spot::cloud {
namespace {

namespace fs = std::filesystem;

double WallNow() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

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
  gap_s_ = opt_.zones.empty() ? 1 : opt_.zones[0]->gap_seconds;
}

LocalProvider::~LocalProvider() = default;

bool LocalProvider::Up(int zone, int64_t abs_tick) const {
  const market::Trace& t = *opt_.zones[zone];
  return abs_tick >= 0 && abs_tick < t.ticks() && t.available[abs_tick] >= opt_.nodes;
}

double LocalProvider::WallUnixS(double sim_s) const {
  return opt_.wall_epoch_unix_s + sim_s / opt_.time_compression;
}

double LocalProvider::NextReclaimS(int zone, double from_s) const {
  const market::Trace& t = *opt_.zones[zone];
  for (int64_t abs = opt_.start_tick + static_cast<int64_t>(std::floor(from_s / gap_s_)) + 1;
       abs < t.ticks(); ++abs) {
    if (!Up(zone, abs)) return static_cast<double>(abs - opt_.start_tick) * gap_s_;
  }
  return -1;
}

Status LocalProvider::StartMetadata(Instance& inst, int port) {
  const InstanceSpec& s = inst.view.spec;
  SPOT_ASSIGN_OR_RETURN(inst.metadata, MetadataServer::Start({.instance_id = s.id,
                                                              .instance_type = s.instance_type,
                                                              .region = s.region,
                                                              .zone = s.zone_name,
                                                              .spot = s.spot},
                                                             "127.0.0.1", port));
  inst.view.metadata_port = inst.metadata->port();
  if (inst.view.notice_s >= 0) {
    inst.metadata->SetNotice(
        {.action = "terminate", .time_unix_s = WallUnixS(inst.view.reclaim_s)});
  }
  return Status::Ok();
}

Result<InstanceView> LocalProvider::Launch(const InstanceSpec& spec, double now_s) {
  if (instances_.count(spec.id)) return InvalidArgumentError("instance " + spec.id + " exists");
  if (spec.spot) {
    if (spec.zone < 0 || spec.zone >= static_cast<int>(opt_.zones.size())) {
      return InvalidArgumentError(fmt::format("instance {}: no zone {}", spec.id, spec.zone));
    }
    int64_t abs = opt_.start_tick + static_cast<int64_t>(std::floor(now_s / gap_s_));
    if (!Up(spec.zone, abs)) {
      return UnavailableError(
          fmt::format("InsufficientInstanceCapacity: no spot capacity for {} x {} in {} at tick {}",
                      opt_.nodes, spec.instance_type, spec.zone_name, abs));
    }
  }
  Instance inst;
  inst.view.spec = spec;
  inst.view.launched_s = now_s;
  inst.view.reclaim_s = spec.spot ? NextReclaimS(spec.zone, now_s) : -1;
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
  SpawnOptions so{.argv = opt_.command(spec, inst.local_dir),
                  .env = std::move(env),
                  .log_path = (fs::path(opt_.instances_dir) / (spec.id + ".log")).string()};
  SPOT_ASSIGN_OR_RETURN(inst.view.pid, Spawn(so));
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
  Instance& inst = it->second;
  if (inst.view.state != InstanceState::kRunning) return Status::Ok();
  if (inst.view.process_running) SignalProcess(inst.view.pid, SIGTERM);  // never a reaped pid
  inst.term_sent_wall = WallNow();
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
  inst.local_dir = (fs::path(opt_.instances_dir) / id).string();
  if (!ProcessMatches(recorded.pid, id)) {
    End(inst, InstanceState::kLost, now_s);
    inst.view.process_running = false;
    instances_[id] = std::move(inst);
    return NotFoundError(
        fmt::format("instance {} (pid {}) is no longer running", id, recorded.pid));
  }
  if (recorded.spec.spot)
    inst.view.reclaim_s = NextReclaimS(recorded.spec.zone, recorded.launched_s);
  // Re-serve its metadata where the worker looks for it; a notice already due is set again.
  SPOT_RETURN_IF_ERROR(StartMetadata(inst, recorded.metadata_port));
  instances_[id] = std::move(inst);
  return Status::Ok();
}

std::vector<InstanceView> LocalProvider::List() const {
  std::vector<InstanceView> out;
  for (const auto& [id, inst] : instances_) out.push_back(inst.view);
  return out;
}

std::vector<ProviderEvent> LocalProvider::Poll(double now_s) {
  std::vector<ProviderEvent> events;
  const double wall = WallNow();
  for (auto& [id, inst] : instances_) {
    InstanceView& v = inst.view;
    if (v.process_running) {
      ProcessStatus ps = CheckProcess(v.pid);
      if (!ps.running) {
        v.process_running = false;
        v.exit_code = ps.exit_code;
        if (v.state == InstanceState::kRunning) {
          events.push_back({ProviderEvent::Kind::kExited, id, now_s,
                            ps.signal != 0 ? fmt::format("killed by signal {}", ps.signal)
                                           : fmt::format("exit code {}", ps.exit_code)});
        }
      }
    }
    if (v.state == InstanceState::kRunning && v.reclaim_s >= 0) {
      // The market decides, whatever the process did meanwhile.
      if (opt_.notice_s > 0 && v.notice_s < 0 && now_s >= v.reclaim_s - opt_.notice_s) {
        v.notice_s = std::max(v.launched_s, v.reclaim_s - opt_.notice_s);
        if (inst.metadata) {
          inst.metadata->SetNotice({.action = "terminate", .time_unix_s = WallUnixS(v.reclaim_s)});
        }
        events.push_back({ProviderEvent::Kind::kNotice, id, v.notice_s,
                          fmt::format("reclaim at {:.0f} s", v.reclaim_s)});
      }
      if (now_s >= v.reclaim_s) {
        if (v.process_running) SignalProcess(v.pid, SIGKILL);
        End(inst, InstanceState::kPreempted, v.reclaim_s);
        events.push_back({ProviderEvent::Kind::kPreempted, id, v.reclaim_s,
                          fmt::format("{} has no capacity", v.spec.zone_name)});
      }
    }
    if (v.state != InstanceState::kRunning && v.process_running && inst.term_sent_wall >= 0 &&
        wall - inst.term_sent_wall > opt_.terminate_grace_wall_s) {
      SignalProcess(v.pid, SIGKILL);
    }
    // An ended instance's local disk goes once its process is gone.
    if (v.state != InstanceState::kRunning && !v.process_running && !inst.local_dir.empty()) {
      std::error_code ec;
      fs::remove_all(inst.local_dir, ec);
      if (!ec) inst.local_dir.clear();
    }
  }
  std::stable_sort(
      events.begin(), events.end(),
      [](const ProviderEvent& a, const ProviderEvent& b) { return a.sim_s < b.sim_s; });
  return events;
}

}  // namespace spot::cloud
