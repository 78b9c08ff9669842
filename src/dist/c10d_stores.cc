#include "dist/c10d_stores.h"

#include <c10/util/Exception.h>
#include <fmt/format.h>
#include <netdb.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cstring>
#include <mutex>
#include <random>
#include <ranges>
#include <regex>
#include <string_view>
#include <thread>

#include "core/clock.h"
#include "dist/etcd_kv_store.h"

namespace spot::dist {
namespace {

std::vector<uint8_t> Bytes(const std::string& s) { return {s.begin(), s.end()}; }
std::string Text(const std::vector<uint8_t>& v) { return {v.begin(), v.end()}; }

// Runs a c10d call, turning its exceptions into Unavailable.
template <typename F>
auto Guard(const char* what, F&& f) -> Result<decltype(f())> {
  try {
    return f();
  } catch (const std::exception& e) {
    return UnavailableError(fmt::format("rendezvous store {}: {}", what, e.what()));
  }
}

// Stored values are "=" + a 16-hex-digit nonce + the value: the tag keeps an
// empty value apart from absence (c10d's compareSet takes an empty expected
// value to mean "absent"), and the nonce makes every write unique, so a
// compare-and-swap knows it was its own write that landed (c10d's
// compareSet only returns the value now stored).
class C10dKvStore final : public KvStore {
 public:
  C10dKvStore(c10::intrusive_ptr<c10d::Store> store, std::string prefix,
              std::chrono::milliseconds ttl)
      : store_(std::move(store)), prefix_(std::move(prefix)), ttl_(ttl) {}

  Result<std::optional<std::string>> Get(const std::string& key) override {
    SPOT_ASSIGN_OR_RETURN(std::optional<std::string> raw, GetRaw(key));
    if (!raw) return raw;
    return std::optional<std::string>(raw->substr(kHeader));
  }
  Status Put(const std::string& key, const std::string& value) override {
    return Guard("set",
                 [&] {
                   std::lock_guard<std::mutex> l(mu_);
                   return (store_->set(prefix_ + key, Bytes(Stored(value))), 0);
                 })
        .status();
  }
  Result<bool> CompareAndSwap(const std::string& key, const std::optional<std::string>& expected,
                              const std::string& desired) override {
    std::string current;  // raw bytes to compare against; "" = absent
    if (expected) {
      SPOT_ASSIGN_OR_RETURN(std::optional<std::string> raw, GetRaw(key));
      if (!raw || raw->substr(kHeader) != *expected) return false;
      current = *raw;
    }
    const std::string want = Stored(desired);
    return Guard("compare-set", [&] {
      std::lock_guard<std::mutex> l(mu_);
      return Text(store_->compareSet(prefix_ + key, Bytes(current), Bytes(want))) == want;
    });
  }
  Status Delete(const std::string& key) override {
    return Guard("delete",
                 [&] {
                   std::lock_guard<std::mutex> l(mu_);
                   return store_->deleteKey(prefix_ + key);
                 })
        .status();
  }
  Status Heartbeat(const std::string& id) override {
    return Put("alive/" + id, std::to_string(RealClock()->NowUnixMs()));
  }
  Result<bool> IsAlive(const std::string& id) override {
    SPOT_ASSIGN_OR_RETURN(std::optional<std::string> v, Get("alive/" + id));
    if (!v) return false;
    // A heartbeat is a Unix time in ms; anything else is no sign of life.
    int64_t beat_ms = 0;
    auto [end, ec] = std::from_chars(v->data(), v->data() + v->size(), beat_ms);
    if (ec != std::errc() || end != v->data() + v->size()) return false;
    return RealClock()->NowUnixMs() - beat_ms < ttl_.count();
  }
  Status MarkDead(const std::string& id) override { return Delete("alive/" + id); }
  std::chrono::milliseconds liveness_ttl() const override { return ttl_; }

 private:
  static constexpr size_t kHeader = 17;  // "=" and 16 hex digits

  static std::string Stored(const std::string& value) {
    thread_local std::mt19937_64 rng{std::random_device{}() ^
                                     std::hash<std::thread::id>{}(std::this_thread::get_id())};
    return fmt::format("={:016x}", rng()) + value;
  }
  // One round trip that cannot race a delete: TCPStore's server throws on a
  // get of a missing key and closes the client's socket, so a check then a
  // get fails (and breaks the connection) when another client deletes the
  // key in between, as a leaving member does its liveness key. compareSet
  // with an expected value no write ever stores (stored values begin with
  // '=') changes nothing and returns the value, or, for a missing key, the
  // expected value itself.
  Result<std::optional<std::string>> GetRaw(const std::string& key) {
    return Guard("get", [&]() -> std::optional<std::string> {
      static const std::string kAbsent =
          "\x01"
          "absent";
      std::lock_guard<std::mutex> l(mu_);
      const std::string k = prefix_ + key;
      std::string raw = Text(store_->compareSet(k, Bytes(kAbsent), Bytes(kAbsent)));
      if (raw == kAbsent) return std::nullopt;
      if (raw.size() < kHeader || raw[0] != '=') {
        throw std::runtime_error("key " + k + " does not hold a rendezvous value");
      }
      return raw;
    });
  }

  c10::intrusive_ptr<c10d::Store> store_;
  const std::string prefix_;
  const std::chrono::milliseconds ttl_;
  // A TCPStore client is one socket: calls from the heartbeat thread and the
  // rendezvous must not interleave their bytes on it.
  std::mutex mu_;
};

class KvC10dStore final : public c10d::Store {
 public:
  KvC10dStore(std::shared_ptr<KvStore> kv, std::string prefix, std::chrono::milliseconds timeout)
      : Store(timeout), kv_(std::move(kv)), prefix_(std::move(prefix)) {}

  void set(const std::string& key, const std::vector<uint8_t>& value) override {
    Check(kv_->Put(prefix_ + key, Text(value)));
  }
  std::vector<uint8_t> compareSet(const std::string& key, const std::vector<uint8_t>& expected,
                                  const std::vector<uint8_t>& desired) override {
    std::optional<std::string> e;
    if (!expected.empty()) e = Text(expected);
    Result<bool> swapped = kv_->CompareAndSwap(prefix_ + key, e, Text(desired));
    Check(swapped.status());
    if (*swapped) return desired;
    Result<std::optional<std::string>> now = kv_->Get(prefix_ + key);
    Check(now.status());
    return *now ? Bytes(**now) : expected;
  }
  std::vector<uint8_t> get(const std::string& key) override {
    wait({key});
    Result<std::optional<std::string>> v = kv_->Get(prefix_ + key);
    Check(v.status());
    TORCH_CHECK(v->has_value(), "key ", key, " vanished");
    return Bytes(**v);
  }
  int64_t add(const std::string& key, int64_t delta) override {
    while (true) {
      Result<std::optional<std::string>> v = kv_->Get(prefix_ + key);
      Check(v.status());
      int64_t now = *v ? std::stoll(**v) : 0;
      Result<bool> ok = kv_->CompareAndSwap(prefix_ + key, *v, std::to_string(now + delta));
      Check(ok.status());
      if (*ok) return now + delta;
    }
  }
  bool deleteKey(const std::string& key) override {
    Check(kv_->Delete(prefix_ + key));
    return true;
  }
  bool check(const std::vector<std::string>& keys) override {
    for (const std::string& k : keys) {
      Result<std::optional<std::string>> v = kv_->Get(prefix_ + k);
      Check(v.status());
      if (!v->has_value()) return false;
    }
    return true;
  }
  int64_t getNumKeys() override { TORCH_CHECK(false, "getNumKeys is not supported over etcd"); }
  void wait(const std::vector<std::string>& keys) override { wait(keys, timeout_); }
  void wait(const std::vector<std::string>& keys,
            const std::chrono::milliseconds& timeout) override {
    auto deadline = std::chrono::steady_clock::now() + timeout;
    auto pause = std::chrono::milliseconds(1);
    while (!check(keys)) {
      TORCH_CHECK(std::chrono::steady_clock::now() < deadline, "timed out after ", timeout.count(),
                  " ms waiting for key ", keys.front());
      std::this_thread::sleep_for(pause);
      pause = std::min(pause * 2, std::chrono::milliseconds(20));
    }
  }

 private:
  static void Check(const Status& st) { TORCH_CHECK(st.ok(), st.message()); }

  std::shared_ptr<KvStore> kv_;
  const std::string prefix_;
};

}  // namespace

std::unique_ptr<KvStore> NewC10dKvStore(c10::intrusive_ptr<c10d::Store> store, std::string prefix,
                                        std::chrono::milliseconds liveness_ttl) {
  return std::make_unique<C10dKvStore>(std::move(store), std::move(prefix), liveness_ttl);
}

c10::intrusive_ptr<c10d::Store> NewKvC10dStore(std::shared_ptr<KvStore> kv, std::string prefix,
                                               std::chrono::milliseconds timeout) {
  return c10::make_intrusive<KvC10dStore>(std::move(kv), std::move(prefix), timeout);
}

Result<c10::intrusive_ptr<c10d::TCPStore>> HostTcpStore(const std::string& host, int port,
                                                        std::chrono::milliseconds timeout) {
  try {
    c10d::TCPStoreOptions o{.port = static_cast<uint16_t>(port),
                            .isServer = true,
                            .waitWorkers = false,
                            .timeout = timeout};
    return c10::make_intrusive<c10d::TCPStore>(host, o);
  } catch (const std::exception& e) {
    return UnavailableError(
        fmt::format("cannot host a rendezvous store on {}:{}: {}", host, port, e.what()));
  }
}

namespace {

using SteadyClock = std::chrono::steady_clock;

// How often a wait for the store checks `stop`.
constexpr std::chrono::milliseconds kStopCheck{50};

// The probe, in LibTorch 1.13's TCPStore wire format
// (torch/csrc/distributed/c10d/TCPStore.cpp): a query is a uint8 type and
// its arguments; a string or byte vector is a uint64 length (host order) and
// the bytes; a client puts "/" before every key. SET has no reply; GET
// replies with the value as a byte vector. Every prober writes the same
// value, so concurrent probes read back what they expect, and the store
// keeps one small key.
constexpr uint8_t kQuerySet = 0;
constexpr uint8_t kQueryGet = 2;
constexpr std::string_view kProbeKey = "spot/probe";
constexpr std::string_view kProbeValue = "spot rendezvous probe 1";

void AppendSized(std::string& out, std::string_view bytes) {
  const uint64_t n = bytes.size();
  out.append(reinterpret_cast<const char*>(&n), sizeof(n));
  out.append(bytes);
}

std::string ProbeQueries() {
  const std::string key = "/" + std::string(kProbeKey);
  std::string q(1, static_cast<char>(kQuerySet));
  AppendSized(q, key);
  AppendSized(q, kProbeValue);
  q.push_back(static_cast<char>(kQueryGet));
  AppendSized(q, key);
  return q;
}

std::string ProbeReply() {
  std::string r;
  AppendSized(r, kProbeValue);
  return r;
}

// Bytes as text for an error message: printable ASCII kept, the rest escaped.
std::string Printable(std::string_view bytes) {
  std::string out;
  for (unsigned char c : bytes) {
    switch (c) {
      case '\r':
        out += "\\r";
        break;
      case '\n':
        out += "\\n";
        break;
      default:
        bool plain = c >= 0x20 && c < 0x7f && c != '"' && c != '\\';
        out += plain ? std::string(1, static_cast<char>(c)) : fmt::format("\\x{:02x}", c);
    }
  }
  return out;
}

// One probe of a tcp:// rendezvous: every wait ends at the deadline, or as
// soon as `stop` says so.
class StoreProbe {
 public:
  StoreProbe(std::string url, std::chrono::milliseconds timeout, std::function<bool()> stop)
      : url_(std::move(url)),
        timeout_s_(std::chrono::duration<double>(timeout).count()),
        deadline_(SteadyClock::now() + timeout),
        stop_(std::move(stop)) {}
  ~StoreProbe() {
    if (fd_ >= 0) ::close(fd_);
  }
  StoreProbe(const StoreProbe&) = delete;
  StoreProbe& operator=(const StoreProbe&) = delete;

  Status Run(const Endpoint& e) {
    SPOT_RETURN_IF_ERROR(Connect(e));
    SPOT_RETURN_IF_ERROR(Send(ProbeQueries()));
    return Expect(ProbeReply());
  }

 private:
  Status Stopped() const {
    return AbortedError(fmt::format("stopped while waiting for rendezvous {}", url_));
  }
  Status NoAnswer(std::string_view why) const {
    return UnavailableError(fmt::format(
        "rendezvous {} did not answer as a rendezvous within {:g} s ({})", url_, timeout_s_, why));
  }
  // Waits for `events` on fd_: true when ready, false at the deadline.
  Result<bool> Wait(short events) const {
    while (true) {
      if (stop_ && stop_()) return Stopped();
      auto left =
          std::chrono::duration_cast<std::chrono::milliseconds>(deadline_ - SteadyClock::now());
      if (left.count() <= 0) return false;
      pollfd p{fd_, events, 0};
      int r = ::poll(&p, 1, static_cast<int>(std::min(left, kStopCheck).count()));
      if (r > 0) return true;
      if (r < 0 && errno != EINTR) return false;
    }
  }
  // Sleeps up to `d` (less at the deadline), checking `stop`.
  Status Pause(std::chrono::milliseconds d) const {
    const auto until = std::min(deadline_, SteadyClock::now() + d);
    while (SteadyClock::now() < until) {
      if (stop_ && stop_()) return Stopped();
      std::this_thread::sleep_for(
          std::min<SteadyClock::duration>(kStopCheck, until - SteadyClock::now()));
    }
    return Status::Ok();
  }
  // One non-blocking connect to `a`; false (and why in `error`) when refused or late.
  Result<bool> TryConnect(const addrinfo& a, std::string* error) {
    fd_ = ::socket(a.ai_family, a.ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC, a.ai_protocol);
    if (fd_ < 0) {
      *error = std::strerror(errno);
      return false;
    }
    int err = ::connect(fd_, a.ai_addr, a.ai_addrlen) == 0 ? 0 : errno;
    if (err == EINPROGRESS) {
      SPOT_ASSIGN_OR_RETURN(bool ready, Wait(POLLOUT));
      socklen_t len = sizeof(err);
      err = ETIMEDOUT;
      if (ready) ::getsockopt(fd_, SOL_SOCKET, SO_ERROR, &err, &len);
    }
    if (err == 0) return true;
    *error = std::strerror(err);
    ::close(fd_);
    fd_ = -1;
    return false;
  }
  // Retries while nothing accepts (the store may not have started yet).
  Status Connect(const Endpoint& e) {
    std::string host = e.host;
    if (host.starts_with('[')) host = host.substr(1, host.size() - 2);
    addrinfo hints{};
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    hints.ai_flags = AI_NUMERICSERV;
    addrinfo* found = nullptr;
    if (int rc = ::getaddrinfo(host.c_str(), std::to_string(e.port).c_str(), &hints, &found);
        rc != 0) {
      return UnavailableError(
          fmt::format("rendezvous {}: cannot resolve {}: {}", url_, host, ::gai_strerror(rc)));
    }
    std::unique_ptr<addrinfo, decltype(&::freeaddrinfo)> addrs(found, ::freeaddrinfo);
    std::string error = "no address";
    while (true) {
      for (const addrinfo* a = addrs.get(); a != nullptr; a = a->ai_next) {
        SPOT_ASSIGN_OR_RETURN(bool connected, TryConnect(*a, &error));
        if (connected) return Status::Ok();
      }
      if (SteadyClock::now() >= deadline_) {
        return UnavailableError(
            fmt::format("rendezvous {}: no store accepted a connection within {:g} s ({})", url_,
                        timeout_s_, error));
      }
      SPOT_RETURN_IF_ERROR(Pause(std::chrono::milliseconds(100)));
    }
  }
  Status Send(std::string_view bytes) {
    while (!bytes.empty()) {
      SPOT_ASSIGN_OR_RETURN(bool ready, Wait(POLLOUT));
      if (!ready) return NoAnswer("it accepted the connection but took no data");
      ssize_t n = ::send(fd_, bytes.data(), bytes.size(), MSG_NOSIGNAL);
      if (n < 0 && (errno == EAGAIN || errno == EINTR)) continue;
      if (n < 0) {
        return UnavailableError(
            fmt::format("rendezvous {}: sending to it failed: {}", url_, std::strerror(errno)));
      }
      bytes.remove_prefix(static_cast<size_t>(n));
    }
    return Status::Ok();
  }
  // Reads until `want` has come, failing at the first byte that differs.
  Status Expect(std::string_view want) {
    std::string got;
    while (got.size() < want.size()) {
      SPOT_ASSIGN_OR_RETURN(bool ready, Wait(POLLIN));
      if (!ready) {
        return NoAnswer(got.empty()
                            ? "it accepted the connection and sent nothing back"
                            : fmt::format("it sent {} of {} bytes", got.size(), want.size()));
      }
      char buf[256];
      ssize_t n = ::recv(fd_, buf, sizeof(buf), 0);
      if (n < 0 && (errno == EAGAIN || errno == EINTR)) continue;
      if (n <= 0) {
        return UnavailableError(fmt::format(
            "rendezvous {} did not answer as a rendezvous: it closed the connection after {} "
            "byte(s)",
            url_, got.size()));
      }
      got.append(buf, static_cast<size_t>(n));
      if (!std::string_view(got).starts_with(want.substr(0, std::min(got.size(), want.size())))) {
        return FailedPreconditionError(fmt::format(
            "rendezvous {} did not answer as a rendezvous: it replied \"{}\" (is it an HTTP "
            "server or another service? expected `spot rendezvous` or a c10d TCPStore)",
            url_, Printable(std::string_view(got).substr(0, 48))));
      }
    }
    return Status::Ok();
  }

  const std::string url_;
  const double timeout_s_;
  const SteadyClock::time_point deadline_;
  const std::function<bool()> stop_;
  int fd_ = -1;
};

// LibTorch 1.13's TCPStore client waits in recv with no timeout in check,
// compareSet, add and deleteKey; only wait (which get calls first) sets
// SO_RCVTIMEO on its socket, and leaves it set. One wait for a key that
// exists therefore bounds every later call on this client by `timeout`.
void BoundEveryCall(c10d::TCPStore& store, std::chrono::milliseconds timeout) {
  store.wait({std::string(kProbeKey)}, timeout);
}

}  // namespace

Result<Endpoint> ParseRendezvousUrl(const std::string& url) {
  static const std::regex kScheme(R"(^(tcp|etcd)://(.*)$)");
  static const std::regex kMember(R"(^([A-Za-z0-9.\-]+|\[[0-9a-fA-F:]+\]):(\d{1,5})$)");
  const auto bad = [&] {
    return InvalidArgumentError(fmt::format(
        "rendezvous address '{}': expected tcp://HOST:PORT (a TCPStore) or "
        "etcd://HOST:PORT[,HOST:PORT...] (etcd's client URL, or its members'), with ports in "
        "1-65535",
        url));
  };
  std::smatch m;
  if (!std::regex_match(url, m, kScheme)) return bad();
  Endpoint e{.scheme = m[1]};
  const std::string rest = m[2];
  for (const auto part : std::views::split(rest, ',')) {
    const std::string member(part.begin(), part.end());
    std::smatch mm;
    int port = 0;
    if (std::regex_match(member, mm, kMember)) {
      const std::string digits = mm[2];  // 1-5 digits: fits an int
      std::from_chars(digits.data(), digits.data() + digits.size(), port);
    }
    if (port < 1 || port > 65535) return bad();
    if (e.members.empty()) {
      e.host = mm[1];
      e.port = port;
    }
    e.members.push_back(member);
  }
  if (e.members.empty() || (e.scheme == "tcp" && e.members.size() > 1)) return bad();
  return e;
}

Status ProbeRendezvous(const std::string& url, std::chrono::milliseconds timeout,
                       const std::function<bool()>& stop) {
  SPOT_ASSIGN_OR_RETURN(Endpoint e, ParseRendezvousUrl(url));
  if (e.scheme != "tcp") return Status::Ok();
  return StoreProbe(url, timeout, stop).Run(e);
}

Result<RendezvousBackend> OpenRendezvous(const std::string& url, const std::string& job,
                                         std::chrono::milliseconds liveness_ttl,
                                         std::chrono::milliseconds timeout) {
  SPOT_ASSIGN_OR_RETURN(Endpoint e, ParseRendezvousUrl(url));
  RendezvousBackend b{.url = url};
  if (e.scheme == "tcp") {
    // Before TCPStore, which would wait forever on a listener that is not one.
    SPOT_RETURN_IF_ERROR(StoreProbe(url, timeout, nullptr).Run(e));
    try {
      // c10d's connect counts whole seconds: under 1 s it gives up at once.
      c10d::TCPStoreOptions o{.port = static_cast<uint16_t>(e.port),
                              .isServer = false,
                              .waitWorkers = false,
                              .timeout = std::max(timeout, std::chrono::milliseconds(1000))};
      // Two connections: the rendezvous and its heartbeat thread on one, the
      // process groups (Gloo's own store traffic) on the other.
      auto group = c10::make_intrusive<c10d::TCPStore>(e.host, o);
      auto kv = c10::make_intrusive<c10d::TCPStore>(e.host, o);
      BoundEveryCall(*group, timeout);
      BoundEveryCall(*kv, timeout);
      b.group_store = std::move(group);
      b.kv = NewC10dKvStore(std::move(kv), kTcpKvPrefix, liveness_ttl);
    } catch (const std::exception& ex) {
      return UnavailableError(fmt::format("rendezvous {}: {}", url, ex.what()));
    }
    return b;
  }
  EtcdOptions eo;
  eo.endpoint.clear();
  for (const std::string& member : e.members) {
    eo.endpoint += (eo.endpoint.empty() ? "http://" : ",http://") + member;
  }
  eo.key_prefix = "/spot/" + job + "/";
  eo.liveness_ttl = std::max(std::chrono::seconds(1),
                             std::chrono::duration_cast<std::chrono::seconds>(liveness_ttl));
  eo.request_timeout = std::min(timeout, std::chrono::milliseconds(5000));
  SPOT_ASSIGN_OR_RETURN(std::unique_ptr<KvStore> kv, NewEtcdKvStore(eo));
  b.kv = std::move(kv);
  b.group_store = NewKvC10dStore(b.kv, "c10d/", timeout);
  return b;
}

}  // namespace spot::dist
