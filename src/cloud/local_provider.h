// LocalProvider: instances are `spot worker` processes on this machine, in a
// market replayed from recorded (or synthetic) traces.
//
//  - A spot instance in zone z is reclaimed at the first tick boundary at which
//    the zone's capacity falls below the job's gang (available < nodes), the
//    rule SpotSim applies. `notice_s` before that (AWS gives 120 s) its
//    metadata endpoint starts answering spot/instance-action (and GCP's
//    preempted, Azure's Preempt event); at the boundary the process gets
//    SIGKILL and its local disk (its directory) is deleted.
//  - Launching spot in a zone without capacity fails as EC2 does.
//  - On-demand instances are never reclaimed.
//  - Terminate: SIGTERM, SIGKILL after a grace period, local disk deleted.
//  - Adopt() takes over an instance launched by an earlier controller process
//    (after a restart): it checks the pid still runs that instance and serves
//    its metadata again on the same port.
// Not thread-safe: the controller's loop is its only caller.
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "cloud/metadata_server.h"
#include "cloud/provider.h"
#include "market/trace.h"

namespace spot::cloud {

struct LocalProviderOptions {
  std::vector<const market::Trace*> zones;  // the market (same tick grid)
  int nodes = 1;                            // the gang the capacity rule is about
  int64_t start_tick = 0;                   // absolute tick of simulated time 0
  double notice_s = 120;                    // simulated seconds of notice before a reclaim
  double wall_epoch_unix_s = 0;             // wall time of simulated time 0
  double time_compression = 1;              // simulated seconds per wall second
  std::string instances_dir;                // each instance's local disk: instances_dir/<id>
  double terminate_grace_wall_s = 10;
  // The command an instance runs (argv[0] an executable path). Gets the
  // instance, its local disk and its metadata endpoint.
  std::function<std::vector<std::string>(const InstanceSpec&, const std::string& local_dir)>
      command;
  std::string metadata_flavor = "aws";  // which variable points the worker at its endpoint
};

class LocalProvider final : public Provider {
 public:
  explicit LocalProvider(LocalProviderOptions options);
  ~LocalProvider() override;

  Result<InstanceView> Launch(const InstanceSpec& spec, double now_s) override;
  Status Terminate(const std::string& id, double now_s) override;
  std::vector<InstanceView> List() const override;
  std::vector<ProviderEvent> Poll(double now_s) override;
  // Takes over a running instance recorded by an earlier controller: checks
  // its pid still runs that instance and serves its metadata again.
  Status Adopt(const InstanceView& recorded, double now_s) override;

  // Simulated second of the next reclaim of zone z at or after `from_s`
  // (-1: none within the traces).
  double NextReclaimS(int zone, double from_s) const;
  // Wall time of a simulated second.
  double WallUnixS(double sim_s) const;

 private:
  struct Instance {
    InstanceView view;
    std::unique_ptr<MetadataServer> metadata;
    std::string local_dir;
    bool own_child = true;
    double term_sent_wall = -1;
  };
  bool Up(int zone, int64_t abs_tick) const;
  Status StartMetadata(Instance& inst, int port);
  void End(Instance& inst, InstanceState state, double at_s);

  LocalProviderOptions opt_;
  double gap_s_ = 0;
  std::map<std::string, Instance> instances_;
};

}  // namespace spot::cloud
