// spot_bench's `ckpt` workload, sections 3 and 4 (ckpt_workload.h): the bytes
// each codec stores per save and its single-thread throughput, measured on
// training states already captured into containers. Internal to spot_bench;
// LibTorch-free.
#pragma once

#include <cstdint>
#include <vector>

#include "ckpt/codec.h"
#include "ckpt/container.h"
#include "ckpt_figures.h"
#include "core/status.h"

namespace spot::bench {

// Makes `to` a copy of `from` (its storage reused).
void CopyInto(const ckpt::Container& from, ckpt::Container* to);

// 3. The bytes of a save of `s1` (one step after `s0`) and `s10` (ten steps
// after) with every full and delta codec; each file decoded and checked.
Result<std::vector<BytesRow>> MeasureBytes(const ckpt::Container& s0, ckpt::Container& s1,
                                           ckpt::Container& s10);
// 3. A sub-delta of `now` against `base` one step before, late in training.
Result<BytesRow> MeasureLateDelta(const ckpt::Container& base, ckpt::Container& now, int64_t step);
// 4. Single-thread encode and decode throughput of codec `c` over the chunks
// of `now` (against `before` for a delta codec), every chunk checked.
Result<CodecRow> MeasureCodec(ckpt::Codec c, const ckpt::Container& before,
                              const ckpt::Container& now);

}  // namespace spot::bench
