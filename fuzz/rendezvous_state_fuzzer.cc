// Fuzzes the rendezvous's reading of its shared state (dist/rendezvous.h):
// the JSON value of "<job>/rdzv/state" that every worker of a job reads and
// compare-and-swaps in the key-value store. Any worker (or a damaged etcd
// value) may have written it, so a reader must cope with anything there.
//
// Each input is stored as the state, then read by ShouldReform and, when it
// is JSON, by one Join of a fresh worker that gives up after one pass (a
// timeout of 0). Workers "a", "b" and "w0" are alive; "dead" is not.
#include <chrono>
#include <cstdint>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>

#include "dist/kv_store.h"
#include "dist/rendezvous.h"
#include "fuzz_support.h"

namespace {

using spot::dist::KvStore;
using spot::dist::Rendezvous;
using spot::dist::RendezvousOptions;

constexpr char kKey[] = "job/rdzv/state";

RendezvousOptions Options() {
  RendezvousOptions o;
  o.job = "job";
  o.min_workers = 1;
  o.max_workers = 3;
  o.join_window = std::chrono::milliseconds(0);
  o.last_call = std::chrono::milliseconds(0);
  o.timeout = std::chrono::milliseconds(0);
  o.poll = std::chrono::milliseconds(0);
  return o;
}

void CheckStatus(const spot::Status& s) {
  using spot::StatusCode;
  FUZZ_CHECK(s.code() == StatusCode::kDataLoss || s.code() == StatusCode::kDeadlineExceeded,
             s.ToString());
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static std::unique_ptr<KvStore> store = spot::dist::NewMemoryKvStore(std::chrono::hours(1));
  // Reads only: one long-lived worker serves every input.
  static auto* reader = new Rendezvous(store.get(), Options(), "r");
  const std::string state = spot::fuzz::AsString(data, size);
  for (const char* id : {"a", "b", "w0"}) (void)store->Heartbeat(id);
  (void)store->MarkDead("dead");
  if (!store->Put(kKey, state).ok()) return 0;
  auto reform = reader->ShouldReform(size % 4);
  if (!reform.ok()) CheckStatus(reform.status());
  // Join writes the state; a fresh worker per input (its heartbeat thread
  // makes this the slow part, so only for inputs that are JSON at all).
  if (!nlohmann::json::accept(state)) return 0;
  Rendezvous joiner(store.get(), Options(), "w0");
  auto g = joiner.Join({.samples_per_s = 1, .step = 3, .state_hash = 7});
  if (!g.ok()) return CheckStatus(g.status()), 0;
  FUZZ_CHECK(g->rank >= 0 && g->rank < g->world_size(), "rank outside the generation");
  FUZZ_CHECK(g->members[static_cast<size_t>(g->rank)].id == "w0", "rank is not this worker");
  return 0;
}
