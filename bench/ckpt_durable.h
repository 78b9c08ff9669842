// spot_bench's `ckpt` workload, section 6: a restart with no survivor. The
// local tier is lost, so the restore reads the durable tier only, and decodes
// the chain the durable copy of the newest version sits on there. Three
// stores (durable_max_chain: no limit, 1, 0) receive the same four versions
// (a full one and three deltas, one training step apart); the section
// reports what replicating each version cost and how long restoring the
// newest one from the durable tier takes, against torch::load of that state.
#pragma once

#include <cstdint>
#include <limits>
#include <string>

#include "ckpt_figures.h"
#include "ckpt_subject.h"
#include "core/status.h"

namespace spot::bench {

// Trains `s` three more steps (a version before and after each), under
// `dir` (removed on success). Every restore is checked against the newest
// state by fingerprint: InternalError when one differs, or when a store
// breaks its durable_max_chain.
// Drops the files under `dir` from the page cache (their pages are clean:
// written with fsync, or the caller syncs first), as a new machine reading
// them finds them.
Status DropFromPageCache(const std::string& dir);

// A restart in a new process, as after a preemption: this binary started as
// a restart child (CkptBenchOptions::restart_child) restoring state `key`.
struct RestartRequest {
  std::string key;
  bool ours = true;  // else torch::load
  std::string dir;   // ours: the store's local tier; torch: torch::save's files
  int64_t before_step = std::numeric_limits<int64_t>::max();  // ours: LoadNewestValid's
  std::string durable_dir;                                    // ours: "" for none
  int durable_max_chain = 1;
  std::string scratch_dir;  // the child's log and result go here
};
// o.restores reps of restarts in a new process (this binary started as a
// restart child), each rep with the files in the page cache and then dropped
// from it (`ours_files`, `torch.dir`), ours and torch::load in alternating
// order; each checked against its fingerprint (torch::load: tensors only).
// With ours.durable_dir, each of ours gets a new empty local tier under
// ours.scratch_dir (ours.dir unused), as a new machine does.
Status MeasureRestarts(const CkptBenchOptions& o, const RestartRequest& ours,
                       const std::string& ours_files, const Fingerprint& want_ours,
                       const RestartRequest& torch, const Fingerprint& want_torch,
                       RestartTimes* out);

Result<DurableFigures> MeasureDurableRestart(Subject& s, const CkptBenchOptions& o,
                                             const std::string& dir);

}  // namespace spot::bench
