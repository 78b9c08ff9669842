// FakeProvider: a cloud in virtual time, for tests and benchmarks of the
// controller. Instances are records, not processes. The market (the traces)
// takes spot instances back at tick boundaries by the fleet model's rule
// (fleet::FleetModel::Reclaim: bids, then the newest above capacity), with an
// optional notice `notice_s` before; launching spot where the pool is full
// fails as EC2 does. It also stands in for the training: the job progresses
// on the instances it holds by the fleet model's rules (startup delay,
// throughput, min nodes), so a controller driven over it in virtual time
// makes, tick for tick, the decisions SpotSim makes on the same market.
//
// Faults: `launch_fault` may refuse any launch with the Status it returns.
// Time is the job's simulated second, as for every provider. Not thread-safe.
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "cloud/provider.h"
#include "core/job_files.h"
#include "fleet/fleet.h"
#include "market/trace.h"

namespace spot::cloud {

struct FakeProviderOptions {
  std::vector<const market::Trace*> zones;  // the market (one tick grid)
  std::vector<fleet::TypeFacts> types;      // per zone, then the reference; empty: uniform
  fleet::FleetJob job;                      // what the stand-in training needs
  int64_t start_tick = 0;                   // absolute tick of simulated second 0
  double notice_s = 0;                      // notice before a reclaim; 0: none
  // Called before each launch; a non-OK Status refuses it (fault injection).
  std::function<Status(const InstanceSpec&, double now_s)> launch_fault;
};

class FakeProvider final : public Provider {
 public:
  explicit FakeProvider(FakeProviderOptions options);
  ~FakeProvider() override;

  Result<InstanceView> Launch(const InstanceSpec& spec, double now_s) override;
  Status Terminate(const std::string& id, double now_s) override;
  std::vector<InstanceView> List() const override;
  Result<std::vector<ProviderEvent>> Poll(double now_s) override;
  Status Adopt(const InstanceView& recorded, double now_s) override;

  // Advances the world to now_s and reports how far the stand-in training
  // is, as rank 0 of a real one would (core/job_files.h): the fraction of
  // the job done, steps of a million, the instances running as its world.
  ProgressReport Progress(double now_s);
  // Provider calls so far (Launch, Terminate, List, Poll, Adopt): what a
  // cloud's API rate limits would count.
  int64_t api_calls() const { return api_calls_; }

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
  mutable int64_t api_calls_ = 0;
};

}  // namespace spot::cloud
