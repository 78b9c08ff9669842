// spot_bench's `ckpt` workload, section 6: a restart with no survivor. The
// local tier is lost, so the restore reads the durable tier only, and decodes
// the chain the durable copy of the newest version sits on there. Three
// stores (durable_max_chain: no limit, 1, 0) receive the same four versions
// (a full one and three deltas, one training step apart); the section
// reports what replicating each version cost and how long restoring the
// newest one from the durable tier takes, against torch::load of that state.
#pragma once

#include <string>

#include "ckpt_figures.h"
#include "ckpt_subject.h"
#include "core/status.h"

namespace spot::bench {

// Trains `s` three more steps (a version before and after each), under
// `dir` (removed on success). Every restore is checked against the newest
// state by fingerprint: InternalError when one differs, or when a store
// breaks its durable_max_chain.
Result<DurableFigures> MeasureDurableRestart(Subject& s, const CkptBenchOptions& o,
                                             const std::string& dir);

}  // namespace spot::bench
