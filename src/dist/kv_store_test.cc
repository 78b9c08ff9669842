// The KvStore contract, written once and run against every backend that can
// run in a unit test: MemoryKvStore and EtcdKvStore over a real etcd (skipped
// when etcd is not installed).
#include "dist/kv_store.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <functional>
#include <ostream>
#include <string>
#include <thread>
#include <vector>

#include "dist/etcd_kv_store.h"
#include "dist/etcd_test_server.h"
#include "dist/kv_store_contract.h"

namespace spot::dist {
namespace {

using std::chrono::seconds;
using testing::Backend;
using testing::KvStoreContractTest;

Result<std::unique_ptr<KvStore>> MakeMemory(const std::string&, seconds ttl) {
  return NewMemoryKvStore(ttl);
}

Result<std::unique_ptr<KvStore>> MakeEtcd(const std::string& prefix, seconds ttl) {
  SPOT_ASSIGN_OR_RETURN(EtcdTestServer * server, EtcdTestServer::Shared());
  EtcdOptions options;
  options.endpoint = server->endpoint();
  options.key_prefix = "/spot-contract/" + prefix + "/";
  options.liveness_ttl = ttl;
  return NewEtcdKvStore(options);
}

INSTANTIATE_TEST_SUITE_P(Backends, KvStoreContractTest,
                         ::testing::Values(Backend{"Memory", MakeMemory},
                                           Backend{"Etcd", MakeEtcd}),
                         [](const ::testing::TestParamInfo<Backend>& p) { return p.param.name; });

}  // namespace
}  // namespace spot::dist
