// EtcdKvStore against a real etcd started by the test (skipped when etcd is
// not installed): what the shared contract in kv_store_test.cc cannot show.
#include "dist/etcd_kv_store.h"

#include <gtest/gtest.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "core/process.h"
#include "dist/etcd_test_server.h"

extern char** environ;

namespace spot::dist {
namespace {

using std::chrono::milliseconds;
using std::chrono::seconds;
using Clock = std::chrono::steady_clock;
using namespace std::chrono_literals;

constexpr char kChildTest[] = "EtcdKvStoreChild.HeartbeatUntilKilled";
constexpr char kChildEndpointEnv[] = "SPOT_ETCD_CHILD_ENDPOINT";
constexpr char kChildPrefixEnv[] = "SPOT_ETCD_CHILD_PREFIX";
constexpr seconds kChildTtl{2};

std::unique_ptr<KvStore> MakeStore(const std::string& endpoint, const std::string& prefix,
                                   seconds ttl = seconds(3),
                                   milliseconds timeout = milliseconds(2000)) {
  EtcdOptions options;
  options.endpoint = endpoint;
  options.key_prefix = prefix;
  options.liveness_ttl = ttl;
  options.request_timeout = timeout;
  Result<std::unique_ptr<KvStore>> store = NewEtcdKvStore(options);
  EXPECT_TRUE(store.ok()) << store.status().ToString();
  return store.ok() ? std::move(store).value() : nullptr;
}

bool AliveOr(KvStore& store, const std::string& id, bool on_error) {
  Result<bool> alive = store.IsAlive(id);
  return alive.ok() ? *alive : on_error;
}

// A loopback TCP socket on a free port that is bound, and listening only when
// asked to, but never accepts: connecting is refused, or hangs unanswered.
class DeadSocket {
 public:
  explicit DeadSocket(bool listening) : fd_(::socket(AF_INET, SOCK_STREAM, 0)) {
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof(addr);
    ::bind(fd_, reinterpret_cast<sockaddr*>(&addr), sizeof(addr));
    if (listening) ::listen(fd_, 16);
    ::getsockname(fd_, reinterpret_cast<sockaddr*>(&addr), &len);
    endpoint_ = "http://127.0.0.1:" + std::to_string(ntohs(addr.sin_port));
  }
  ~DeadSocket() { ::close(fd_); }
  const std::string& endpoint() const { return endpoint_; }

 private:
  int fd_;
  std::string endpoint_;
};

// Re-runs this test binary as a child that runs only kChildTest, with its
// stdout (gtest's report) dropped; it dies with the test's main thread.
int64_t SpawnHeartbeatChild(const std::string& endpoint, const std::string& prefix) {
  std::vector<char> self(4096);
  ssize_t n = ::readlink("/proc/self/exe", self.data(), self.size() - 1);
  if (n <= 0) return -1;
  SpawnOptions options{.argv = {std::string(self.data(), static_cast<size_t>(n)),
                                std::string("--gtest_filter=") + kChildTest},
                       .env = {{kChildEndpointEnv, endpoint}, {kChildPrefixEnv, prefix}},
                       .out = Output::Null(),
                       .err = Output::Inherit(),
                       .inherit_stdin = true,
                       .inherit_env = false,
                       .group = ProcessGroup::kInherit,
                       .parent_death_signal = SIGKILL};
  for (char** e = environ; *e != nullptr; ++e) {
    std::string_view var = *e;
    size_t eq = var.find('=');
    if (eq == std::string_view::npos || var.starts_with("GTEST_")) continue;  // no sharding
    options.env.emplace_back(var.substr(0, eq), var.substr(eq + 1));
  }
  Result<int64_t> pid = Spawn(options);
  return pid.ok() ? *pid : -1;
}

// Not a test on its own: the body of the child above. Heartbeats until killed
// (or for 20 s, in case nobody does).
TEST(EtcdKvStoreChild, HeartbeatUntilKilled) {
  const char* endpoint = std::getenv(kChildEndpointEnv);
  const char* prefix = std::getenv(kChildPrefixEnv);
  if (endpoint == nullptr || prefix == nullptr) GTEST_SKIP() << "runs only as a child process";
  std::unique_ptr<KvStore> store = MakeStore(endpoint, prefix, kChildTtl);
  ASSERT_NE(store, nullptr);
  auto end = Clock::now() + seconds(20);
  while (Clock::now() < end) {
    Status s = store->Heartbeat("w1");
    if (!s.ok()) std::fprintf(stderr, "heartbeat: %s\n", s.ToString().c_str());
    std::this_thread::sleep_for(milliseconds(100));
  }
}

class EtcdKvStoreTest : public ::testing::Test {
 protected:
  void SetUp() override {
    Result<EtcdTestServer*> server = EtcdTestServer::Shared();
    if (server.status().code() == StatusCode::kFailedPrecondition) {
      GTEST_SKIP() << server.status().ToString();
    }
    ASSERT_TRUE(server.ok()) << server.status().ToString();
    endpoint_ = (*server)->endpoint();
    prefix_ = std::string("/etcd-test/") +
              ::testing::UnitTest::GetInstance()->current_test_info()->name() + "/";
  }

  std::string endpoint_;
  std::string prefix_;  // unique to the test: the server is shared
};

TEST_F(EtcdKvStoreTest, RejectsBadOptions) {
  for (const char* endpoint :
       {"127.0.0.1:2379", "ftp://127.0.0.1:2379", "http://", "http://h:1/v3",
        "http://127.0.0.1:2379,127.0.0.1:2380", "http://127.0.0.1:2379,", ""}) {
    EtcdOptions o;
    o.endpoint = endpoint;
    EXPECT_EQ(NewEtcdKvStore(o).status().code(), StatusCode::kInvalidArgument) << endpoint;
  }
  EtcdOptions zero_ttl;
  zero_ttl.liveness_ttl = seconds(0);
  EXPECT_EQ(NewEtcdKvStore(zero_ttl).status().code(), StatusCode::kInvalidArgument);
  EtcdOptions zero_timeout;
  zero_timeout.request_timeout = milliseconds(0);
  EXPECT_EQ(NewEtcdKvStore(zero_timeout).status().code(), StatusCode::kInvalidArgument);
}

TEST_F(EtcdKvStoreTest, PrefixesIsolateStores) {
  std::unique_ptr<KvStore> a = MakeStore(endpoint_, prefix_ + "jobA/");
  std::unique_ptr<KvStore> b = MakeStore(endpoint_, prefix_ + "jobB/");
  std::unique_ptr<KvStore> root = MakeStore(endpoint_ + "/", "");  // a trailing '/' is fine
  ASSERT_TRUE(a->Put("k", "from a").ok());
  EXPECT_EQ(*b->Get("k"), std::nullopt);
  ASSERT_TRUE(b->Put("k", "from b").ok());
  EXPECT_EQ(*a->Get("k"), "from a");
  EXPECT_EQ(*root->Get(prefix_ + "jobA/k"), "from a");  // stored under the prefix
  ASSERT_TRUE(a->Heartbeat("w").ok());
  EXPECT_TRUE(*a->IsAlive("w"));
  EXPECT_FALSE(*b->IsAlive("w"));
  EXPECT_TRUE(root->Get(prefix_ + "jobA/alive/w")->has_value());
  ASSERT_TRUE(b->Delete("k").ok());
  EXPECT_EQ(*a->Get("k"), "from a");
}

TEST_F(EtcdKvStoreTest, HeartbeatRecoversFromDeletedKeyAndRevokedLease) {
  std::unique_ptr<KvStore> worker = MakeStore(endpoint_, prefix_);
  std::unique_ptr<KvStore> launcher = MakeStore(endpoint_, prefix_);
  ASSERT_TRUE(worker->Heartbeat("w").ok());
  ASSERT_TRUE(launcher->MarkDead("w").ok());  // not its lease: deletes the key only
  EXPECT_FALSE(*worker->IsAlive("w"));
  ASSERT_TRUE(worker->Heartbeat("w").ok());  // lease still alive: re-attaches the key
  EXPECT_TRUE(*launcher->IsAlive("w"));
  ASSERT_TRUE(worker->MarkDead("w").ok());  // its own lease: revoked
  EXPECT_FALSE(*launcher->IsAlive("w"));
  ASSERT_TRUE(worker->Heartbeat("w").ok());  // grants a new lease
  EXPECT_TRUE(*launcher->IsAlive("w"));
}

// A worker process heartbeats and is SIGKILLed: its lease, not anyone's
// MarkDead, must end its liveness, after about one TTL.
TEST_F(EtcdKvStoreTest, KilledProcessGoesDeadAfterTtl) {
  std::unique_ptr<KvStore> observer = MakeStore(endpoint_, prefix_, kChildTtl);
  int64_t child = SpawnHeartbeatChild(endpoint_, prefix_);
  ASSERT_GT(child, 0);
  auto deadline = Clock::now() + seconds(10);
  bool alive = false;
  while (!alive && Clock::now() < deadline) {
    alive = AliveOr(*observer, "w1", false);
    if (!alive) std::this_thread::sleep_for(milliseconds(20));
  }
  SignalProcess(child, SIGKILL);
  auto killed = Clock::now();
  Result<ProcessStatus> ended = WaitProcess(child, 10);
  ASSERT_TRUE(ended.ok()) << ended.status().ToString();
  ASSERT_TRUE(alive) << "the child never heartbeat";
  EXPECT_EQ(ended->signal, SIGKILL) << "child " << DescribeExit(*ended);

  // The child renewed its lease every 0.1 s; etcd checks expiry twice a second.
  while (AliveOr(*observer, "w1", true) && Clock::now() < killed + kChildTtl + 1500ms) {
    std::this_thread::sleep_for(milliseconds(20));
  }
  auto dead_after = Clock::now() - killed;
  EXPECT_FALSE(*observer->IsAlive("w1")) << "still alive TTL + 1.5 s after the kill";
  EXPECT_GE(dead_after, kChildTtl - milliseconds(500));
}

TEST_F(EtcdKvStoreTest, UnreachableEndpointIsUnavailableQuickly) {
  DeadSocket refusing(/*listening=*/false);
  std::unique_ptr<KvStore> store = MakeStore(refusing.endpoint(), prefix_);
  auto start = Clock::now();
  std::vector<Status> results = {store->Get("k").status(),
                                 store->Put("k", "v"),
                                 store->CompareAndSwap("k", std::nullopt, "v").status(),
                                 store->Delete("k"),
                                 store->Heartbeat("w"),
                                 store->IsAlive("w").status(),
                                 store->MarkDead("w")};
  EXPECT_LT(Clock::now() - start, milliseconds(2000));
  for (const Status& s : results) {
    EXPECT_EQ(s.code(), StatusCode::kUnavailable) << s.ToString();
    EXPECT_NE(s.message().find(refusing.endpoint()), std::string::npos) << s.ToString();
  }
}

TEST_F(EtcdKvStoreTest, SilentServerTimesOutAtRequestTimeout) {
  DeadSocket silent(/*listening=*/true);
  std::unique_ptr<KvStore> store = MakeStore(silent.endpoint(), prefix_, seconds(3), 300ms);
  auto start = Clock::now();
  Result<std::optional<std::string>> got = store->Get("k");
  auto took = Clock::now() - start;
  EXPECT_EQ(got.status().code(), StatusCode::kUnavailable) << got.status().ToString();
  EXPECT_NE(got.status().message().find(silent.endpoint()), std::string::npos);
  EXPECT_GE(took, milliseconds(250));
  EXPECT_LT(took, milliseconds(2000));
}

// Several members: one that refuses connections is passed over for the next,
// for every request; one that connects and then says nothing is passed over
// for requests that may be sent twice, while a compare-and-swap that may have
// reached it is not repeated (Unavailable) and the next request starts at
// the next member.
TEST_F(EtcdKvStoreTest, AMemberThatDoesNotAnswerIsPassedOver) {
  DeadSocket refusing(/*listening=*/false);
  std::unique_ptr<KvStore> store = MakeStore(refusing.endpoint() + "," + endpoint_, prefix_);
  ASSERT_TRUE(store->Put("k", "v").ok());
  EXPECT_EQ(store->Get("k").value(), std::optional<std::string>("v"));
  EXPECT_TRUE(store->CompareAndSwap("k", "v", "w").value());
  ASSERT_TRUE(store->Heartbeat("w1").ok());
  EXPECT_TRUE(store->IsAlive("w1").value());
  std::unique_ptr<KvStore> fresh = MakeStore(refusing.endpoint() + "," + endpoint_, prefix_);
  EXPECT_TRUE(fresh->CompareAndSwap("k", "w", "x").value()) << "a refused connection sent nothing";

  DeadSocket silent(/*listening=*/true);
  std::unique_ptr<KvStore> quiet =
      MakeStore(silent.endpoint() + "," + endpoint_, prefix_, seconds(3), 300ms);
  EXPECT_EQ(quiet->Get("k").value(), std::optional<std::string>("x"));
  std::unique_ptr<KvStore> cas =
      MakeStore(silent.endpoint() + "," + endpoint_, prefix_, seconds(3), 300ms);
  Result<bool> swapped = cas->CompareAndSwap("k", "x", "y");
  EXPECT_EQ(swapped.status().code(), StatusCode::kUnavailable) << swapped.status().ToString();
  EXPECT_NE(swapped.status().message().find(silent.endpoint()), std::string::npos);
  EXPECT_TRUE(cas->CompareAndSwap("k", "x", "y").value()) << "the next request, the next member";

  DeadSocket also_refusing(/*listening=*/false);
  std::unique_ptr<KvStore> none =
      MakeStore(refusing.endpoint() + "," + also_refusing.endpoint(), prefix_);
  Status s = none->Put("k", "v");
  EXPECT_EQ(s.code(), StatusCode::kUnavailable);
  EXPECT_NE(s.message().find(refusing.endpoint()), std::string::npos) << s.ToString();
  EXPECT_NE(s.message().find(also_refusing.endpoint()), std::string::npos) << s.ToString();
}

// A store given every member of a three-member cluster goes on when the
// member it was talking to is SIGKILLed: its keys and its ids' leases live in
// the cluster, not in the member.
TEST(EtcdKvStoreCluster, AStoreOverEveryMemberOutlivesAKilledOne) {
  auto cluster = EtcdTestServer::StartCluster(3);
  if (cluster.status().code() == StatusCode::kFailedPrecondition) {
    GTEST_SKIP() << cluster.status().ToString();
  }
  ASSERT_TRUE(cluster.ok()) << cluster.status().ToString();
  std::string endpoints;
  for (const auto& member : *cluster) {
    endpoints += (endpoints.empty() ? "" : ",") + member->endpoint();
  }
  std::unique_ptr<KvStore> store = MakeStore(endpoints, "/cluster/", seconds(2), 1000ms);
  ASSERT_TRUE(store->Put("k", "v").ok());
  ASSERT_TRUE(store->Heartbeat("w1").ok());
  (*cluster)[0]->Kill();
  // The others may hold an election first (when the killed one led).
  auto deadline = Clock::now() + 10s;
  Result<std::optional<std::string>> got = store->Get("k");
  while (!got.ok() && Clock::now() < deadline) {
    std::this_thread::sleep_for(50ms);
    got = store->Get("k");
  }
  ASSERT_TRUE(got.ok()) << got.status().ToString();
  EXPECT_EQ(*got, std::optional<std::string>("v"));
  for (int i = 0; i < 30; ++i) {  // 3 s: past the 2 s TTL, kept by heartbeats
    Status beat = store->Heartbeat("w1");
    ASSERT_TRUE(beat.ok() || beat.code() == StatusCode::kUnavailable) << beat.ToString();
    std::this_thread::sleep_for(100ms);
  }
  EXPECT_TRUE(store->IsAlive("w1").value());
  EXPECT_TRUE(store->CompareAndSwap("k", "v", "w").value());
  std::unique_ptr<KvStore> killed = MakeStore((*cluster)[0]->endpoint(), "/cluster/");
  EXPECT_EQ(killed->Get("k").status().code(), StatusCode::kUnavailable) << "the member is gone";
}

// etcd refuses requests over --max-request-bytes (1.5 MiB by default) itself;
// gRPC refuses messages over that + 0.5 MiB before etcd sees them.
TEST_F(EtcdKvStoreTest, TooLargeRequestsKeepEtcdsMessage) {
  std::unique_ptr<KvStore> store = MakeStore(endpoint_, prefix_);
  struct Case {
    size_t bytes;
    const char* message;
  };
  for (Case c : {Case{1800000, "request is too large"}, Case{3000000, "larger than max"}}) {
    Status s = store->Put("big", std::string(c.bytes, 'x'));
    EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << s.ToString();
    EXPECT_NE(s.message().find(c.message), std::string::npos) << s.ToString();
    EXPECT_NE(s.message().find(endpoint_), std::string::npos) << s.ToString();
  }
  EXPECT_TRUE(store->Put("small", "ok").ok());  // the store is still usable
  EXPECT_EQ(*store->Get("small"), "ok");
}

}  // namespace
}  // namespace spot::dist
