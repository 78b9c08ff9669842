// Ec2Provider: instances are EC2 instances, spot or on-demand, launched and
// watched through the EC2 Query API (Action=...&Version=2016-11-15, a
// form-encoded POST signed with Signature Version 4 for service "ec2" by
// libcurl through aws/aws_http.h). Credentials, region and endpoint come as an
// AWS SDK finds them (aws/aws_config.h: environment, shared credentials file,
// profile, AWS_ENDPOINT_URL_EC2 or AWS_ENDPOINT_URL); secrets never appear in
// a message or a log line.
//
//  - Launch: RunInstances of one instance in the spec's zone
//    (Placement.AvailabilityZone), spot with InstanceMarketOptions
//    (one-time, terminate on interruption, MaxPrice = max_price when > 0),
//    tagged spot:job and spot:instance (our id) so a restarted controller can
//    find it; with `allocation_strategy` set and no zone, a CreateFleet of
//    type instant instead, over a launch template the provider makes once
//    (CreateLaunchTemplate "spot-<job>-<hash of its settings>"; one made by
//    an earlier controller is reused). provider_data: {"instance_id": "i-..."}.
//  - Terminate: TerminateInstances. Adopt: DescribeInstances by the recorded
//    instance id, else by the spot:instance tag; NotFound when gone.
//  - Poll(now): at most one DescribeInstances per `poll_interval_s` (batched
//    by instance id) for the instances we believe run: one that is
//    shutting-down, terminated, stopping or stopped, or missing, without our
//    Terminate, is kPreempted; the detail is EC2's state reason
//    (Server.SpotInstanceTermination for a spot reclaim). Notices are not
//    seen here (the instance reads them from IMDSv2); kExited is not
//    observable from the API (a VM whose program ended still runs).
//  - Errors: InsufficientInstanceCapacity, SpotMaxPriceTooLow,
//    MaxSpotInstanceCountExceeded, InstanceLimitExceeded, RequestLimitExceeded
//    and throttling, 5xx, connection errors (after retries with backoff and
//    full jitter) -> Unavailable (the controller backs off: "no capacity in
//    this pool now"); UnauthorizedOperation, AuthFailure and other 401/403 ->
//    FailedPrecondition naming the action; InvalidParameterValue and every
//    other client error -> InvalidArgument with EC2's code and message.
// Not thread-safe: the controller's loop is its only caller.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "aws/aws_config.h"
#include "aws/aws_http.h"
#include "cloud/provider.h"
#include "core/config_fields.h"
#include "core/status.h"
#include "market/feed.h"

namespace spot::cloud {

// One EC2 Query API endpoint with its credentials.
struct Ec2RetryOptions {
  int max_attempts = 4;            // tries per call, the first included
  double initial_backoff_s = 0.5;  // first retry waits up to this (full jitter)
  double max_backoff_s = 8;
};

class Ec2Client {
 public:
  // `config.endpoint` "" = https://ec2.<region>.amazonaws.com.
  Ec2Client(aws::AwsConfig config, Ec2RetryOptions retry);
  Ec2Client(const Ec2Client&) = delete;
  Ec2Client& operator=(const Ec2Client&) = delete;

  // The response body of a successful call, or the mapped failure (above).
  Result<std::string> Call(const std::string& action,
                           std::vector<std::pair<std::string, std::string>> params);
  int64_t calls() const { return calls_; }  // HTTP requests sent, retries included
  const std::string& region() const { return config_.region; }

 private:
  aws::AwsConfig config_;
  aws::HttpClient http_;
  int64_t calls_ = 0;
};

// Maps an EC2 error (HTTP status, <Code>, <Message>) of `action` to a Status.
Status MapEc2Error(const std::string& action, long http_status, const std::string& code,
                   const std::string& message);

struct Ec2ProviderOptions {
  std::string job = "spot";  // the spot:job tag
  // The client's settings (used by the `ec2` registration, not by Ec2Provider):
  std::string region;     // "" = AWS_REGION, AWS_DEFAULT_REGION, else us-east-1
  std::string profile;    // credentials profile; "" = the environment, then AWS_PROFILE
  std::string image_id;   // AMI (required)
  std::string subnet_id;  // "" = the zone's default subnet
  std::vector<std::string> security_group_ids;
  std::string key_name;
  std::string iam_instance_profile;  // name
  // CreateFleet (type instant) with this allocation strategy when a spot
  // launch names no zone ("" = RunInstances always): lowest-price,
  // price-capacity-optimized, capacity-optimized, diversified.
  std::string allocation_strategy;
  // The bootstrap script of one instance (RenderUserData of the worker it
  // runs), made at each launch and base64-encoded on send; null = none.
  std::function<Result<std::string>(const InstanceSpec& spec)> user_data;
  double poll_interval_s = 30;  // simulated seconds between DescribeInstances calls
  // The job's market from EC2's spot price history (Ec2MarketFeed) instead
  // of the replayed traces (used by the `ec2` registration).
  bool price_feed = true;
};

// The parameters a job file sets under `provider:` (user_data and job come
// from the job itself).
void DeclareFields(Ec2ProviderOptions& o, FieldVisitor& v);

// What the EC2 provider keeps in InstanceView::provider_data.
std::string EncodeEc2InstanceData(const std::string& ec2_instance_id);
Result<std::string> DecodeEc2InstanceData(const std::string& text);

class Ec2Provider final : public Provider {
 public:
  Ec2Provider(std::unique_ptr<Ec2Client> client, Ec2ProviderOptions options);

  Result<InstanceView> Launch(const InstanceSpec& spec, double now_s) override;
  market::MarketFeed* feed() override { return feed_.get(); }
  Status Terminate(const std::string& id, double now_s) override;
  std::vector<InstanceView> List() const override;
  Result<std::vector<ProviderEvent>> Poll(double now_s) override;
  Status Adopt(const InstanceView& recorded, double now_s) override;

  // EC2 API requests sent so far (retries included): the cost AWS throttles.
  int64_t api_calls() const { return client_->calls(); }
  Ec2Client& client() { return *client_; }
  // The live market the controller decides on (made over client()).
  void set_feed(std::unique_ptr<market::MarketFeed> feed) { feed_ = std::move(feed); }

 private:
  struct Instance {
    InstanceView view;
    std::string ec2_id;
    bool terminating = false;
  };
  // The launch template of CreateFleet holding `user_data`, made on first use.
  Result<std::string> LaunchTemplate(const std::string& user_data);

  Ec2ProviderOptions opt_;
  std::unique_ptr<Ec2Client> client_;
  std::set<std::string> templates_;  // the launch templates known to exist
  std::map<std::string, Instance> instances_;
  std::unique_ptr<market::MarketFeed> feed_;
  double last_poll_s_ = -1e300;
  // The last poll's error (OK when it got an answer): a Poll inside the
  // interval returns it again, since the fleet is still unseen.
  Status last_poll_error_;
};

// One instance as DescribeInstances reports it.
struct Ec2InstanceState {
  std::string instance_id;
  std::string state;        // pending, running, shutting-down, terminated, ...
  std::string reason_code;  // StateReason code ("Server.SpotInstanceTermination")
  std::string reason_message;
  std::string zone;
  std::string lifecycle;  // "spot" or ""
  std::map<std::string, std::string> tags;
};
// The instances of a DescribeInstances (or RunInstances) response.
std::vector<Ec2InstanceState> ParseEc2Instances(const std::string& xml);

// One spot price as DescribeSpotPriceHistory reports it.
struct Ec2SpotPrice {
  std::string zone;
  std::string instance_type;
  double price = 0;       // $/h
  std::string timestamp;  // ISO 8601
};
// The spot price history of `instance_type` (Linux/UNIX) in `zones` (empty:
// every zone of the region) from `start_time` (ISO 8601, "" = EC2's default),
// all pages. InvalidArgument for a price that is not a number.
Result<std::vector<Ec2SpotPrice>> DescribeSpotPrices(Ec2Client& client,
                                                     const std::string& instance_type,
                                                     const std::vector<std::string>& zones,
                                                     const std::string& start_time);
// The zones of the client's region that offer `instance_type`
// (DescribeInstanceTypeOfferings, location type availability-zone), sorted.
Result<std::vector<std::string>> OfferedZones(Ec2Client& client, const std::string& instance_type);

struct ProviderContext;
// The EC2 provider of a `spot run` job (registered as `ec2`): the client
// from the environment (or the profile), each instance's user data rendered
// at its launch (cloud/bootstrap.h) from the worker's command line, the
// job's rendezvous and its durable tier, and (price_feed) the job's zones
// priced by EC2 as the job's market. InvalidArgument naming
// provider.image_id when it is empty; the credentials' errors.
Result<std::unique_ptr<Provider>> MakeEc2Provider(Ec2ProviderOptions options,
                                                  const ProviderContext& context);

}  // namespace spot::cloud
