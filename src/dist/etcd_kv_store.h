// EtcdKvStore: the KvStore contract over etcd's v3 API, spoken as JSON through
// etcd's HTTP gateway (POST /v3/kv/*, /v3/lease/*), so many machines can share
// one rendezvous without a gRPC client.
//
// Layout in etcd: every key K is stored as `<key_prefix>K`; participant `id`'s
// liveness is the key `<key_prefix>alive/<id>`, attached to an etcd lease of
// liveness_ttl seconds (so keys under "alive/" are reserved).
//
// Liveness: the first Heartbeat(id) from a store grants a lease and puts the
// alive key under it; later calls renew the lease (keepalive) and re-attach
// the key if someone deleted it; if the lease had already expired or been
// revoked, a new one is granted. When the process dies, heartbeats stop, etcd
// expires the lease and deletes the key, so IsAlive(id) turns false after
// liveness_ttl (plus up to ~0.5 s: etcd checks expiries twice a second).
// MarkDead(id) deletes the key now, and revokes the lease when this store
// granted it; a later Heartbeat(id) makes the id alive again (as in
// MemoryKvStore). Destroying the store revokes nothing: its ids die after the
// TTL.
//
// Errors: a connection failure or a request past request_timeout is
// Unavailable (retry) and names the endpoint (each member tried, when
// several are given); an error answered by etcd
// ({"error","message","code"}) keeps etcd's message, with its gRPC code mapped
// to the nearest StatusCode (e.g. "request is too large" -> InvalidArgument).
//
// Thread safety: every method may be called from any thread; requests from
// different threads run concurrently over a small pool of kept-alive HTTP
// connections.
#pragma once

#include <chrono>
#include <memory>
#include <string>

#include "core/status.h"
#include "dist/kv_store.h"

namespace spot::dist {

struct EtcdOptions {
  // Client URL of one etcd member's gateway, "http://host:port" (https://
  // also works). No path; one trailing '/' is ignored. Default: a local etcd.
  // Several members of one cluster, comma-separated, as etcdctl's
  // --endpoints ("http://a:2379,http://b:2379,http://c:2379"): a request goes
  // to the member that answered last; when that one cannot be reached, to
  // the next (a request that may have reached it and changes something on a
  // second try, a compare-and-swap or a lease grant, is not sent again: it
  // is Unavailable, and the next request starts at the next member).
  std::string endpoint = "http://127.0.0.1:2379";

  // Namespace for every key this store reads or writes, e.g. "/spot/<job>/".
  // Stores with different prefixes never see each other's keys. May be empty
  // (keys are then used as given); a trailing '/' is the caller's choice.
  std::string key_prefix = "/spot/default/";

  // How long an id stays alive after its last Heartbeat. Whole seconds,
  // because etcd leases are in seconds; must be >= 1. etcd raises a TTL below
  // its own minimum (1.5 election timeouts, rounded up to whole seconds: 2 s
  // with etcd's default --election-timeout 1000) to that minimum, so ids may
  // then stay alive slightly longer than liveness_ttl() says. Default 3 s.
  std::chrono::seconds liveness_ttl{3};

  // Deadline for each HTTP call to etcd (connect, send and receive are each
  // bounded by it). Must be > 0. Default 2 s.
  std::chrono::milliseconds request_timeout{2000};
};

// Makes a store over `options.endpoint`. Validates options (InvalidArgument
// when the endpoint is not an http(s) URL, the TTL is < 1 s or the timeout is
// not positive) but does not contact etcd: an unreachable etcd shows up as
// Unavailable from the first call.
Result<std::unique_ptr<KvStore>> NewEtcdKvStore(const EtcdOptions& options);

}  // namespace spot::dist
