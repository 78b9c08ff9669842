// AsyncSaver: checkpoints that barely pause training.
//
// The training thread Acquire()s a snapshot buffer, copies its state into it
// (the only part it waits for: a memcpy into storage reused from earlier
// saves) and Submit()s it. A writer thread encodes the snapshot (a delta
// against the previous version, a full version every `full_every` and
// whenever the last delta saved too little), writes it
// to the local tier and applies retention; a replicator thread copies each
// committed version to the durable tier. At most `max_in_flight` snapshots
// wait to be written: Acquire blocks when they are all taken (back-pressure).
// Flush(deadline) waits for everything submitted to be committed and
// replicated, for the last seconds before a preemption.
//
// The replicator writes a version's durable copy in full where the store
// asks for it (StoreOptions::durable_max_chain), with the plan the version
// was saved with. While a Flush with a deadline waits, it copies versions as
// they are instead (a full encode is what a deadline cannot afford): such a
// Flush takes longer than plain copies by at most the materialization
// already under way, which is abandoned if its decode ends first.
//
// A write error is returned by the next Acquire or Flush, and the next version
// is then written in full. A replication error is logged and returned by
// Flush; training goes on with the local tier.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "ckpt/codec.h"
#include "ckpt/container.h"
#include "ckpt/store.h"
#include "core/status.h"

namespace spot::ckpt {

struct AsyncSaverOptions {
  bool delta = true;   // encode against the previous version when possible
  int full_every = 8;  // at most full_every - 1 deltas between full versions (>= 1)
  // The next version is written in full when the last delta saved less than
  // this fraction of the bytes of the full version its chain starts from
  // (0 = never for this reason). A restart decodes every version of a chain,
  // so a delta must pay for that by being clearly smaller; a delta costs the
  // writer about as much as a full version, so writing in full costs bytes
  // only. Deltas of saves a step apart save 20-45%; saves hundreds of steps
  // apart, as the interval policy makes them for a large state, much less.
  double min_delta_saving = 0.1;
  int max_in_flight = 2;  // snapshots waiting to be written (>= 1)
  int zstd_level = 1;
};

// What happened to one save, for the interval policy and the run's summary.
struct SaveReport {
  VersionInfo info;
  double write_s = 0;      // encode + write + retention on the writer thread
  double replicate_s = 0;  // copy to the durable tier (0 without one)
  // The durable copy was written in full (materialized; its time is part of
  // replicate_s), and its depth in the durable tier's delta chain.
  bool durable_full = false;
  int durable_chain_depth = 0;
};

class AsyncSaver {
 public:
  AsyncSaver(CheckpointStore* store, AsyncSaverOptions options);
  // Waits for submitted saves (no deadline), then stops the threads.
  ~AsyncSaver();
  AsyncSaver(const AsyncSaver&) = delete;
  AsyncSaver& operator=(const AsyncSaver&) = delete;

  // A buffer to fill (its records and their storage as the last save using it
  // left them: call Recycle() and re-add records in the same order to reuse
  // storage). Blocks while max_in_flight saves are pending. Returns the first
  // write error since the last call, if any.
  Result<Container*> Acquire();
  // Queues the filled buffer for writing and returns at once, with the id the
  // version will have (ids are reserved in submission order).
  int64_t Submit(Container* snapshot, SaveRequest request);

  // Waits until everything submitted is committed locally and replicated.
  // DeadlineExceeded (saying what is left) when `deadline` comes first.
  Status Flush(std::chrono::steady_clock::time_point deadline);
  Status Flush() { return Flush(std::chrono::steady_clock::time_point::max()); }

  // Saves completed (locally, and replicated where there is a durable tier)
  // since the last call.
  std::vector<SaveReport> TakeCompleted();
  // Saves submitted and not yet committed locally.
  int pending() const;
  // Whether background work is under way: a save being written or queued, or
  // a version being replicated to the durable tier. Both compete with
  // training for cores and disk; a step that overlaps either is one a save
  // slowed down (IntervalPolicy::RecordStep).
  bool busy() const;
  // The newest version committed locally, -1 for none.
  int64_t last_committed() const;

 private:
  struct Job {
    Container* snapshot;
    SaveRequest request;
    int64_t id;
  };
  void WriterLoop();
  // Writer thread: decides from a committed version whether the next is full.
  void NoteWritten(const VersionInfo& v);
  void ReplicatorLoop();
  struct Replication {
    SaveReport report;
    CodecPlan plan;  // the plan the version was saved with
  };

  CheckpointStore* store_;
  AsyncSaverOptions opt_;
  std::vector<std::unique_ptr<Container>> buffers_;

  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::vector<Container*> free_;
  std::deque<Job> write_queue_;
  bool writing_ = false;
  std::deque<Replication> replicate_queue_;
  bool replicating_ = false;
  int deadline_flushes_ = 0;  // Flush calls with a deadline now waiting
  // Set while deadline_flushes_ > 0: the replicator copies plainly.
  std::atomic<bool> plain_copy_{false};
  std::vector<SaveReport> completed_;
  Status write_error_;
  Status replicate_error_;
  int64_t last_committed_ = -1;
  bool stop_ = false;

  // Writer-thread state: the reference for the next delta.
  Container reference_;
  int64_t reference_id_ = -1;
  int reference_depth_ = 0;
  uint64_t chain_full_bytes_ = 0;  // file bytes of the full version the chain starts from
  bool next_full_ = false;         // the last delta saved too little
  ChunkCodec codec_;

  std::thread writer_, replicator_;
};

}  // namespace spot::ckpt
