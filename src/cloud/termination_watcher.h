// Detects that the cloud is about to reclaim this instance, by polling the
// instance metadata service the way each cloud documents it:
//   AWS (IMDSv2): token PUT, then GET /latest/meta-data/spot/instance-action
//     (404: no notice). The endpoint comes from AWS_EC2_METADATA_SERVICE_ENDPOINT,
//     the variable the AWS SDKs read (default http://169.254.169.254).
//   GCP: GET /computeMetadata/v1/instance/preempted (TRUE/FALSE) with
//     Metadata-Flavor: Google; host from GCE_METADATA_HOST (Google's client
//     libraries read it; default metadata.google.internal).
//   Azure: GET /metadata/scheduledevents?api-version=2020-07-01 with
//     Metadata: true, a Preempt event; endpoint from SPOT_AZURE_METADATA_ENDPOINT
//     (default http://169.254.169.254). The event is acknowledged once seen.
// LibTorch-free; the worker runs a watcher beside its training loop.
#pragma once

#include <atomic>
#include <condition_variable>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <thread>

#include "core/status.h"

namespace spot::cloud {

enum class MetadataFlavor { kAws, kGcp, kAzure };
std::string_view FlavorName(MetadataFlavor f);  // "aws" | "gcp" | "azure"

struct Notice {
  MetadataFlavor flavor = MetadataFlavor::kAws;
  std::string action;      // AWS: terminate|stop|hibernate; GCP: "preempted"; Azure: "Preempt"
  double time_unix_s = 0;  // when the instance goes (0: not given, as on GCP)
  std::string event_id;    // Azure's EventId
};

// One poll of one metadata service. Unavailable when the service cannot be
// reached or answers unexpectedly (the message names the URL and status).
class NoticeSource {
 public:
  virtual ~NoticeSource() = default;
  virtual MetadataFlavor flavor() const = 0;
  virtual std::string endpoint() const = 0;
  virtual Result<std::optional<Notice>> Poll() = 0;
};

// endpoint: "http://HOST:PORT" (AWS, Azure) or "HOST:PORT" / "http://HOST:PORT" (GCP).
std::unique_ptr<NoticeSource> MakeAwsNoticeSource(std::string endpoint);
std::unique_ptr<NoticeSource> MakeGcpNoticeSource(std::string endpoint);
std::unique_ptr<NoticeSource> MakeAzureNoticeSource(std::string endpoint);

// flavor "aws" | "gcp" | "azure" uses that cloud's variable (or its default
// address); "auto" picks the first of the three variables that is set and
// gives NotFound when none is; anything else is InvalidArgument.
Result<std::unique_ptr<NoticeSource>> NoticeSourceFromEnv(std::string_view flavor);

// Polls a source every `interval_s` on its own thread and calls `on_notice`
// once, from that thread, for the first notice. Poll errors are logged at most
// once a minute and polling goes on (a metadata service that is briefly away
// must not stop training). The destructor stops the thread.
class TerminationWatcher {
 public:
  TerminationWatcher(std::unique_ptr<NoticeSource> source, double interval_s,
                     std::function<void(const Notice&)> on_notice);
  ~TerminationWatcher();
  TerminationWatcher(const TerminationWatcher&) = delete;
  TerminationWatcher& operator=(const TerminationWatcher&) = delete;

  bool notified() const { return notified_.load(); }
  int64_t polls() const { return polls_.load(); }

 private:
  void Loop();

  std::unique_ptr<NoticeSource> source_;
  double interval_s_;
  std::function<void(const Notice&)> on_notice_;
  std::atomic<bool> stop_{false};
  std::atomic<bool> notified_{false};
  std::atomic<int64_t> polls_{0};
  std::mutex mu_;
  std::condition_variable wake_;  // signalled by the destructor; waits use mu_
  std::thread thread_;
};

}  // namespace spot::cloud
