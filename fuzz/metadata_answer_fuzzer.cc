// Fuzzes the termination watcher's reading of metadata-service answers
// (cloud/termination_watcher.h): AWS IMDSv2 instance-action, GCP preempted,
// Azure scheduled events. A fake metadata service on loopback answers one
// poll of a fresh NoticeSource with what the input says.
//
// Input: byte 0 picks the cloud (aws, gcp, azure); byte 1 the HTTP status of
// the answer; byte 2 flags (1: GCP's Metadata-Flavor header present, 2: the
// AWS token request fails, 4: the AWS token is empty, 8: Azure's
// acknowledgement fails); the rest is the answer's body.
#include <httplib.h>

#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <mutex>
#include <string>
#include <thread>

#include "cloud/termination_watcher.h"
#include "fuzz_support.h"

namespace {

using spot::cloud::MetadataFlavor;

struct Answer {
  int status = 200;
  int flags = 0;
  std::string body;
};

constexpr int kStatuses[] = {200, 404, 401, 500, 200, 503, 302, 200};

class FakeMetadataService {
 public:
  FakeMetadataService() {
    server_.Put("/latest/api/token", [this](const httplib::Request&, httplib::Response& res) {
      Answer a = Get();
      res.status = (a.flags & 2) ? 403 : 200;
      res.set_content((a.flags & 4) ? "" : "fuzz-token", "text/plain");
    });
    auto answer = [this](const httplib::Request&, httplib::Response& res) {
      Answer a = Get();
      res.status = a.status;
      if (a.flags & 1) res.set_header("Metadata-Flavor", "Google");
      res.set_content(a.body, "application/json");
    };
    server_.Get("/latest/meta-data/spot/instance-action", answer);
    server_.Get("/computeMetadata/v1/instance/preempted", answer);
    server_.Get("/metadata/scheduledevents", answer);
    server_.Post("/metadata/scheduledevents", [this](const httplib::Request&, httplib::Response& res) {
      res.status = (Get().flags & 8) ? 500 : 200;
    });
    port_ = server_.bind_to_any_port("127.0.0.1");
    if (port_ <= 0) std::abort();
    thread_ = std::thread([this] { server_.listen_after_bind(); });
    while (!server_.is_running()) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }

  int port() const { return port_; }
  void Set(Answer a) {
    std::lock_guard<std::mutex> lock(mu_);
    answer_ = std::move(a);
  }

 private:
  Answer Get() {
    std::lock_guard<std::mutex> lock(mu_);
    return answer_;
  }

  httplib::Server server_;
  std::thread thread_;
  int port_ = 0;
  std::mutex mu_;
  Answer answer_;
};

FakeMetadataService& Service() {
  static auto* service = new FakeMetadataService;  // lives until exit, with its thread
  return *service;
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  (void)Service();
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 3) return 0;
  FakeMetadataService& service = Service();
  const int flavor = data[0] % 3;
  Answer a{.status = kStatuses[data[1] % 8],
           .flags = data[2],
           .body = spot::fuzz::AsString(data + 3, size - 3)};
  service.Set(a);
  const std::string host = "127.0.0.1:" + std::to_string(service.port());
  std::unique_ptr<spot::cloud::NoticeSource> source =
      flavor == 0   ? spot::cloud::MakeAwsNoticeSource("http://" + host)
      : flavor == 1 ? spot::cloud::MakeGcpNoticeSource(host)
                    : spot::cloud::MakeAzureNoticeSource("http://" + host + "/");
  auto notice = source->Poll();
  if (!notice.ok()) {
    FUZZ_CHECK(notice.status().code() == spot::StatusCode::kUnavailable,
               notice.status().ToString());
    return 0;
  }
  if (!notice->has_value()) return 0;
  const spot::cloud::Notice& n = **notice;
  FUZZ_CHECK(n.flavor == source->flavor(), "notice of another flavor");
  FUZZ_CHECK(!n.action.empty(), "a notice without an action");
  FUZZ_CHECK(std::isfinite(n.time_unix_s), "a notice time that is not finite");
  FUZZ_CHECK(a.status == 200, "a notice from an answer that was not 200");
  return 0;
}
