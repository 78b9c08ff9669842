// Bridges between our KvStore and LibTorch's c10d::Store, and the one place a
// rendezvous address ("tcp://HOST:PORT", "etcd://HOST:PORT") is opened.
//
//   tcp://   a c10d::TCPStore (hosted by `spot train --nproc`, a
//            `spot rendezvous` process or the controller): the rendezvous
//            uses it through C10dKvStore, Gloo uses it directly.
//   etcd://  etcd v3 through its JSON gateway: the rendezvous uses
//            EtcdKvStore, Gloo uses KvC10dStore over it.
#pragma once

#include <chrono>
#include <functional>
#include <memory>
#include <string>
#include <torch/csrc/distributed/c10d/Store.hpp>
#include <torch/csrc/distributed/c10d/TCPStore.hpp>
#include <vector>

#include "core/status.h"
#include "dist/kv_store.h"

namespace spot::dist {

// Prefix of the rendezvous keys in a tcp:// store (a launcher that declares a
// worker dead uses the same).
inline constexpr char kTcpKvPrefix[] = "spot/";

// KvStore over a c10d store. Liveness keys "<prefix>alive/<id>" hold the wall
// clock (ms) of the last heartbeat; the workers' clocks must agree to well
// within the TTL (one machine, or NTP).
std::unique_ptr<KvStore> NewC10dKvStore(c10::intrusive_ptr<c10d::Store> store, std::string prefix,
                                        std::chrono::milliseconds liveness_ttl);

// A c10d store over a KvStore (values are stored as their bytes; counters as
// decimal text). Blocking reads poll with backoff up to the store's timeout
// and then throw, as c10d stores do. getNumKeys is not supported (throws).
c10::intrusive_ptr<c10d::Store> NewKvC10dStore(std::shared_ptr<KvStore> kv, std::string prefix,
                                               std::chrono::milliseconds timeout);

// Hosts a TCPStore server on host:port (port 0: any free port; read it back
// with getPort()). Unavailable when the address cannot be bound.
Result<c10::intrusive_ptr<c10d::TCPStore>> HostTcpStore(const std::string& host, int port,
                                                        std::chrono::milliseconds timeout);

struct RendezvousBackend {
  std::string url;
  std::shared_ptr<KvStore> kv;                  // for the Rendezvous protocol
  c10::intrusive_ptr<c10d::Store> group_store;  // for the process groups (prefix per generation)
};

// Checks that "tcp://HOST:PORT" is a rendezvous store (a c10d TCPStore)
// before anything blocks on it: connects (retrying while refused), writes a
// probe key and reads it back, all within `timeout`, calling `stop` (when
// set) every 50 ms meanwhile. OK at once for etcd:// (the etcd client has its
// own timeouts). Errors name the address: InvalidArgument for a malformed
// one; Unavailable when nothing accepts the connection, or nothing answers,
// within `timeout` ("... did not answer as a rendezvous within N s");
// FailedPrecondition when something else answers (an HTTP server, garbage);
// Aborted as soon as `stop` returns true.
Status ProbeRendezvous(const std::string& url, std::chrono::milliseconds timeout,
                       const std::function<bool()>& stop = nullptr);

// A rendezvous address, "tcp://HOST:PORT" (a TCPStore) or "etcd://HOST:PORT"
// (an etcd cluster's members, comma-separated: "etcd://a:2379,b:2379,c:2379").
struct Endpoint {
  std::string scheme;  // "tcp" or "etcd"
  std::string host;    // the first member's; brackets kept for IPv6: "[::1]"
  int port = 0;
  std::vector<std::string> members;  // "HOST:PORT" of each, the first included
};
// InvalidArgument naming the address and the accepted forms.
Result<Endpoint> ParseRendezvousUrl(const std::string& url);

// Connects to "tcp://HOST:PORT" or "etcd://HOST:PORT[,HOST:PORT...]" (every
// member given is tried in turn: EtcdOptions::endpoint). InvalidArgument for a
// malformed address (naming it and the accepted forms); for tcp://, the
// errors of ProbeRendezvous. Every later call on a tcp:// store gives up
// (throws; Unavailable through the KvStore) after waiting `timeout` (at
// least 1 s) for the store to answer.
Result<RendezvousBackend> OpenRendezvous(const std::string& url, const std::string& job,
                                         std::chrono::milliseconds liveness_ttl,
                                         std::chrono::milliseconds timeout);

}  // namespace spot::dist
