// A per-instance metadata endpoint for the local provider: one loopback HTTP
// server that answers as the three clouds' instance metadata services do, so
// the worker's termination watcher is exercised against the real protocols.
//
//   AWS IMDSv2: PUT /latest/api/token with X-aws-ec2-metadata-token-ttl-seconds
//     (1..21600; missing or out of range: 400) returns a token; every GET under
//     /latest/ needs X-aws-ec2-metadata-token with a live token (401 otherwise).
//     /latest/meta-data/spot/instance-action gives
//     {"action":"terminate","time":"2026-11-30T10:00:00Z"} once a notice is set,
//     404 before; also instance-id, instance-type, instance-life-cycle,
//     placement/availability-zone, placement/region, and
//     events/recommendations/rebalance (404 unless a notice is set).
//   GCP: GET /computeMetadata/v1/instance/preempted with Metadata-Flavor: Google
//     (403 without it) gives TRUE or FALSE.
//   Azure: GET /metadata/scheduledevents?api-version=2020-07-01 with
//     Metadata: true (400 without it) gives the Scheduled Events document, with
//     one Preempt event once a notice is set; POST the same path acknowledges
//     events ({"StartRequests":[{"EventId":...}]}).
//
// Thread-safe: the provider sets the notice while the server answers.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "core/clock.h"
#include "core/status.h"

namespace spot::cloud {

struct InstanceIdentity {
  std::string instance_id;    // "i-0123456789abcdef0"-like
  std::string instance_type;  // "p3.2xlarge"
  std::string region;         // "us-east-1"
  std::string zone;           // "us-east-1a"
  bool spot = true;           // instance-life-cycle: "spot" or "on-demand"
};

// What the cloud announces ahead of reclaiming a spot instance.
struct InterruptionNotice {
  std::string action = "terminate";  // terminate | stop | hibernate
  double time_unix_s = 0;            // when the instance will be reclaimed (UTC)
};

class MetadataServer {
 public:
  // Listens on host:port (port 0: any free port). Unavailable naming the
  // address when it cannot bind.
  // `clock` dates notices (nullptr: the real clock).
  static Result<std::unique_ptr<MetadataServer>> Start(InstanceIdentity identity,
                                                       const std::string& host = "127.0.0.1",
                                                       int port = 0, Clock* clock = nullptr);
  virtual ~MetadataServer() = default;

  virtual int port() const = 0;
  // "http://HOST:PORT": the value of AWS_EC2_METADATA_SERVICE_ENDPOINT and
  // (without the scheme) of GCE_METADATA_HOST for the instance.
  virtual std::string endpoint() const = 0;
  virtual void SetNotice(const InterruptionNotice& notice) = 0;
  virtual void ClearNotice() = 0;
  // Requests answered so far (any path, any status).
  virtual int64_t requests() const = 0;
  // Azure events acknowledged by the instance (POST StartRequests).
  virtual int64_t acknowledgements() const = 0;
};

// "2026-11-30T10:00:00Z" (the instance-action time format).
std::string Iso8601Utc(double unix_s);
// "Mon, 30 Nov 2026 10:00:00 GMT" (Azure's NotBefore format, RFC 1123).
std::string Rfc1123Utc(double unix_s);

}  // namespace spot::cloud
