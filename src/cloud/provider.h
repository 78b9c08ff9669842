// The Provider interface: how the controller obtains and gives back instances,
// and learns what the cloud did to them. The local provider implements it with
// processes on this machine, the EC2 provider with EC2 instances and the
// Slurm provider with Slurm jobs (providers.md).
//
// Time is the job's simulated clock (seconds since the job's start): the
// controller passes `now_s` so a provider never reads a clock of its own and
// every instance-second is accounted on one time line.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/status.h"

namespace spot::market {
class MarketFeed;
}

namespace spot::cloud {

struct InstanceSpec {
  std::string id;  // chosen by the caller and recorded before the launch
  int zone = -1;   // index into the market's zones; -1 for on-demand
  bool spot = true;
  std::string zone_name;  // "us-east-1a"
  std::string region;
  std::string instance_type;  // "p3.2xlarge"
  double max_price = 0;       // spot bid in $/h; 0: none
};

// An instance is billed while it is kRunning, whether or not its process
// still runs (a VM whose program ended is still a VM): it ends when the
// caller terminates it or the market reclaims it.
enum class InstanceState {
  kRunning,     // up (a notice may have been given; its process may have ended)
  kPreempted,   // reclaimed by the market
  kTerminated,  // given back by the caller
  kLost,        // found gone when adopted after a restart
};
const char* InstanceStateName(InstanceState s);

struct InstanceView {
  InstanceSpec spec;
  // The provider's own data about the instance, opaque to its callers, kept
  // by the controller and handed back to Adopt after a restart (the local
  // provider: its process and metadata port; a cloud: its instance id).
  std::string provider_data;
  InstanceState state = InstanceState::kRunning;
  bool process_running = true;
  int exit_code = -1;  // once the process ended: its exit code (-1 when unknown)
  double launched_s = 0;
  double ended_s = -1;    // billing stops here; -1 while running
  double notice_s = -1;   // when the interruption notice was given; -1 none
  double reclaim_s = -1;  // when the market takes it back; -1 none foreseen
};

struct ProviderEvent {
  enum class Kind { kNotice, kPreempted, kExited };  // kExited: the process ended
  Kind kind;
  std::string instance_id;
  double sim_s = 0;
  std::string detail;
};
const char* ProviderEventName(ProviderEvent::Kind k);

class Provider {
 public:
  virtual ~Provider() = default;
  // Unavailable ("InsufficientInstanceCapacity", as EC2 says it) when a spot
  // pool has no capacity at now_s.
  virtual Result<InstanceView> Launch(const InstanceSpec& spec, double now_s) = 0;
  // Gives the instance back; billing ends at now_s. NotFound for an unknown id.
  virtual Status Terminate(const std::string& id, double now_s) = 0;
  // Every instance launched or adopted, live and ended.
  virtual std::vector<InstanceView> List() const = 0;
  // Advances the provider's world to now_s: notices, reclaims and exits that
  // happened by then, in time order. An error when the provider could not
  // look (Unavailable: the cloud's describe API or the scheduler did not
  // answer), again at every Poll until one can look (a provider that looks
  // once an interval answers with its last look's error in between);
  // nothing is lost: what happened is reported by the next Poll that can
  // look. The caller decides how long an outage it tolerates (the
  // controller: controller.provider_outage_s).
  virtual Result<std::vector<ProviderEvent>> Poll(double now_s) = 0;
  // Takes over an instance recorded by an earlier controller process (after
  // a restart). NotFound when it is gone (it then counts as ended at now_s).
  virtual Status Adopt(const InstanceView& recorded, double now_s) = 0;
  // The market as this provider sees it live (a cloud's price and capacity
  // API), kept by the provider; the controller decides on it. nullptr: the
  // job's replayed market.
  virtual market::MarketFeed* feed() { return nullptr; }
};

}  // namespace spot::cloud
