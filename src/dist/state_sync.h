// Moving the whole training state between the members of a process group:
// the records a checkpoint holds (parameters, buffers, optimizer state, RNG,
// counters), encoded with the checkpoint format's raw codec and broadcast as
// bytes, so a joiner or a member that fell a step behind ends bitwise equal
// to the source.
#pragma once

#include <torch/optim/optimizer.h>

#include <chrono>
#include <cstdint>
#include <string>
#include <torch/csrc/distributed/c10d/ProcessGroup.hpp>

#include "core/status.h"
#include "train/model.h"
#include "train/train_state.h"

namespace spot::dist {

using train::TrainRefs;  // counters are replaced on receivers (threads and BLAS kept)

// Broadcasts the state of rank `source` to every rank of `pg`. Aborted when a
// collective fails or times out (re-form the group and retry). Returns the
// bytes broadcast.
Result<uint64_t> BroadcastState(c10d::ProcessGroup& pg, int source, const TrainRefs& state);

// XXH3-64 over the parameters, buffers and optimizer state, in order: equal
// on two workers iff their replicas are bitwise equal (up to hash collisions).
// Leaves out the counters and the CPU generator, which is per worker.
uint64_t StateHash(const TrainRefs& state);

}  // namespace spot::dist
