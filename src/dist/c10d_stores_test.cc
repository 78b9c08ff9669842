#include "dist/c10d_stores.h"

#include <gtest/gtest.h>

#include <atomic>
#include <future>
#include <optional>
#include <thread>
#include <torch/csrc/distributed/c10d/HashStore.hpp>

#include "dist/fake_listener_testing.h"
#include "dist/kv_store_contract.h"

namespace spot::dist {
namespace {

using spot::testing::FakeListener;
using spot::testing::Listener;
using std::chrono::milliseconds;
using std::chrono::seconds;
using testing::Backend;
using testing::KvStoreContractTest;

// A TCPStore server per test, and a client of it, like a launcher and a worker.
Result<std::unique_ptr<KvStore>> MakeTcpStore(const std::string& prefix, seconds ttl) {
  static c10::intrusive_ptr<c10d::TCPStore> server;  // lives for the test binary
  if (!server) {
    SPOT_ASSIGN_OR_RETURN(server, HostTcpStore("127.0.0.1", 0, seconds(10)));
  }
  c10d::TCPStoreOptions o{
      .port = server->getPort(), .isServer = false, .waitWorkers = false, .timeout = seconds(10)};
  auto client = c10::make_intrusive<c10d::TCPStore>("127.0.0.1", o);
  return NewC10dKvStore(client, prefix + "/", ttl);
}

INSTANTIATE_TEST_SUITE_P(C10d, KvStoreContractTest,
                         ::testing::Values(Backend{"TcpStore", MakeTcpStore}),
                         [](const ::testing::TestParamInfo<Backend>& p) { return p.param.name; });

// A key deleted by one client while another reads it (a member's liveness
// key when it leaves, while the others check who is alive): the read gives
// the value or nothing, never an error, and its connection stays usable.
// (TCPStore's server throws on a get of a missing key and closes that
// client's socket: a check then a get would race the delete.)
TEST(C10dKvStoreTest, AGetRacingTheDeleteOfItsKeyNeverFailsNorBreaksTheConnection) {
  Result<std::unique_ptr<KvStore>> writer = MakeTcpStore("race", seconds(1));
  Result<std::unique_ptr<KvStore>> reader = MakeTcpStore("race", seconds(1));
  ASSERT_TRUE(writer.ok() && reader.ok());
  std::atomic<bool> done{false};
  std::thread churn([&] {
    for (int i = 0; i < 3000; ++i) {
      (void)(*writer)->Put("alive/peer", "1");
      (void)(*writer)->Delete("alive/peer");
    }
    done = true;
  });
  int reads = 0, errors = 0;
  std::string first_error;
  while (!done) {
    Result<std::optional<std::string>> v = (*reader)->Get("alive/peer");
    ++reads;
    if (!v.ok()) {
      if (errors++ == 0) first_error = v.status().ToString();
      continue;
    }
    if (v->has_value()) {
      EXPECT_EQ(**v, "1");
    }
  }
  churn.join();
  EXPECT_EQ(errors, 0) << "of " << reads << " reads; the first: " << first_error;
  ASSERT_TRUE((*reader)->Put("after", "ok").ok());
  Result<std::optional<std::string>> after = (*reader)->Get("after");
  ASSERT_TRUE(after.ok()) << after.status().ToString();
  EXPECT_EQ(*after, std::optional<std::string>("ok"));
}

TEST(KvC10dStoreTest, ServesC10dCallsOverAKvStore) {
  std::shared_ptr<KvStore> kv = NewMemoryKvStore();
  auto store = NewKvC10dStore(kv, "g/", milliseconds(300));
  store->set("a", {1, 2, 0, 3});
  EXPECT_EQ(store->get("a"), (std::vector<uint8_t>{1, 2, 0, 3}));
  EXPECT_EQ(*kv->Get("g/a"), std::string("\x01\x02\x00\x03", 4));
  EXPECT_EQ(store->add("n", 5), 5);
  EXPECT_EQ(store->add("n", -2), 3);
  EXPECT_TRUE(store->check({"a", "n"}));
  EXPECT_FALSE(store->check({"a", "missing"}));
  // compareSet: absent + empty expected sets; a mismatch returns the current value.
  EXPECT_EQ(store->compareSet("c", {}, {7}), (std::vector<uint8_t>{7}));
  EXPECT_EQ(store->compareSet("c", {9}, {8}), (std::vector<uint8_t>{7}));
  EXPECT_EQ(store->compareSet("c", {7}, {8}), (std::vector<uint8_t>{8}));
  EXPECT_TRUE(store->deleteKey("c"));
  EXPECT_FALSE(store->check({"c"}));
}

TEST(KvC10dStoreTest, BlockingReadsWaitForTheKeyAndTimeOut) {
  std::shared_ptr<KvStore> kv = NewMemoryKvStore();
  auto store = NewKvC10dStore(kv, "", milliseconds(300));
  std::thread later([&] {
    std::this_thread::sleep_for(milliseconds(50));
    ASSERT_TRUE(kv->Put("late", "x").ok());
  });
  EXPECT_EQ(store->get("late"), (std::vector<uint8_t>{'x'}));
  later.join();
  auto t0 = std::chrono::steady_clock::now();
  EXPECT_THROW(store->get("never"), c10::Error);
  EXPECT_GE(std::chrono::steady_clock::now() - t0, milliseconds(250));
  EXPECT_THROW(store->wait({"never"}, milliseconds(50)), c10::Error);
}

TEST(OpenRendezvousTest, MalformedAddressesNameTheAcceptedForms) {
  for (const char* url : {"", "tcp://", "tcp://host", "tcp://host:0", "tcp://host:70000",
                          "http://127.0.0.1:2379", "etcd:/x:1", "tcp://a b:1", "tcp://a:1,b:2",
                          "etcd://", "etcd://a:1,", "etcd://a:1,,b:2", "etcd://a:1,b"}) {
    auto b = OpenRendezvous(url, "job", seconds(3), seconds(1));
    ASSERT_FALSE(b.ok()) << url;
    EXPECT_EQ(b.status().code(), StatusCode::kInvalidArgument) << url;
    EXPECT_NE(b.status().message().find("tcp://HOST:PORT"), std::string::npos);
  }
}

// etcd takes its cluster's members, comma-separated (the first is host:port).
TEST(OpenRendezvousTest, AnEtcdAddressMayNameEveryMember) {
  auto e = ParseRendezvousUrl("etcd://10.0.0.1:2379,[::1]:2380,etcd-c:2379");
  ASSERT_TRUE(e.ok()) << e.status().ToString();
  EXPECT_EQ(e->scheme, "etcd");
  EXPECT_EQ(e->host, "10.0.0.1");
  EXPECT_EQ(e->port, 2379);
  EXPECT_EQ(e->members, (std::vector<std::string>{"10.0.0.1:2379", "[::1]:2380", "etcd-c:2379"}));
  auto one = ParseRendezvousUrl("tcp://[::1]:29500");
  ASSERT_TRUE(one.ok());
  EXPECT_EQ(one->host, "[::1]");
  EXPECT_EQ(one->members, std::vector<std::string>{"[::1]:29500"});
}

TEST(OpenRendezvousTest, UnreachableTcpStoreIsUnavailableNamingIt) {
  auto b = OpenRendezvous("tcp://127.0.0.1:1", "job", seconds(3), milliseconds(300));
  ASSERT_FALSE(b.ok());
  EXPECT_EQ(b.status().code(), StatusCode::kUnavailable);
  EXPECT_NE(b.status().message().find("tcp://127.0.0.1:1"), std::string::npos);
}

TEST(OpenRendezvousTest, TcpBackendSharesOneStoreForRendezvousAndGroups) {
  auto server = HostTcpStore("127.0.0.1", 0, seconds(5));
  ASSERT_TRUE(server.ok()) << server.status().message();
  std::string url = "tcp://127.0.0.1:" + std::to_string((*server)->getPort());
  auto a = OpenRendezvous(url, "job", seconds(3), seconds(5));
  auto b = OpenRendezvous(url, "job", seconds(3), seconds(5));
  ASSERT_TRUE(a.ok() && b.ok());
  ASSERT_TRUE(a->kv->Put("k", "v").ok());
  EXPECT_EQ(*b->kv->Get("k"), "v");
  a->group_store->set("g", {1});
  EXPECT_EQ(b->group_store->get("g"), (std::vector<uint8_t>{1}));
}

// ---- Listeners that are not a rendezvous store (issue 20) ----

// The probe speaks the store's protocol: a real TCPStore (LibTorch's own
// server) passes it, an etcd address is not probed.
TEST(ProbeRendezvousTest, ARealStorePasses) {
  auto server = HostTcpStore("127.0.0.1", 0, seconds(5));
  ASSERT_TRUE(server.ok()) << server.status().message();
  const std::string url = "tcp://127.0.0.1:" + std::to_string((*server)->getPort());
  for (int i = 0; i < 3; ++i) {  // again and again: the probe key stays valid
    Status st = ProbeRendezvous(url, seconds(5));
    EXPECT_TRUE(st.ok()) << st.ToString();
  }
  EXPECT_TRUE(ProbeRendezvous("etcd://127.0.0.1:1", milliseconds(1)).ok());
  EXPECT_EQ(ProbeRendezvous("redis://x:1", seconds(1)).code(), StatusCode::kInvalidArgument);
}

TEST(ProbeRendezvousTest, ASilentListenerIsUnavailableAtTheTimeout) {
  FakeListener silent(Listener::kSilent);
  for (auto open : {+[](const std::string& url) { return ProbeRendezvous(url, milliseconds(300)); },
                    +[](const std::string& url) {
                      return OpenRendezvous(url, "job", seconds(3), milliseconds(300)).status();
                    }}) {
    Status st = open(silent.url());
    EXPECT_EQ(st.code(), StatusCode::kUnavailable) << st.ToString();
    EXPECT_NE(st.message().find("rendezvous " + silent.url() +
                                " did not answer as a rendezvous within 0.3 s"),
              std::string::npos)
        << st.message();
  }
}

// Something else answers: an error at once, quoting what it said.
TEST(ProbeRendezvousTest, AnHttpServerOrGarbageIsNotARendezvous) {
  FakeListener http(Listener::kHttp);
  Status st = ProbeRendezvous(http.url(), seconds(30));
  EXPECT_EQ(st.code(), StatusCode::kFailedPrecondition) << st.ToString();
  EXPECT_NE(st.message().find("did not answer as a rendezvous: it replied \"HTTP/1.1 400"),
            std::string::npos)
      << st.message();
  FakeListener garbage(Listener::kGarbage);
  st = OpenRendezvous(garbage.url(), "job", seconds(3), seconds(30)).status();
  EXPECT_EQ(st.code(), StatusCode::kFailedPrecondition) << st.ToString();
  EXPECT_NE(st.message().find(garbage.url() + " did not answer as a rendezvous"), std::string::npos)
      << st.message();
}

TEST(ProbeRendezvousTest, StopEndsTheWaitAtOnce) {
  FakeListener silent(Listener::kSilent);
  std::atomic<bool> stop{false};
  auto probe = std::async(std::launch::async, [&] {
    return ProbeRendezvous(silent.url(), seconds(60), [&] { return stop.load(); });
  });
  while (silent.accepted() == 0) std::this_thread::sleep_for(milliseconds(5));
  stop = true;
  ASSERT_EQ(probe.wait_for(seconds(10)), std::future_status::ready);
  Status st = probe.get();
  EXPECT_EQ(st.code(), StatusCode::kAborted) << st.ToString();
  EXPECT_NE(st.message().find(silent.url()), std::string::npos) << st.message();
}

// LibTorch 1.13's TCPStore::check waits for its reply with no timeout. After
// OpenRendezvous every call gives up at the timeout instead (the listener's
// destructor ends a call that hangs, so this test fails rather than hangs).
TEST(OpenRendezvousTest, AStoreThatStopsAnsweringTimesOutInsteadOfHanging) {
  std::optional<FakeListener> store(std::in_place, Listener::kStoreThenSilent);
  auto b = OpenRendezvous(store->url(), "job", seconds(3), milliseconds(500));
  ASSERT_TRUE(b.ok()) << b.status().ToString();
  auto get = std::async(std::launch::async, [&] { return b->kv->Get("state"); });
  if (get.wait_for(seconds(20)) != std::future_status::ready) {
    store.reset();  // closes the connection, which ends the call
    FAIL() << "Get still waiting after 20 s";
  }
  auto got = get.get();
  EXPECT_EQ(got.status().code(), StatusCode::kUnavailable) << got.status().ToString();
  EXPECT_GE(store->swallowed(), 1);
  auto check = std::async(std::launch::async, [&] { return b->group_store->check({"k"}); });
  if (check.wait_for(seconds(20)) != std::future_status::ready) {
    store.reset();
    FAIL() << "check still waiting after 20 s";
  }
  EXPECT_THROW(check.get(), std::exception);
}

// A heartbeat key holding something other than a time (another program's
// value, a torn write) is no sign of life, not a crash.
TEST(C10dKvStoreTest, AGarbledHeartbeatIsNotAlive) {
  auto store = MakeTcpStore("garbled", seconds(3));
  ASSERT_TRUE(store.ok()) << store.status().message();
  ASSERT_TRUE((*store)->Heartbeat("w1").ok());
  EXPECT_TRUE(*(*store)->IsAlive("w1"));
  for (const char* junk : {"", "soon", "12abc", "99999999999999999999999"}) {
    ASSERT_TRUE((*store)->Put("alive/w1", junk).ok());
    auto alive = (*store)->IsAlive("w1");
    ASSERT_TRUE(alive.ok()) << junk;
    EXPECT_FALSE(*alive) << "'" << junk << "'";
  }
}

}  // namespace
}  // namespace spot::dist
