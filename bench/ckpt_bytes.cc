// spot_bench's `ckpt` workload, sections 3 and 4: bytes per save and codec
// throughput, on captured training states (ckpt_bytes.h). LibTorch-free.
#include "ckpt_bytes.h"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <map>
#include <span>

#include "ckpt/async_saver.h"
#include "ckpt/blob_store.h"
#include "ckpt/format.h"

namespace spot::bench {

using Clock = std::chrono::steady_clock;
using ckpt::MemoryBlobStore;

void CopyInto(const ckpt::Container& from, ckpt::Container* to) {
  to->Recycle();
  for (const ckpt::Record& r : from.records()) {
    std::span<char> d = to->AddUninitialized(r.name, r.dtype, r.shape);
    if (!d.empty()) std::memcpy(d.data(), r.data.data(), d.size());
  }
}

namespace {

double Since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

// ---------------------------------------------------------------------------
// 3. Bytes per save, and 4. codec throughput.

// "model 1.52x, exp_avg 1.20x, exp_avg_sq 1.31x, other 2.00x" for a file's records.
std::string RatiosByGroup(const ckpt::CheckpointFile& f) {
  std::map<std::string, std::pair<uint64_t, uint64_t>> groups;  // raw, stored
  for (const ckpt::RecordEntry& e : f.records()) {
    std::string g = e.name.starts_with("model/")      ? "model"
                    : e.name.ends_with("/exp_avg")    ? "exp_avg"
                    : e.name.ends_with("/exp_avg_sq") ? "exp_avg_sq"
                                                      : "other";
    groups[g].first += e.raw_bytes;
    groups[g].second += e.stored_bytes();
  }
  std::string out;
  for (const char* g : {"model", "exp_avg", "exp_avg_sq", "other"}) {
    auto it = groups.find(g);
    if (it == groups.end()) continue;
    out += fmt::format("{}{} {:.2f}x", out.empty() ? "" : ", ", g,
                       static_cast<double>(it->second.first) /
                           static_cast<double>(std::max<uint64_t>(1, it->second.second)));
  }
  return out;
}

// Writes `c` as a checkpoint file into `mem` and decodes it again (against
// `base`, for a delta): ReadAll checks every record against the checksum of
// what the writer was given (for q8-delta records, of the reconstruction).
Result<BytesRow> EncodeAndCheck(std::string what, ckpt::Container& c, const ckpt::CodecPlan& plan,
                                ckpt::Container* reference, const ckpt::Container* base,
                                ckpt::ChunkCodec& codec, MemoryBlobStore& mem) {
  const int64_t id = 2, base_id = base ? 1 : -1;
  SPOT_ASSIGN_OR_RETURN(std::unique_ptr<ckpt::BlobWriter> w, mem.Create("f"));
  SPOT_ASSIGN_OR_RETURN(ckpt::WrittenFile written,
                        ckpt::WriteCheckpointFile(c, plan, reference, id, base_id, codec, *w));
  SPOT_RETURN_IF_ERROR(w->Commit());
  SPOT_ASSIGN_OR_RETURN(ckpt::CheckpointFile f, ckpt::CheckpointFile::Open(mem, "f"));
  ckpt::Container base_copy;
  if (base) CopyInto(*base, &base_copy);
  auto decoded = f.ReadAll(base ? &base_copy : nullptr, codec);
  if (!decoded.ok()) return decoded.status().WithContext("decoding the " + what + " file");
  if (decoded->records().size() != c.records().size()) {
    return InternalError("the " + what + " file decodes to a different number of records");
  }
  SPOT_RETURN_IF_ERROR(mem.Delete("f"));
  return BytesRow{std::move(what), written.file_bytes, written.codecs, RatiosByGroup(f)};
}

}  // namespace

Result<std::vector<BytesRow>> MeasureBytes(const ckpt::Container& s0, ckpt::Container& s1,
                                           ckpt::Container& s10) {
  MemoryBlobStore mem;
  ckpt::ChunkCodec codec(ckpt::AsyncSaverOptions{}.zstd_level);
  ckpt::Container ref;
  std::vector<BytesRow> rows;
  auto add = [&](Result<BytesRow> r) -> Status {
    if (!r.ok()) return r.status();
    rows.push_back(std::move(r).value());
    return Status::Ok();
  };
  // The saver's defaults (planes-zstd, sub-delta) carry the goals; the
  // codecs they replaced are measured beside them.
  const ckpt::CodecPlan defaults;
  const ckpt::CodecPlan xor_plan{.delta = ckpt::Codec::kXorDelta,
                                 .lossless_delta = ckpt::Codec::kXorDelta};
  const ckpt::CodecPlan q8_plan{.delta = ckpt::Codec::kQ8Delta};
  SPOT_RETURN_IF_ERROR(add(
      EncodeAndCheck("raw (full)", s1, {.full = ckpt::Codec::kRaw}, &ref, nullptr, codec, mem)));
  ref.Clear();
  SPOT_RETURN_IF_ERROR(add(EncodeAndCheck(
      "shuffle-zstd (full)", s1, {.full = ckpt::Codec::kShuffleZstd}, &ref, nullptr, codec, mem)));
  ref.Clear();
  SPOT_RETURN_IF_ERROR(
      add(EncodeAndCheck("planes-zstd (full, default)", s1, defaults, &ref, nullptr, codec, mem)));
  rows.back().goal = kGoalFullRatio;
  CopyInto(s0, &ref);
  SPOT_RETURN_IF_ERROR(
      add(EncodeAndCheck("xor-delta, 1 step after its base", s1, xor_plan, &ref, &s0, codec, mem)));
  CopyInto(s0, &ref);
  SPOT_RETURN_IF_ERROR(add(EncodeAndCheck("sub-delta (default), 1 step after its base", s1,
                                          defaults, &ref, &s0, codec, mem)));
  rows.back().goal = kGoalDeltaRatio;
  CopyInto(s0, &ref);
  SPOT_RETURN_IF_ERROR(
      add(EncodeAndCheck(fmt::format("sub-delta, {} steps after its base", kLongDeltaSteps), s10,
                         defaults, &ref, &s0, codec, mem)));
  CopyInto(s0, &ref);
  SPOT_RETURN_IF_ERROR(add(EncodeAndCheck("q8-delta (model; optimizer sub-delta), 1 step", s1,
                                          q8_plan, &ref, &s0, codec, mem)));
  return rows;
}

// The default delta of one step again, later in training (`base` the state
// before that step, `now` after it): Adam's first steps move every weight by
// about the learning rate, later ones by less.
Result<BytesRow> MeasureLateDelta(const ckpt::Container& base, ckpt::Container& now, int64_t step) {
  MemoryBlobStore mem;
  ckpt::ChunkCodec codec(ckpt::AsyncSaverOptions{}.zstd_level);
  ckpt::Container ref;
  CopyInto(base, &ref);
  SPOT_ASSIGN_OR_RETURN(
      BytesRow row,
      EncodeAndCheck(fmt::format("sub-delta (default), 1 step after its base, at step {}", step),
                     now, {}, &ref, &base, codec, mem));
  row.goal = kGoalDeltaRatio;
  return row;
}

// Encodes every chunk of every record of `now` with `c` (against the same
// bytes of `before` for the delta codecs), then decodes them all, timing
// only the codec calls, and checks that decoding gives back `now` (q8-delta:
// the encoder's reconstruction, each element within Q8ErrorBound of `now`).
// q8-delta covers the floating-point records only.
Result<CodecRow> MeasureCodec(ckpt::Codec c, const ckpt::Container& before,
                              const ckpt::Container& now) {
  ckpt::ChunkCodec codec(ckpt::AsyncSaverOptions{}.zstd_level);
  CodecRow row{.codec = c};
  std::vector<std::string> stored;
  std::vector<std::string> recon;  // q8: the base after encoding, per chunk
  std::string dst;
  for (size_t i = 0; i < now.records().size(); ++i) {
    const ckpt::Record& r = now.records()[i];
    const ckpt::Record& b = before.records()[i];
    if (b.name != r.name) {
      return InternalError("codec: the two snapshots differ in layout at " + r.name);
    }
    // A record whose size changed (the trainer's counters, as JSON, when the
    // step gains a digit) is written whole by a real save: not a delta case.
    if (b.data.size() != r.data.size()) continue;
    if (c == ckpt::Codec::kQ8Delta && !ckpt::SupportsQ8(r.dtype)) continue;
    stored.clear();
    recon.clear();
    for (size_t pos = 0; pos < r.data.size(); pos += ckpt::kChunkBytes) {
      const size_t n = std::min(ckpt::kChunkBytes, r.data.size() - pos);
      std::string base(b.data.substr(pos, n));  // Encode may update it (q8)
      stored.emplace_back();
      auto t0 = Clock::now();
      Status st =
          codec.Encode(c, r.dtype, {r.data.data() + pos, n}, {base.data(), n}, &stored.back());
      row.encode_s += Since(t0);
      if (!st.ok()) return st.WithContext("encoding " + r.name);
      row.raw_bytes += n;
      row.stored_bytes += stored.back().size();
      if (c == ckpt::Codec::kQ8Delta) recon.push_back(std::move(base));
    }
    for (size_t k = 0, pos = 0; k < stored.size(); ++k, pos += ckpt::kChunkBytes) {
      const size_t n = std::min(ckpt::kChunkBytes, r.data.size() - pos);
      if (ckpt::IsDelta(c)) {
        dst.assign(b.data.substr(pos, n));  // decoding starts from the base's bytes
      } else {
        dst.assign(n, '\0');
      }
      auto t0 = Clock::now();
      Status st = codec.Decode(c, r.dtype, stored[k], {dst.data(), n});
      row.decode_s += Since(t0);
      if (!st.ok()) return st.WithContext("decoding " + r.name);
      std::string_view want =
          c == ckpt::Codec::kQ8Delta ? std::string_view(recon[k]) : r.data.substr(pos, n);
      if (dst != want) {
        return InternalError(
            fmt::format("{}: {} does not decode to what was encoded", ckpt::CodecName(c), r.name));
      }
      if (c == ckpt::Codec::kQ8Delta && r.dtype == ckpt::DType::kF32) {
        // Each element within the documented bound of the value saved.
        const size_t count = n / 4;
        for (size_t blk = 0; blk < count; blk += ckpt::kQ8Block) {
          const size_t len = std::min(ckpt::kQ8Block, count - blk);
          double max_delta = 0;
          for (size_t j = blk; j < blk + len; ++j) {
            float a, z;
            std::memcpy(&a, r.data.data() + pos + 4 * j, 4);
            std::memcpy(&z, b.data.data() + pos + 4 * j, 4);
            max_delta = std::max(max_delta, std::fabs(double{a} - double{z}));
          }
          for (size_t j = blk; j < blk + len; ++j) {
            float a, got;
            std::memcpy(&a, r.data.data() + pos + 4 * j, 4);
            std::memcpy(&got, dst.data() + 4 * j, 4);
            if (std::fabs(double{got} - double{a}) >
                ckpt::Q8ErrorBound(max_delta, std::fabs(double{a}), r.dtype)) {
              return InternalError(
                  fmt::format("q8-delta: {} element {} is {} after decoding, "
                              "{} was saved (beyond the error bound)",
                              r.name, pos / 4 + j, got, a));
            }
          }
        }
      }
    }
  }
  return row;
}

}  // namespace spot::bench
