// Rendezvous: workers of one job agree on numbered generations of membership
// through a KvStore. Each membership change (a worker lost, a worker arriving)
// opens the next generation; it closes when its members are known, and every
// member then builds that generation's process group.
//
// Protocol (one JSON state key per job, changed only by compare-and-swap):
//   closed(g, members)  --a member re-joins, or a newcomer while g has fewer
//                         than max_workers alive--> open(g+1, [joiner], prev = g's)
//   open(g+1, members)  --joiners add themselves--> open(g+1, more)
//   open(g+1, members)  --any member sees the close rule hold--> closed(g+1)
// Close rule, over the members still alive (KvStore liveness):
//   alive >= min_workers, and one of
//     alive == max_workers;
//     the first generation (no previous one) and join_window has passed;
//     every member of the previous generation has joined or is dead (when
//       all of them are dead, after join_window, as for a first generation);
//     last_call has passed since the round opened (a live straggler that
//     never re-joins cannot hold the job forever).
// Ranks: previous members keep their relative order (rank 0 stays rank 0 if it
// survives), newcomers follow in the order of their ids (not of their
// arrival, a race: a job started again with the same ids gets the same ranks).
//
// Thread safety: one Rendezvous per worker; Join/ShouldReform/Leave from one
// thread. A background thread keeps this worker alive (Heartbeat every
// liveness_ttl / 4) from construction until Leave() or destruction.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "core/status.h"
#include "dist/kv_store.h"

namespace spot::dist {

struct RendezvousOptions {
  std::string job = "job";  // namespaces the keys: "<job>/rdzv/..."
  int min_workers = 1;      // a generation needs at least this many (>= 1)
  int max_workers = 64;     // and holds at most this many (>= min_workers)
  // The first generation waits this long for more workers once min is reached.
  std::chrono::milliseconds join_window{500};
  // A later round closes without a previous member that is alive but has not
  // re-joined after this long.
  std::chrono::milliseconds last_call{5000};
  // Join gives up (DeadlineExceeded) after this long.
  std::chrono::milliseconds timeout{60000};
  std::chrono::milliseconds poll{10};  // state polling period while waiting
  // Checked before every change Join would make to the state: when it returns
  // true, Join gives up with Aborted (a worker told to stop while it waits for
  // a generation) unless a generation has already closed with it.
  std::function<bool()> cancelled;
};

// What a worker tells the others when it joins.
struct MemberInfo {
  std::string id;            // unique per worker process
  double samples_per_s = 0;  // measured throughput (0: unknown)
  int64_t step = -1;         // training step its in-memory state is at (-1: none)
  uint64_t state_hash = 0;   // hash of that state, to see whether members agree
};

struct Generation {
  int64_t number = 0;               // 1, 2, ...
  int rank = 0;                     // this worker's rank in `members`
  std::vector<MemberInfo> members;  // in rank order
  int world_size() const { return static_cast<int>(members.size()); }
  // Prefix for this generation's process-group keys in the shared store.
  std::string store_prefix(const std::string& job) const;
};

// Who the job's workers are, as the rendezvous state has it: the members of
// the last generation formed (while the next one gathers, the one before it)
// and the newcomers that found the group full and wait for room.
struct Membership {
  int64_t generation = 0;           // the last formed (0: none yet)
  std::vector<std::string> formed;  // its members' ids, in rank order
  std::vector<std::string> waiting;
};
// Reads job's state (RendezvousOptions::job); DataLoss when malformed.
Result<Membership> ReadMembership(KvStore* store, const std::string& job);
// The id of the first member of `g` other than `me` whose liveness has
// lapsed, or "" (a store that cannot answer counts as alive, as in the close
// rule): what a member building g's process group watches for.
std::string FirstMemberGone(KvStore* store, const Generation& g, const std::string& me);

class Rendezvous {
 public:
  // `store` must outlive this object.
  Rendezvous(KvStore* store, RendezvousOptions options, std::string id);
  ~Rendezvous();
  Rendezvous(const Rendezvous&) = delete;
  Rendezvous& operator=(const Rendezvous&) = delete;

  // Joins the next generation and waits until it closes with this worker in
  // it. DeadlineExceeded after options.timeout; Unavailable when the store
  // cannot be reached.
  Result<Generation> Join(const MemberInfo& me);

  // True when a generation newer than `current` is open or formed: the
  // current group should finish its step and Join again.
  Result<bool> ShouldReform(int64_t current);

  // Stops heartbeating and declares this worker dead at once.
  Status Leave();

  const std::string& id() const { return id_; }

 private:
  friend Result<Membership> ReadMembership(KvStore* store, const std::string& job);
  struct State;
  Result<State> Read(std::string* raw);
  Result<bool> TryClose(const State& s, const std::string& raw);
  bool CanClose(const State& s, const std::vector<MemberInfo>& alive) const;
  int AliveCount(const std::vector<MemberInfo>& members) const;
  void StopHeartbeat();

  KvStore* store_;
  RendezvousOptions opt_;
  std::string id_;
  std::string key_;
  int64_t last_generation_ = 0;
  std::atomic<bool> stop_{false};
  std::thread heartbeat_;
};

}  // namespace spot::dist
