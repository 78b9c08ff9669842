#include "dist/c10d_stores.h"

#include <c10/util/Exception.h>
#include <fmt/format.h>

#include <charconv>
#include <mutex>
#include <random>
#include <regex>
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
  Result<std::optional<std::string>> GetRaw(const std::string& key) {
    return Guard("get", [&]() -> std::optional<std::string> {
      std::lock_guard<std::mutex> l(mu_);
      const std::string k = prefix_ + key;
      if (!store_->check({k})) return std::nullopt;
      std::string raw = Text(store_->get(k));
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

Result<RendezvousBackend> OpenRendezvous(const std::string& url, const std::string& job,
                                         std::chrono::milliseconds liveness_ttl,
                                         std::chrono::milliseconds timeout) {
  static const std::regex kForm(R"(^(tcp|etcd)://([A-Za-z0-9.\-]+|\[[0-9a-fA-F:]+\]):(\d{1,5})$)");
  std::smatch m;
  if (!std::regex_match(url, m, kForm) || std::stoi(m[3]) == 0 || std::stoi(m[3]) > 65535) {
    return InvalidArgumentError(fmt::format(
        "rendezvous address '{}': expected tcp://HOST:PORT (a TCPStore) or etcd://HOST:PORT "
        "(etcd's client URL), with a port in 1-65535",
        url));
  }
  RendezvousBackend b{.url = url};
  const std::string host = m[2];
  const int port = std::stoi(m[3]);
  if (m[1] == "tcp") {
    try {
      c10d::TCPStoreOptions o{.port = static_cast<uint16_t>(port),
                              .isServer = false,
                              .waitWorkers = false,
                              .timeout = timeout};
      // Two connections: the rendezvous and its heartbeat thread on one, the
      // process groups (Gloo's own store traffic) on the other.
      b.group_store = c10::make_intrusive<c10d::TCPStore>(host, o);
      b.kv =
          NewC10dKvStore(c10::make_intrusive<c10d::TCPStore>(host, o), kTcpKvPrefix, liveness_ttl);
    } catch (const std::exception& e) {
      return UnavailableError(fmt::format("rendezvous {}: {}", url, e.what()));
    }
    return b;
  }
  EtcdOptions eo;
  eo.endpoint = fmt::format("http://{}:{}", host, port);
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
