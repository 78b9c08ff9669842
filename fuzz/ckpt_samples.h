// A small, fixed checkpoint state and files written from it with the
// project's own writers, shared by the checkpoint fuzz harnesses (as a base
// to decode deltas against, as files a store holds) and by make_seeds (which
// writes them into fuzz/corpus/). Deterministic: the same bytes every run.
#pragma once

#include <string>

#include "ckpt/codec.h"
#include "ckpt/container.h"
#include "ckpt/format.h"

namespace spot::fuzz {

// Version 1 or 2 of the state: f32, f16, bf16, f64, i64, bool and u8 records
// (one named "trainer/state", a JSON object with the step), 2 a little
// changed from 1.
ckpt::Container SampleState(int version);

// Version `id` of the state as a format v2 file: id 1 a full version with
// plan.full, id 2 a delta against version 1 with plan.delta. Aborts on failure.
std::string SampleCheckpointFile(int id, const ckpt::CodecPlan& plan);

// Writes versions 1 (full) and 2 (delta) into a checkpoint store at `dir`
// (created): ckpt-1.bin/json and ckpt-2.bin/json. Aborts on failure.
void WriteSampleStore(const std::string& dir);

}  // namespace spot::fuzz
