#include "cloud/termination_watcher.h"

#include <fmt/format.h>
#include <httplib.h>
#include <spdlog/spdlog.h>
#include <time.h>

#include <algorithm>
#include <cassert>
#include <cctype>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <nlohmann/json.hpp>
#include <set>

namespace spot::cloud {
namespace {

using json = nlohmann::json;
using SteadyClock = std::chrono::steady_clock;

constexpr char kAwsDefault[] = "http://169.254.169.254";
constexpr char kGcpDefault[] = "metadata.google.internal";
constexpr char kAzureDefault[] = "http://169.254.169.254";
constexpr char kAwsEnv[] = "AWS_EC2_METADATA_SERVICE_ENDPOINT";
constexpr char kGcpEnv[] = "GCE_METADATA_HOST";
constexpr char kAzureEnv[] = "SPOT_AZURE_METADATA_ENDPOINT";

constexpr char kInstanceActionPath[] = "/latest/meta-data/spot/instance-action";
constexpr char kGcpPreemptedPath[] = "/computeMetadata/v1/instance/preempted";
constexpr char kAzurePath[] = "/metadata/scheduledevents?api-version=2020-07-01";
constexpr char kTokenHeader[] = "X-aws-ec2-metadata-token";
constexpr char kTokenTtlHeader[] = "X-aws-ec2-metadata-token-ttl-seconds";

// The longest token IMDSv2 grants; renewed a minute before it lapses.
constexpr int kTokenTtlS = 21600;
constexpr auto kTokenRenewMargin = std::chrono::seconds(60);
constexpr auto kLogEvery = std::chrono::minutes(1);

// Metadata services answer in milliseconds; short timeouts keep a poll (and
// so the watcher's destructor) from hanging on an address that is not there.
std::unique_ptr<httplib::Client> MakeClient(const std::string& endpoint) {
  auto c = std::make_unique<httplib::Client>(endpoint);
  c->set_connection_timeout(std::chrono::seconds(1));
  c->set_read_timeout(std::chrono::seconds(2));
  c->set_write_timeout(std::chrono::seconds(2));
  c->set_tcp_nodelay(true);
  return c;
}

// "http://host:port" without a trailing slash; a bare "host:port" gains the scheme.
std::string NormalizeEndpoint(std::string endpoint) {
  while (!endpoint.empty() && endpoint.back() == '/') endpoint.pop_back();
  if (endpoint.find("://") == std::string::npos) endpoint = "http://" + endpoint;
  return endpoint;
}

Status HttpError(const char* method, const std::string& url, const httplib::Result& res) {
  if (!res) {
    return UnavailableError(fmt::format("{} {}: {}", method, url, httplib::to_string(res.error())));
  }
  return UnavailableError(fmt::format("{} {}: HTTP {}", method, url, res->status));
}

// "2026-11-30T10:00:00Z"; nullopt when malformed.
std::optional<double> ParseIso8601(const std::string& s) {
  struct tm tm {};
  char z = 0;
  if (sscanf(s.c_str(), "%4d-%2d-%2dT%2d:%2d:%2d%c", &tm.tm_year, &tm.tm_mon, &tm.tm_mday,
             &tm.tm_hour, &tm.tm_min, &tm.tm_sec, &z) != 7 ||
      z != 'Z') {
    return std::nullopt;
  }
  tm.tm_year -= 1900;
  tm.tm_mon -= 1;
  return static_cast<double>(timegm(&tm));
}

// "Mon, 30 Nov 2026 10:00:00 GMT"; nullopt when malformed.
std::optional<double> ParseRfc1123(const std::string& s) {
  static constexpr const char* kMonths[] = {"Jan", "Feb", "Mar", "Apr", "May", "Jun",
                                            "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"};
  struct tm tm {};
  char month[4] = {};
  if (sscanf(s.c_str(), "%*3s, %2d %3s %4d %2d:%2d:%2d GMT", &tm.tm_mday, month, &tm.tm_year,
             &tm.tm_hour, &tm.tm_min, &tm.tm_sec) != 6) {
    return std::nullopt;
  }
  tm.tm_mon = -1;
  for (int i = 0; i < 12; ++i) {
    if (std::strcmp(month, kMonths[i]) == 0) tm.tm_mon = i;
  }
  if (tm.tm_mon < 0) return std::nullopt;
  tm.tm_year -= 1900;
  return static_cast<double>(timegm(&tm));
}

std::string JsonString(const json& obj, const char* field) {
  auto it = obj.find(field);
  return it != obj.end() && it->is_string() ? it->get<std::string>() : std::string();
}

// ---- AWS IMDSv2 ----

class AwsNoticeSource final : public NoticeSource {
 public:
  explicit AwsNoticeSource(std::string endpoint)
      : endpoint_(NormalizeEndpoint(std::move(endpoint))), client_(MakeClient(endpoint_)) {}

  MetadataFlavor flavor() const override { return MetadataFlavor::kAws; }
  std::string endpoint() const override { return endpoint_; }

  Result<std::optional<Notice>> Poll() override {
    const std::string url = endpoint_ + kInstanceActionPath;
    for (int attempt = 0;; ++attempt) {
      SPOT_RETURN_IF_ERROR(RefreshToken());
      httplib::Result res = client_->Get(kInstanceActionPath, {{kTokenHeader, token_}});
      if (res && res->status == 401) {
        // The service no longer knows the token (it restarted): fetch a new one, once.
        token_.clear();
        if (attempt == 0) continue;
      }
      if (!res || (res->status != 200 && res->status != 404)) return HttpError("GET", url, res);
      if (res->status == 404) return std::optional<Notice>();
      return ParseInstanceAction(res->body);
    }
  }

 private:
  Status RefreshToken() {
    if (!token_.empty() && SteadyClock::now() < renew_at_) return Status::Ok();
    token_.clear();
    httplib::Headers headers = {{kTokenTtlHeader, std::to_string(kTokenTtlS)}};
    httplib::Result res = client_->Put("/latest/api/token", headers, "", "text/plain");
    if (!res || res->status != 200 || res->body.empty()) {
      return HttpError("PUT", endpoint_ + "/latest/api/token", res);
    }
    token_ = res->body;
    renew_at_ = SteadyClock::now() + std::chrono::seconds(kTokenTtlS) - kTokenRenewMargin;
    return Status::Ok();
  }

  Result<std::optional<Notice>> ParseInstanceAction(const std::string& body) const {
    json doc = json::parse(body, nullptr, /*allow_exceptions=*/false);
    std::string action = doc.is_object() ? JsonString(doc, "action") : "";
    if (action.empty()) {
      return UnavailableError(fmt::format("GET {}{}: unexpected body '{}'", endpoint_,
                                          kInstanceActionPath, body.substr(0, 200)));
    }
    Notice n;
    n.flavor = MetadataFlavor::kAws;
    n.action = action;
    // A notice whose time cannot be read is still a notice: time 0 means "not given".
    n.time_unix_s = ParseIso8601(JsonString(doc, "time")).value_or(0);
    return std::optional<Notice>(std::move(n));
  }

  const std::string endpoint_;
  std::unique_ptr<httplib::Client> client_;
  std::string token_;
  SteadyClock::time_point renew_at_;
};

// ---- GCP ----

class GcpNoticeSource final : public NoticeSource {
 public:
  explicit GcpNoticeSource(std::string endpoint)
      : endpoint_(NormalizeEndpoint(std::move(endpoint))), client_(MakeClient(endpoint_)) {}

  MetadataFlavor flavor() const override { return MetadataFlavor::kGcp; }
  std::string endpoint() const override { return endpoint_; }

  Result<std::optional<Notice>> Poll() override {
    const std::string url = endpoint_ + kGcpPreemptedPath;
    httplib::Result res = client_->Get(kGcpPreemptedPath, {{"Metadata-Flavor", "Google"}});
    if (!res || res->status != 200) return HttpError("GET", url, res);
    // Google's clients trust only answers that carry the flavor header back.
    if (res->get_header_value("Metadata-Flavor") != "Google") {
      return UnavailableError(fmt::format("GET {}: no Metadata-Flavor: Google in the answer", url));
    }
    std::string body = res->body;
    while (!body.empty() && std::isspace(static_cast<unsigned char>(body.back()))) body.pop_back();
    if (body == "FALSE") return std::optional<Notice>();
    if (body != "TRUE") {
      return UnavailableError(
          fmt::format("GET {}: unexpected body '{}'", url, body.substr(0, 200)));
    }
    Notice n;
    n.flavor = MetadataFlavor::kGcp;
    n.action = "preempted";
    return std::optional<Notice>(std::move(n));
  }

 private:
  const std::string endpoint_;
  std::unique_ptr<httplib::Client> client_;
};

// ---- Azure Scheduled Events ----

class AzureNoticeSource final : public NoticeSource {
 public:
  explicit AzureNoticeSource(std::string endpoint)
      : endpoint_(NormalizeEndpoint(std::move(endpoint))), client_(MakeClient(endpoint_)) {}

  MetadataFlavor flavor() const override { return MetadataFlavor::kAzure; }
  std::string endpoint() const override { return endpoint_; }

  Result<std::optional<Notice>> Poll() override {
    const std::string url = endpoint_ + kAzurePath;
    httplib::Result res = client_->Get(kAzurePath, {{"Metadata", "true"}});
    if (!res || res->status != 200) return HttpError("GET", url, res);
    json doc = json::parse(res->body, nullptr, /*allow_exceptions=*/false);
    if (!doc.is_object() || !doc.contains("Events") || !doc["Events"].is_array()) {
      return UnavailableError(
          fmt::format("GET {}: unexpected body '{}'", url, res->body.substr(0, 200)));
    }
    for (const json& e : doc["Events"]) {
      if (!e.is_object() || JsonString(e, "EventType") != "Preempt") continue;
      Notice n;
      n.flavor = MetadataFlavor::kAzure;
      n.action = "Preempt";
      n.event_id = JsonString(e, "EventId");
      n.time_unix_s = ParseRfc1123(JsonString(e, "NotBefore")).value_or(0);
      Acknowledge(n.event_id);
      return std::optional<Notice>(std::move(n));
    }
    return std::optional<Notice>();
  }

 private:
  // Best effort: the notice matters more than the acknowledgement, which is
  // retried on the next poll that sees the event.
  void Acknowledge(const std::string& event_id) {
    if (event_id.empty() || acked_.contains(event_id)) return;
    json body = {{"StartRequests", json::array({{{"EventId", event_id}}})}};
    httplib::Result res =
        client_->Post(kAzurePath, {{"Metadata", "true"}}, body.dump(), "application/json");
    if (res && res->status == 200) {
      acked_.insert(event_id);
      return;
    }
    Status st = HttpError("POST", endpoint_ + kAzurePath, res);
    spdlog::warn("termination watcher: acknowledging event {}: {}", event_id, st.message());
  }

  const std::string endpoint_;
  std::unique_ptr<httplib::Client> client_;
  std::set<std::string> acked_;
};

std::optional<std::string> EnvVar(const char* name) {
  const char* v = std::getenv(name);
  if (v == nullptr || *v == '\0') return std::nullopt;
  return std::string(v);
}

}  // namespace

std::string_view FlavorName(MetadataFlavor f) {
  switch (f) {
    case MetadataFlavor::kAws:
      return "aws";
    case MetadataFlavor::kGcp:
      return "gcp";
    case MetadataFlavor::kAzure:
      return "azure";
  }
  return "unknown";
}

std::unique_ptr<NoticeSource> MakeAwsNoticeSource(std::string endpoint) {
  return std::make_unique<AwsNoticeSource>(std::move(endpoint));
}

std::unique_ptr<NoticeSource> MakeGcpNoticeSource(std::string endpoint) {
  return std::make_unique<GcpNoticeSource>(std::move(endpoint));
}

std::unique_ptr<NoticeSource> MakeAzureNoticeSource(std::string endpoint) {
  return std::make_unique<AzureNoticeSource>(std::move(endpoint));
}

Result<std::unique_ptr<NoticeSource>> NoticeSourceFromEnv(std::string_view flavor) {
  if (flavor == "aws") return MakeAwsNoticeSource(EnvVar(kAwsEnv).value_or(kAwsDefault));
  if (flavor == "gcp") return MakeGcpNoticeSource(EnvVar(kGcpEnv).value_or(kGcpDefault));
  if (flavor == "azure") return MakeAzureNoticeSource(EnvVar(kAzureEnv).value_or(kAzureDefault));
  if (flavor != "auto") {
    return InvalidArgumentError(
        fmt::format("termination watcher flavor '{}': expected aws, gcp, azure or auto", flavor));
  }
  if (auto v = EnvVar(kAwsEnv)) return MakeAwsNoticeSource(*v);
  if (auto v = EnvVar(kGcpEnv)) return MakeGcpNoticeSource(*v);
  if (auto v = EnvVar(kAzureEnv)) return MakeAzureNoticeSource(*v);
  return NotFoundError(
      fmt::format("no metadata endpoint in the environment: none of {}, {}, {} set", kAwsEnv,
                  kGcpEnv, kAzureEnv));
}

TerminationWatcher::TerminationWatcher(std::unique_ptr<NoticeSource> source, double interval_s,
                                       std::function<void(const Notice&)> on_notice)
    : source_(std::move(source)), interval_s_(interval_s), on_notice_(std::move(on_notice)) {
  assert(source_ != nullptr);
  thread_ = std::thread([this] { Loop(); });
}

TerminationWatcher::~TerminationWatcher() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  wake_.notify_all();
  if (thread_.joinable()) thread_.join();
}

void TerminationWatcher::Loop() {
  // A non-positive interval would spin; a millisecond is the floor.
  const auto interval = std::chrono::duration_cast<SteadyClock::duration>(
      std::chrono::duration<double>(std::max(interval_s_, 1e-3)));
  std::optional<SteadyClock::time_point> last_log;
  int64_t errors_since_log = 0;
  while (!stop_) {
    Result<std::optional<Notice>> r = source_->Poll();
    ++polls_;
    if (!r.ok()) {
      ++errors_since_log;
      auto now = SteadyClock::now();
      if (!last_log || now - *last_log >= kLogEvery) {
        spdlog::warn("termination watcher ({} at {}): {} poll error(s), latest: {}",
                     FlavorName(source_->flavor()), source_->endpoint(), errors_since_log,
                     r.status().ToString());
        last_log = now;
        errors_since_log = 0;
      }
    } else if (r->has_value()) {
      notified_ = true;
      if (on_notice_) on_notice_(**r);
      return;  // one notice is all a worker needs; the instance is going away
    }
    std::unique_lock<std::mutex> lock(mu_);
    wake_.wait_for(lock, interval, [this] { return stop_.load(); });
  }
}

}  // namespace spot::cloud
