#include "dist/c10d_stores.h"

#include <gtest/gtest.h>

#include <thread>
#include <torch/csrc/distributed/c10d/HashStore.hpp>

#include "dist/kv_store_contract.h"

namespace spot::dist {
namespace {

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
                          "http://127.0.0.1:2379", "etcd:/x:1", "tcp://a b:1"}) {
    auto b = OpenRendezvous(url, "job", seconds(3), seconds(1));
    ASSERT_FALSE(b.ok()) << url;
    EXPECT_EQ(b.status().code(), StatusCode::kInvalidArgument) << url;
    EXPECT_NE(b.status().message().find("tcp://HOST:PORT"), std::string::npos);
  }
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
