#include "dist/etcd_kv_store.h"

#include <fmt/format.h>
#include <httplib.h>
#include <spdlog/spdlog.h>

#include <atomic>
#include <charconv>
#include <cstdint>
#include <map>
#include <mutex>
#include <nlohmann/json.hpp>
#include <optional>
#include <ranges>
#include <string_view>
#include <vector>

#include "core/base64.h"

namespace spot::dist {
namespace {

using json = nlohmann::json;

// The gateway writes int64 as strings and omits fields that are zero.
int64_t JsonInt(const json& obj, const char* field) {
  auto it = obj.find(field);
  if (it == obj.end()) return 0;
  if (it->is_number_integer()) return it->get<int64_t>();
  if (!it->is_string()) return 0;
  const std::string& s = it->get_ref<const std::string&>();
  int64_t v = 0;
  std::from_chars(s.data(), s.data() + s.size(), v);
  return v;
}

bool JsonBool(const json& obj, const char* field) {
  auto it = obj.find(field);
  return it != obj.end() && it->is_boolean() && it->get<bool>();
}

// Maps a gRPC code (as the gateway reports it) to what a caller should do.
StatusCode FromGrpcCode(int64_t code) {
  switch (code) {
    case 3:   // INVALID_ARGUMENT (e.g. request too large)
    case 11:  // OUT_OF_RANGE (e.g. a compacted revision)
      return StatusCode::kInvalidArgument;
    case 5:  // NOT_FOUND (e.g. an unknown lease)
      return StatusCode::kNotFound;
    case 7:   // PERMISSION_DENIED
    case 9:   // FAILED_PRECONDITION
    case 16:  // UNAUTHENTICATED
      return StatusCode::kFailedPrecondition;
    case 1:   // CANCELLED
    case 4:   // DEADLINE_EXCEEDED
    case 8:   // RESOURCE_EXHAUSTED (too many requests)
    case 10:  // ABORTED
    case 14:  // UNAVAILABLE (no leader, stopping)
      return StatusCode::kUnavailable;
    default:
      return StatusCode::kInternal;
  }
}

// An idle pool of kept-alive connections: each request borrows one, so calls
// from different threads do not wait on each other.
class ClientPool {
 public:
  ClientPool(std::string endpoint, std::chrono::milliseconds timeout)
      : endpoint_(std::move(endpoint)), timeout_(timeout) {}

  std::unique_ptr<httplib::Client> Acquire() {
    {
      std::lock_guard<std::mutex> l(mu_);
      if (!idle_.empty()) {
        std::unique_ptr<httplib::Client> c = std::move(idle_.back());
        idle_.pop_back();
        return c;
      }
    }
    auto c = std::make_unique<httplib::Client>(endpoint_);
    c->set_keep_alive(true);
    // httplib sends headers and body in separate writes; with Nagle on, the body
    // then waits for the delayed ACK of the headers (~40 ms a request).
    c->set_tcp_nodelay(true);
    c->set_connection_timeout(timeout_);
    c->set_read_timeout(timeout_);
    c->set_write_timeout(timeout_);
    return c;
  }

  // Only clients whose last request succeeded come back.
  void Release(std::unique_ptr<httplib::Client> c) {
    std::lock_guard<std::mutex> l(mu_);
    if (idle_.size() < kMaxIdle) idle_.push_back(std::move(c));
  }

 private:
  static constexpr size_t kMaxIdle = 16;
  const std::string endpoint_;
  const std::chrono::milliseconds timeout_;
  std::mutex mu_;
  std::vector<std::unique_ptr<httplib::Client>> idle_;  // GUARDED_BY(mu_)
};

// The members of a comma-separated endpoint list, each without a trailing '/'.
std::vector<std::string> Members(const std::string& endpoint) {
  std::vector<std::string> out;
  for (const auto part : std::views::split(endpoint, ',')) {
    std::string m(part.begin(), part.end());
    if (m.ends_with('/')) m.pop_back();  // "http://h:2379/"
    out.push_back(std::move(m));
  }
  return out;
}

// Requests that do the same when sent twice: one that may have reached a
// member that then stopped answering may go to another.
bool Repeatable(std::string_view path) { return path != "/v3/kv/txn" && path != "/v3/lease/grant"; }

class EtcdKvStore final : public KvStore {
 public:
  explicit EtcdKvStore(const EtcdOptions& o)
      : endpoints_(Members(o.endpoint)),
        prefix_(o.key_prefix),
        ttl_(o.liveness_ttl),
        timeout_(o.request_timeout) {
    for (const std::string& e : endpoints_) {
      pools_.push_back(std::make_unique<ClientPool>(e, o.request_timeout));
    }
  }

  Result<std::optional<std::string>> Get(const std::string& key) override {
    return RangeOne(prefix_ + key);
  }
  Status Put(const std::string& key, const std::string& value) override {
    return Call("/v3/kv/put", PutRequest(prefix_ + key, value, 0)).status();
  }
  Result<bool> CompareAndSwap(const std::string& key, const std::optional<std::string>& expected,
                              const std::string& desired) override;
  Status Delete(const std::string& key) override { return DeleteKey(prefix_ + key); }

  Status Heartbeat(const std::string& id) override;
  Result<bool> IsAlive(const std::string& id) override;
  Status MarkDead(const std::string& id) override;
  std::chrono::milliseconds liveness_ttl() const override { return ttl_; }

 private:
  static json PutRequest(const std::string& full_key, const std::string& value, int64_t lease);
  // POSTs `request` to the gateway; the parsed answer, or the error as a Status.
  Result<json> Call(const char* path, const json& request);
  Status GatewayError(const std::string& member, const char* path, int http_status,
                      const std::string& body) const;
  Result<std::optional<std::string>> RangeOne(const std::string& full_key);
  Status DeleteKey(const std::string& full_key);
  Result<int64_t> GrantLease();
  Result<bool> KeepAlive(int64_t lease);  // false: the lease is gone
  Status EnsureAliveKey(const std::string& id, int64_t lease);
  std::string AliveKey(const std::string& id) const { return prefix_ + "alive/" + id; }

  // The member requests go to first (the one that answered last).
  const std::string& Current() const { return endpoints_[current_.load()]; }

  const std::vector<std::string> endpoints_;
  const std::string prefix_;
  const std::chrono::seconds ttl_;
  const std::chrono::milliseconds timeout_;
  std::vector<std::unique_ptr<ClientPool>> pools_;  // one per member
  std::atomic<size_t> current_{0};
  std::mutex liveness_mu_;                 // held across a whole Heartbeat or MarkDead
  std::map<std::string, int64_t> leases_;  // GUARDED_BY(liveness_mu_): id -> lease we granted
};

json EtcdKvStore::PutRequest(const std::string& full_key, const std::string& value, int64_t lease) {
  json put = {{"key", Base64Encode(full_key)}, {"value", Base64Encode(value)}};
  if (lease != 0) put["lease"] = std::to_string(lease);
  return put;
}

Result<json> EtcdKvStore::Call(const char* path, const json& request) {
  httplib::Request req;
  req.method = "POST";
  req.path = path;
  req.body = request.dump();
  req.set_header("Content-Type", "application/json");
  const size_t n = endpoints_.size(), first = current_.load();
  std::string failures;
  for (size_t k = 0; k < n; ++k) {
    const size_t i = (first + k) % n;
    httplib::Response res;
    httplib::Error error = httplib::Error::Success;
    std::unique_ptr<httplib::Client> client = pools_[i]->Acquire();
    bool sent = client->send(req, res, error);
    // The gateway ends an error body with an HTTP trailer, which httplib 0.11
    // cannot parse: it reports a read error although status and body arrived.
    bool error_then_trailer =
        !sent && error == httplib::Error::Read && res.status >= 400 && json::accept(res.body);
    if (!sent && !error_then_trailer) {
      failures += fmt::format("{}etcd at {}: POST {}: {} (request timeout {} ms)",
                              failures.empty() ? "" : "; ", endpoints_[i], path,
                              httplib::to_string(error), timeout_.count());
      // The next member, unless this one may have done it (connected, then
      // no answer) and a second time would differ.
      current_.store((i + 1) % n);
      if (error != httplib::Error::Connection && !Repeatable(path)) break;
      continue;
    }
    if (sent) pools_[i]->Release(std::move(client));
    json body = json::parse(res.body, nullptr, /*allow_exceptions=*/false);
    if (res.status != 200 || !body.is_object() || body.contains("error")) {
      Status s = GatewayError(endpoints_[i], path, res.status, res.body);
      // A member that answers "no leader" (cut off from the others) or
      // fails is asked last next time; this request is the caller's to retry.
      current_.store(s.code() == StatusCode::kUnavailable ? (i + 1) % n : i);
      return s;
    }
    current_.store(i);
    return body;
  }
  return UnavailableError(failures);
}

Status EtcdKvStore::GatewayError(const std::string& member, const char* path, int http_status,
                                 const std::string& body) const {
  std::string where = fmt::format("etcd at {}: POST {}", member, path);
  json err = json::parse(body, nullptr, /*allow_exceptions=*/false);
  if (err.is_object() && err.contains("result")) err = err["result"];  // a stream's error
  if (err.is_object() && err.contains("error") && err["error"].is_object()) err = err["error"];
  if (!err.is_object() || !err.contains("message")) {
    StatusCode code = http_status >= 500 ? StatusCode::kUnavailable : StatusCode::kInternal;
    return Status(code, fmt::format("{}: HTTP {}: {:.200}", where, http_status, body));
  }
  std::string message = err["message"].is_string() ? err["message"].get<std::string>() : "";
  int64_t grpc = JsonInt(err, "code");
  StatusCode code = FromGrpcCode(grpc);
  // RESOURCE_EXHAUSTED is also gRPC's "received message larger than max":
  // a request too large for etcd, which no retry fixes.
  if (message.find("larger than max") != std::string::npos) code = StatusCode::kInvalidArgument;
  return Status(code, fmt::format("{}: {} (gRPC code {})", where, message, grpc));
}

Result<std::optional<std::string>> EtcdKvStore::RangeOne(const std::string& full_key) {
  json request = {{"key", Base64Encode(full_key)}};
  SPOT_ASSIGN_OR_RETURN(json r, Call("/v3/kv/range", request));
  auto kvs = r.find("kvs");
  if (kvs == r.end() || !kvs->is_array() || kvs->empty()) return std::optional<std::string>();
  const json& kv = (*kvs)[0];
  auto value = kv.find("value");  // absent when the value is empty
  if (value == kv.end()) return std::optional<std::string>("");
  std::optional<std::string> decoded =
      value->is_string() ? Base64Decode(value->get<std::string>()) : std::nullopt;
  if (!decoded) return InternalError(fmt::format("etcd at {}: value not base64", Current()));
  return decoded;
}

Status EtcdKvStore::DeleteKey(const std::string& full_key) {
  json request = {{"key", Base64Encode(full_key)}};
  return Call("/v3/kv/deleterange", request).status();
}

Result<bool> EtcdKvStore::CompareAndSwap(const std::string& key,
                                         const std::optional<std::string>& expected,
                                         const std::string& desired) {
  std::string full = Base64Encode(prefix_ + key);
  // "Absent" is "created at revision 0"; comparing VALUE on a missing key fails.
  json compare =
      expected
          ? json{{"key", full},
                 {"target", "VALUE"},
                 {"result", "EQUAL"},
                 {"value", Base64Encode(*expected)}}
          : json{
                {"key", full}, {"target", "CREATE"}, {"result", "EQUAL"}, {"create_revision", "0"}};
  json put = {{"request_put", PutRequest(prefix_ + key, desired, 0)}};
  json request = {{"compare", json::array({compare})}, {"success", json::array({put})}};
  SPOT_ASSIGN_OR_RETURN(json r, Call("/v3/kv/txn", request));
  return JsonBool(r, "succeeded");  // omitted when false
}

Result<int64_t> EtcdKvStore::GrantLease() {
  json request = {{"TTL", std::to_string(ttl_.count())}};
  SPOT_ASSIGN_OR_RETURN(json r, Call("/v3/lease/grant", request));
  int64_t id = JsonInt(r, "ID");
  if (id == 0) return InternalError(fmt::format("etcd at {}: lease grant without ID", Current()));
  int64_t granted = JsonInt(r, "TTL");
  if (granted > ttl_.count()) {
    spdlog::warn("etcd at {} raised the liveness TTL from {} s to its minimum, {} s", Current(),
                 ttl_.count(), granted);
  }
  return id;
}

Result<bool> EtcdKvStore::KeepAlive(int64_t lease) {
  // A stream in gRPC: the gateway answers {"result": {...}}, with no TTL (0)
  // for a lease that expired or was revoked, rather than an error.
  json request = {{"ID", std::to_string(lease)}};
  SPOT_ASSIGN_OR_RETURN(json r, Call("/v3/lease/keepalive", request));
  auto result = r.find("result");
  return result != r.end() && result->is_object() && JsonInt(*result, "TTL") > 0;
}

// Puts the alive key under `lease` unless it is already attached to it: a txn
// that writes nothing in the usual case, so heartbeats do not grow etcd's history.
Status EtcdKvStore::EnsureAliveKey(const std::string& id, int64_t lease) {
  std::string key = AliveKey(id);
  json compare = {{"key", Base64Encode(key)},
                  {"target", "LEASE"},
                  {"result", "EQUAL"},
                  {"lease", std::to_string(lease)}};
  json put = {{"request_put", PutRequest(key, "", lease)}};
  json request = {{"compare", json::array({compare})}, {"failure", json::array({put})}};
  return Call("/v3/kv/txn", request).status();
}

Status EtcdKvStore::Heartbeat(const std::string& id) {
  std::lock_guard<std::mutex> l(liveness_mu_);
  auto it = leases_.find(id);
  if (it != leases_.end()) {
    SPOT_ASSIGN_OR_RETURN(bool renewed, KeepAlive(it->second));
    if (renewed) {
      Status s = EnsureAliveKey(id, it->second);
      if (s.code() == StatusCode::kNotFound) leases_.erase(it);  // expired meanwhile
      return s;
    }
    leases_.erase(it);
  }
  SPOT_ASSIGN_OR_RETURN(int64_t lease, GrantLease());
  leases_[id] = lease;
  return EnsureAliveKey(id, lease);
}

Result<bool> EtcdKvStore::IsAlive(const std::string& id) {
  SPOT_ASSIGN_OR_RETURN(std::optional<std::string> v, RangeOne(AliveKey(id)));
  return v.has_value();
}

Status EtcdKvStore::MarkDead(const std::string& id) {
  std::lock_guard<std::mutex> l(liveness_mu_);
  auto it = leases_.find(id);
  if (it != leases_.end()) {
    json request = {{"ID", std::to_string(it->second)}};
    Status s = Call("/v3/lease/revoke", request).status();
    if (!s.ok() && s.code() != StatusCode::kNotFound) return s;  // NotFound: already expired
    leases_.erase(it);
  }
  return DeleteKey(AliveKey(id));  // another client's key, or a key whose lease we lost
}

Status ValidateOptions(const EtcdOptions& o) {
  const std::vector<std::string> members = Members(o.endpoint);
  if (members.empty()) return InvalidArgumentError("etcd endpoint: empty, want http://host:port");
  for (const std::string& e : members) {
    bool http = e.rfind("http://", 0) == 0 || e.rfind("https://", 0) == 0;
    size_t host = e.find("://") + 3;
    if (!http || e.find('/', host) != std::string::npos || e.size() == host) {
      return InvalidArgumentError(
          fmt::format("etcd endpoint '{}': want http://host:port (no path){}", e,
                      members.size() > 1 ? ", each member of a comma-separated list" : ""));
    }
    if (!httplib::Client(e).is_valid()) {
      return InvalidArgumentError(fmt::format("etcd endpoint '{}': not a valid URL", e));
    }
  }
  if (o.liveness_ttl < std::chrono::seconds(1)) {
    return InvalidArgumentError(
        fmt::format("etcd liveness_ttl {} s: must be at least 1 s", o.liveness_ttl.count()));
  }
  if (o.request_timeout <= std::chrono::milliseconds(0)) {
    return InvalidArgumentError("etcd request_timeout must be positive");
  }
  return Status::Ok();
}

}  // namespace

Result<std::unique_ptr<KvStore>> NewEtcdKvStore(const EtcdOptions& options) {
  SPOT_RETURN_IF_ERROR(ValidateOptions(options));
  return std::unique_ptr<KvStore>(std::make_unique<EtcdKvStore>(options));
}

}  // namespace spot::dist
