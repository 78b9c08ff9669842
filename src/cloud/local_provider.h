// LocalProvider: instances are `spot worker` processes on this machine, in a
// market replayed from recorded (or synthetic) traces.
//
//  - The market follows the fleet model's rule (fleet/fleet.h): at every tick
//    boundary it takes back, in each zone, the spot instances
//    fleet::ReclaimedInPool picks from those running there (in launch order):
//    first every one whose bid (InstanceSpec::max_price > 0) is below the
//    zone's price, then the newest above the zone's capacity (`available` of
//    its trace counts the instances the zone can hold, ours included; 0 past
//    the traces' end): a partial reclaim, k of N, not all or none.
//  - `notice_s` before a boundary (AWS gives 120 s) the instances the rule
//    will take there, given the fleet as it stands then, get an interruption
//    notice (an instance launched inside that window gets it at its launch):
//    their metadata endpoint starts answering spot/instance-action (GCP's
//    preempted, Azure's Preempt event) and their view names the boundary
//    (`reclaim_s`; -1 before a notice). A notice is a commitment: a noticed
//    instance is taken at its boundary even if the fleet changed since, and
//    counts as gone when the rule is applied to the others there. At the
//    boundary the process gets SIGKILL and its local disk (its directory) is
//    deleted.
//  - Launching spot in zone z fails as EC2 does: Unavailable
//    "InsufficientInstanceCapacity" when the instances running there already
//    fill the capacity of the current tick, "SpotMaxPriceTooLow" when the bid
//    is below the current price.
//  - On-demand instances are never reclaimed.
//  - Terminate: SIGTERM, SIGKILL after a grace period, local disk deleted.
//  - Adopt() takes over an instance launched by an earlier controller process
//    (after a restart): it checks the pid still runs that instance and serves
//    its metadata again on the same port, a notice already given included.
//    Boundaries nobody watched are applied to the adopted fleet at the next
//    Poll.
// Launch, Terminate and Poll first advance the market to their `now_s`;
// the events this produces are reported by the next Poll.
// Not thread-safe: the controller's loop is its only caller.
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "cloud/metadata_server.h"
#include "cloud/provider.h"
#include "core/clock.h"
#include "market/trace.h"

namespace spot::cloud {

struct LocalProviderOptions {
  std::vector<const market::Trace*> zones;  // the market (same tick grid)
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
  // Wall time of grace periods and notices (the workers are real processes);
  // nullptr: the real clock.
  Clock* clock = nullptr;
};

// What the local provider keeps in InstanceView::provider_data.
struct LocalInstanceData {
  int64_t pid = 0;  // the instance's process
  int metadata_port = 0;
};
std::string EncodeLocalInstanceData(const LocalInstanceData& d);  // {"pid":..,"metadata_port":..}
// InvalidArgument for anything else (naming the text).
Result<LocalInstanceData> DecodeLocalInstanceData(const std::string& text);

class LocalProvider final : public Provider {
 public:
  explicit LocalProvider(LocalProviderOptions options);
  ~LocalProvider() override;

  Result<InstanceView> Launch(const InstanceSpec& spec, double now_s) override;
  Status Terminate(const std::string& id, double now_s) override;
  std::vector<InstanceView> List() const override;
  Result<std::vector<ProviderEvent>> Poll(double now_s) override;
  // Takes over a running instance recorded by an earlier controller: checks
  // its pid still runs that instance and serves its metadata again. A notice
  // in `recorded` (notice_s, and reclaim_s when known) stands. Adopt the
  // fleet in launch order (it breaks ties of launched_s) before the next Poll.
  Status Adopt(const InstanceView& recorded, double now_s) override;

  // Wall time of a simulated second.
  double WallUnixS(double sim_s) const;

 private:
  struct Instance {
    InstanceView view;
    LocalInstanceData data;
    std::unique_ptr<MetadataServer> metadata;
    std::string local_dir;
    bool own_child = true;
    double term_sent_wall = -1;
    int64_t seq = 0;          // launch (or adoption) order, among equal launch times
    std::string reclaim_why;  // once noticed: why the market takes it
    // Adopted with only the notice's time: reclaim_s is the last boundary
    // that notice could name until the rule finds the one it did.
    bool boundary_guessed = false;
  };
  // Relative tick (of simulated time 0) of a simulated second.
  int64_t TickOf(double sim_s) const;
  int Capacity(int zone, int64_t abs_tick) const;  // 0 past the traces
  double Price(int zone, int64_t abs_tick) const;  // 1.0 $/h when the trace has none
  // Applies the tick boundaries up to now_s and gives the notices of those
  // up to now_s + notice_s; its events go to pending_.
  void Advance(double now_s);
  // The running spot instances of each zone, in launch order.
  std::vector<std::vector<Instance*>> RunningSpotPools();
  // What the market takes from zone z's `pool` at boundary b (noticed ones,
  // then the rule's), noticing those it takes at a later time than now.
  std::vector<Instance*> TakenAt(int z, int64_t b, const std::vector<Instance*>& pool);
  void Notice(Instance& inst, double boundary_s, const std::string& why);
  void Reclaim(Instance& inst, double now_s);
  // Reports once that the instance's process ended while the instance ran.
  void CheckExit(Instance& inst, double now_s);
  Status StartMetadata(Instance& inst, int port);
  void End(Instance& inst, InstanceState state, double at_s);

  LocalProviderOptions opt_;
  double gap_s_ = 0;
  int64_t next_seq_ = 0;
  int64_t done_tick_ = 0;  // boundaries up to this relative tick are applied
  std::map<std::string, Instance> instances_;
  std::vector<ProviderEvent> pending_;  // for the next Poll
};

}  // namespace spot::cloud
