// KvStore: the small key-value contract the rendezvous needs, with three
// backends: MemoryKvStore (threads as ranks in tests), C10dKvStore over a
// LibTorch c10d store (TCPStore hosted by `spot train --nproc` or the
// controller) and EtcdKvStore (etcd v3 through its JSON gateway, for many
// machines).
//
// Liveness: a client marks itself alive with Heartbeat(id) and must call it
// again within the store's liveness TTL; IsAlive(id) turns false once the TTL
// has passed without one (etcd: the key's lease expires; other backends: the
// stored timestamp goes stale) or after MarkDead(id).
//
// Thread safety: every method may be called from any thread.
#pragma once

#include <chrono>
#include <memory>
#include <optional>
#include <string>

#include "core/status.h"

namespace spot::dist {

class KvStore {
 public:
  virtual ~KvStore() = default;

  // The value under `key`; nullopt when there is none. Unavailable when the
  // store cannot be reached (retry).
  virtual Result<std::optional<std::string>> Get(const std::string& key) = 0;
  virtual Status Put(const std::string& key, const std::string& value) = 0;
  // Atomically sets `key` to `desired` iff its value equals `expected`
  // (nullopt: iff the key is absent). Returns whether it did.
  virtual Result<bool> CompareAndSwap(const std::string& key,
                                      const std::optional<std::string>& expected,
                                      const std::string& desired) = 0;
  // Removes `key`; Ok when it was absent.
  virtual Status Delete(const std::string& key) = 0;

  // Liveness of participant `id` (see above). Heartbeat is cheap enough to call
  // every liveness_ttl / 4.
  virtual Status Heartbeat(const std::string& id) = 0;
  virtual Result<bool> IsAlive(const std::string& id) = 0;
  // Declares `id` dead now (a launcher that saw its process exit).
  virtual Status MarkDead(const std::string& id) = 0;
  virtual std::chrono::milliseconds liveness_ttl() const = 0;
};

// In-process store for tests and single-process runs. The clock is steady time.
std::unique_ptr<KvStore> NewMemoryKvStore(
    std::chrono::milliseconds liveness_ttl = std::chrono::milliseconds(3000));

}  // namespace spot::dist
