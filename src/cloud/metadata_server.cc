#include "cloud/metadata_server.h"

#include <fmt/format.h>
#include <httplib.h>
#include <sys/socket.h>
#include <time.h>

#include <algorithm>
#include <atomic>
#include <charconv>
#include <chrono>
#include <cmath>
#include <map>
#include <mutex>
#include <nlohmann/json.hpp>
#include <optional>
#include <random>
#include <thread>

#include "core/net.h"
#include "monitor/http_guard.h"

namespace spot::cloud {
namespace {

using json = nlohmann::json;
using SteadyClock = std::chrono::steady_clock;

constexpr int kMaxTokenTtlS = 21600;  // IMDSv2's limit (six hours)
constexpr char kTokenHeader[] = "X-aws-ec2-metadata-token";
constexpr char kTokenTtlHeader[] = "X-aws-ec2-metadata-token-ttl-seconds";
// One instance's worker is the only expected client, but anything on the
// instance can connect: slow or idle connections must not lock the notice out
// (monitor/http_guard.h), so a small cap and short timeouts.
constexpr size_t kMaxConnections = 16;

struct tm UtcTm(double unix_s) {
  time_t t = static_cast<time_t>(std::floor(unix_s));
  struct tm tm {};
  gmtime_r(&t, &tm);
  return tm;
}

std::string Strftime(const char* format, const struct tm& tm) {
  char buf[64];
  size_t n = strftime(buf, sizeof(buf), format, &tm);
  return std::string(buf, n);
}

// `n` characters from `alphabet`, drawn from the OS's entropy source.
std::string RandomString(size_t n, std::string_view alphabet) {
  std::random_device rd;
  std::uniform_int_distribution<size_t> pick(0, alphabet.size() - 1);
  std::string s(n, ' ');
  for (char& c : s) c = alphabet[pick(rd)];
  return s;
}

std::string NewToken() {
  return RandomString(56, "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_");
}

// "8-4-4-4-12" hex digits, the shape of Azure's EventIds.
std::string NewEventId() {
  constexpr std::string_view kHex = "0123456789ABCDEF";
  return fmt::format("{}-{}-{}-{}-{}", RandomString(8, kHex), RandomString(4, kHex),
                     RandomString(4, kHex), RandomString(4, kHex), RandomString(12, kHex));
}

// The TTL header as IMDSv2 accepts it: an integer in [1, 21600].
std::optional<int> ParseTokenTtl(const std::string& s) {
  int v = 0;
  auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (s.empty() || ec != std::errc() || end != s.data() + s.size()) return std::nullopt;
  if (v < 1 || v > kMaxTokenTtlS) return std::nullopt;
  return v;
}

void Reply(httplib::Response& res, int status, const std::string& body,
           const char* content_type = "text/plain") {
  res.status = status;
  res.set_content(body, content_type);
}

class MetadataServerImpl final : public MetadataServer {
 public:
  MetadataServerImpl(InstanceIdentity identity, std::string host, Clock* clock)
      : identity_(std::move(identity)),
        host_(std::move(host)),
        server_(monitor::NewGuardedHttpServer({.max_connections = kMaxConnections})),
        clock_(clock) {}

  ~MetadataServerImpl() override {
    server_->stop();
    if (thread_.joinable()) thread_.join();
  }

  Status Listen(int port);

  int port() const override { return port_; }
  std::string endpoint() const override { return fmt::format("http://{}:{}", host_, port_); }
  void SetNotice(const InterruptionNotice& notice) override;
  void ClearNotice() override;
  int64_t requests() const override { return requests_.load(); }
  int64_t acknowledgements() const override { return acks_.load(); }

 private:
  void Route();
  void AwsToken(const httplib::Request& req, httplib::Response& res);
  void AwsGet(const httplib::Request& req, httplib::Response& res);
  bool TokenLive(const std::string& token);
  std::optional<std::string> AwsMetadata(const std::string& path);
  void GcpPreempted(const httplib::Request& req, httplib::Response& res);
  void AzureEvents(const httplib::Request& req, httplib::Response& res);
  void AzureAck(const httplib::Request& req, httplib::Response& res);
  json AzureDocument();

  const InstanceIdentity identity_;
  const std::string host_;
  int port_ = 0;
  std::unique_ptr<httplib::Server> server_;  // guarded (monitor/http_guard.h)
  std::thread thread_;
  std::atomic<bool> listen_returned_{false};
  std::atomic<int64_t> requests_{0};
  std::atomic<int64_t> acks_{0};

  std::mutex mu_;
  std::map<std::string, SteadyClock::time_point> tokens_;  // GUARDED_BY(mu_): token -> expiry
  std::optional<InterruptionNotice> notice_;               // GUARDED_BY(mu_)
  Clock* const clock_;
  double notice_set_unix_s_ = 0;  // GUARDED_BY(mu_)
  std::string event_id_;          // GUARDED_BY(mu_)
  int64_t incarnation_ = 1;       // GUARDED_BY(mu_)
};

Status MetadataServerImpl::Listen(int port) {
  Route();
  server_->set_socket_options(SetReuseAddressOnly);  // an endpoint must be its own
  port_ = std::max(0, monitor::BindGuardedHttpServer(*server_, host_, port));
  if (port_ <= 0) {
    return UnavailableError(fmt::format("metadata server: cannot bind {}:{}", host_, port));
  }
  thread_ = std::thread([this] {
    server_->listen_after_bind();
    listen_returned_ = true;
  });
  // stop() is a no-op until the accept loop runs, so the destructor needs it running.
  auto deadline = SteadyClock::now() + std::chrono::seconds(10);
  while (!server_->is_running() && !listen_returned_ && SteadyClock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  if (!server_->is_running()) {
    server_->stop();
    thread_.join();
    return UnavailableError(fmt::format("metadata server: {}:{} did not start", host_, port_));
  }
  return Status::Ok();
}

void MetadataServerImpl::Route() {
  server_->set_pre_routing_handler([this](const httplib::Request&, httplib::Response&) {
    ++requests_;
    return httplib::Server::HandlerResponse::Unhandled;
  });
  server_->Put("/latest/api/token",
               [this](const httplib::Request& req, httplib::Response& res) { AwsToken(req, res); });
  server_->Get("/latest/.*",
               [this](const httplib::Request& req, httplib::Response& res) { AwsGet(req, res); });
  server_->Get(
      "/computeMetadata/v1/instance/preempted",
      [this](const httplib::Request& req, httplib::Response& res) { GcpPreempted(req, res); });
  server_->Get(
      "/metadata/scheduledevents",
      [this](const httplib::Request& req, httplib::Response& res) { AzureEvents(req, res); });
  server_->Post(
      "/metadata/scheduledevents",
      [this](const httplib::Request& req, httplib::Response& res) { AzureAck(req, res); });
}

void MetadataServerImpl::SetNotice(const InterruptionNotice& notice) {
  std::lock_guard<std::mutex> lock(mu_);
  notice_ = notice;
  notice_set_unix_s_ = clock_->NowUnixS();
  event_id_ = NewEventId();
  ++incarnation_;
}

void MetadataServerImpl::ClearNotice() {
  std::lock_guard<std::mutex> lock(mu_);
  if (!notice_) return;
  notice_.reset();
  event_id_.clear();
  ++incarnation_;
}

// ---- AWS IMDSv2 ----

void MetadataServerImpl::AwsToken(const httplib::Request& req, httplib::Response& res) {
  // IMDSv2 refuses token requests that went through a proxy.
  if (req.has_header("X-Forwarded-For")) return Reply(res, 403, "Forbidden\n");
  std::optional<int> ttl = ParseTokenTtl(req.get_header_value(kTokenTtlHeader));
  if (!ttl) return Reply(res, 400, "Bad Request\n");
  std::string token = NewToken();
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto now = SteadyClock::now();
    std::erase_if(tokens_, [now](const auto& kv) { return kv.second <= now; });
    tokens_[token] = now + std::chrono::seconds(*ttl);
  }
  res.set_header(kTokenTtlHeader, std::to_string(*ttl));
  Reply(res, 200, token);
}

bool MetadataServerImpl::TokenLive(const std::string& token) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = tokens_.find(token);
  return it != tokens_.end() && SteadyClock::now() < it->second;
}

void MetadataServerImpl::AwsGet(const httplib::Request& req, httplib::Response& res) {
  if (!req.has_header(kTokenHeader) || !TokenLive(req.get_header_value(kTokenHeader))) {
    return Reply(res, 401, "Unauthorized\n");
  }
  constexpr std::string_view kPrefix = "/latest/meta-data/";
  std::optional<std::string> value;
  if (req.path.starts_with(kPrefix)) value = AwsMetadata(req.path.substr(kPrefix.size()));
  if (!value) return Reply(res, 404, "Not Found\n");
  bool is_json = !value->empty() && value->front() == '{';
  Reply(res, 200, *value, is_json ? "application/json" : "text/plain");
}

std::optional<std::string> MetadataServerImpl::AwsMetadata(const std::string& path) {
  if (path == "instance-id") return identity_.instance_id;
  if (path == "instance-type") return identity_.instance_type;
  if (path == "instance-life-cycle") return identity_.spot ? "spot" : "on-demand";
  if (path == "placement/availability-zone") return identity_.zone;
  if (path == "placement/region") return identity_.region;
  std::lock_guard<std::mutex> lock(mu_);
  if (!notice_) return std::nullopt;
  if (path == "spot/instance-action") {
    return json{{"action", notice_->action}, {"time", Iso8601Utc(notice_->time_unix_s)}}.dump();
  }
  if (path == "events/recommendations/rebalance") {
    return json{{"noticeTime", Iso8601Utc(notice_set_unix_s_)}}.dump();
  }
  return std::nullopt;
}

// ---- GCP ----

void MetadataServerImpl::GcpPreempted(const httplib::Request& req, httplib::Response& res) {
  res.set_header("Metadata-Flavor", "Google");
  // Like the real server: the flavor header is required and proxied requests are refused.
  if (req.get_header_value("Metadata-Flavor") != "Google" || req.has_header("X-Forwarded-For")) {
    return Reply(res, 403, "Missing Metadata-Flavor:Google header.\n");
  }
  bool preempted = false;
  {
    std::lock_guard<std::mutex> lock(mu_);
    preempted = notice_.has_value();
  }
  Reply(res, 200, preempted ? "TRUE" : "FALSE", "application/text");
}

// ---- Azure Scheduled Events ----

json MetadataServerImpl::AzureDocument() {
  std::lock_guard<std::mutex> lock(mu_);
  json events = json::array();
  if (notice_) {
    events.push_back({{"EventId", event_id_},
                      {"EventType", "Preempt"},
                      {"ResourceType", "VirtualMachine"},
                      {"Resources", json::array({identity_.instance_id})},
                      {"EventStatus", "Scheduled"},
                      {"NotBefore", Rfc1123Utc(notice_->time_unix_s)},
                      {"Description", "Virtual machine is being evicted."},
                      {"EventSource", "Platform"},
                      {"DurationInSeconds", -1}});
  }
  return json{{"DocumentIncarnation", incarnation_}, {"Events", std::move(events)}};
}

bool AzureRequestValid(const httplib::Request& req, httplib::Response& res) {
  if (req.get_header_value("Metadata") != "true") {
    Reply(res, 400, R"({"error":"Bad request. Required metadata header not specified"})",
          "application/json");
    return false;
  }
  if (!req.has_param("api-version")) {
    Reply(res, 400, R"({"error":"Bad request. api-version was not specified"})",
          "application/json");
    return false;
  }
  return true;
}

void MetadataServerImpl::AzureEvents(const httplib::Request& req, httplib::Response& res) {
  if (!AzureRequestValid(req, res)) return;
  Reply(res, 200, AzureDocument().dump(), "application/json");
}

void MetadataServerImpl::AzureAck(const httplib::Request& req, httplib::Response& res) {
  if (!AzureRequestValid(req, res)) return;
  json body = json::parse(req.body, nullptr, /*allow_exceptions=*/false);
  auto starts = body.is_object() ? body.find("StartRequests") : body.end();
  if (!body.is_object() || starts == body.end() || !starts->is_array()) {
    return Reply(res, 400, R"({"error":"Bad request. StartRequests expected"})",
                 "application/json");
  }
  std::lock_guard<std::mutex> lock(mu_);
  for (const json& s : *starts) {
    if (!s.is_object() || !s.contains("EventId") || !s["EventId"].is_string()) continue;
    if (notice_ && s["EventId"].get<std::string>() == event_id_) ++acks_;
  }
  Reply(res, 200, "", "application/json");
}

}  // namespace

Result<std::unique_ptr<MetadataServer>> MetadataServer::Start(InstanceIdentity identity,
                                                              const std::string& host, int port,
                                                              Clock* clock) {
  auto server =
      std::make_unique<MetadataServerImpl>(std::move(identity), host, clock ? clock : RealClock());
  SPOT_RETURN_IF_ERROR(server->Listen(port));
  return std::unique_ptr<MetadataServer>(std::move(server));
}

std::string Iso8601Utc(double unix_s) { return Strftime("%Y-%m-%dT%H:%M:%SZ", UtcTm(unix_s)); }

std::string Rfc1123Utc(double unix_s) {
  // Day and month names spelled out here: strftime's %a and %b follow the locale.
  static constexpr const char* kDays[] = {"Sun", "Mon", "Tue", "Wed", "Thu", "Fri", "Sat"};
  static constexpr const char* kMonths[] = {"Jan", "Feb", "Mar", "Apr", "May", "Jun",
                                            "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"};
  struct tm tm = UtcTm(unix_s);
  return fmt::format("{}, {} {} {} GMT", kDays[tm.tm_wday], Strftime("%d", tm), kMonths[tm.tm_mon],
                     Strftime("%Y %H:%M:%S", tm));
}

}  // namespace spot::cloud
