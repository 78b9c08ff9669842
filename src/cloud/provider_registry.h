// Providers by name: the `provider:` of a `spot run` job selects one, as
// `policy:` selects a policy (core/registry.h; parameters declared once with
// their bounds and help). Registration is explicit: RegisterBuiltinProviders().
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "cloud/provider.h"
#include "core/clock.h"
#include "core/registry.h"
#include "fleet/fleet.h"
#include "market/trace.h"

namespace spot::cloud {

// What every provider is made with: the job's market and time line, where
// instances keep their local disks, and what an instance runs.
struct ProviderContext {
  std::vector<const market::Trace*> zones;  // the job's market (one tick grid)
  std::vector<fleet::TypeFacts> types;      // per zone, then the reference; empty: uniform
  fleet::FleetJob job;                      // the job as the fleet model sees it
  int64_t start_tick = 0;                   // absolute tick of simulated second 0
  double notice_s = 120;                    // simulated seconds of notice before a reclaim
  double wall_epoch_unix_s = 0;             // wall time of simulated second 0
  double time_compression = 1;              // simulated seconds per wall second
  std::string instances_dir;                // each instance's local disk under it
  double terminate_grace_wall_s = 10;       // SIGTERM to SIGKILL
  // The command an instance runs (argv[0] an executable path).
  std::function<std::vector<std::string>(const InstanceSpec&, const std::string& local_dir)>
      command;
  std::string metadata_flavor = "aws";  // the metadata service instances are told about
  Clock* clock = nullptr;               // wall time (nullptr: the real clock)
  // For providers whose instances run elsewhere (their bootstrap):
  std::string instance_type;  // resources.instance_type (a cloud's price feed)
  std::string job_name;
  std::string job_dir;              // the job's shared records (logs, progress)
  std::string rendezvous_url;       // as instances reach it (controller.advertise_host)
  std::string checkpoint_location;  // the durable tier ("" = none)
};

class ProviderRegistry final : public Registry<Provider, const ProviderContext&> {
 public:
  ProviderRegistry() : Registry("provider") {}
};

// local: instances are processes on this machine in the replayed market
// (local_provider.h).
void RegisterBuiltinProviders(ProviderRegistry& registry);

}  // namespace spot::cloud
