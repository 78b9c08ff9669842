#include "dist/state_sync.h"

#include <fmt/format.h>
#include <xxhash.h>

#include "ckpt/blob_store.h"
#include "ckpt/format.h"

namespace spot::dist {
namespace {

Result<std::string> Encode(const TrainRefs& s) {
  ckpt::Container c;
  SPOT_RETURN_IF_ERROR(
      train::CaptureTrainState(*s.model, *s.optimizer, s.optimizer_type, *s.counters, &c));
  ckpt::MemoryBlobStore mem;
  SPOT_ASSIGN_OR_RETURN(std::unique_ptr<ckpt::BlobWriter> w, mem.Create("state"));
  ckpt::Container reference;
  ckpt::ChunkCodec codec;
  ckpt::CodecPlan plan{.full = ckpt::Codec::kRaw};
  SPOT_RETURN_IF_ERROR(ckpt::WriteCheckpointFile(c, plan, &reference, 0, -1, codec, *w).status());
  SPOT_RETURN_IF_ERROR(w->Commit());
  return std::move(mem.blob("state"));
}

Status Decode(std::string bytes, const TrainRefs& s) {
  ckpt::MemoryBlobStore mem;
  mem.Set("state", std::move(bytes));
  SPOT_ASSIGN_OR_RETURN(ckpt::CheckpointFile f, ckpt::CheckpointFile::Open(mem, "state"));
  ckpt::ChunkCodec codec;
  SPOT_ASSIGN_OR_RETURN(ckpt::Container c, f.ReadAll(nullptr, codec));
  SPOT_ASSIGN_OR_RETURN(train::TrainerCounters got,
                        train::RestoreTrainState(c, *s.model, *s.optimizer, s.optimizer_type));
  got.threads = s.counters->threads;
  got.blas = s.counters->blas;
  *s.counters = std::move(got);
  return Status::Ok();
}

}  // namespace

Result<uint64_t> BroadcastState(c10d::ProcessGroup& pg, int source, const TrainRefs& state) {
  std::string bytes;
  if (pg.getRank() == source) {
    SPOT_ASSIGN_OR_RETURN(bytes, Encode(state));
  }
  try {
    at::Tensor size = at::full({1}, static_cast<int64_t>(bytes.size()), at::kLong);
    std::vector<at::Tensor> t{size};
    pg.broadcast(t, c10d::BroadcastOptions{.rootRank = source})->wait();
    int64_t n = size.item<int64_t>();
    at::Tensor data = pg.getRank() == source ? at::from_blob(bytes.data(), {n}, at::kByte)
                                             : at::empty({n}, at::kByte);
    std::vector<at::Tensor> d{data};
    pg.broadcast(d, c10d::BroadcastOptions{.rootRank = source})->wait();
    if (pg.getRank() != source) {
      bytes.assign(static_cast<const char*>(data.data_ptr()), static_cast<size_t>(n));
      SPOT_RETURN_IF_ERROR(
          Decode(std::move(bytes), state).WithContext("state from rank " + std::to_string(source)));
    }
    return static_cast<uint64_t>(n);
  } catch (const std::exception& e) {
    return AbortedError(fmt::format("broadcasting the state from rank {}: {}", source, e.what()));
  }
}

uint64_t StateHash(const TrainRefs& s) {
  ckpt::Container c;
  if (!train::CaptureTrainState(*s.model, *s.optimizer, s.optimizer_type, *s.counters, &c).ok()) {
    return 0;
  }
  XXH3_state_t* h = XXH3_createState();
  XXH3_64bits_reset(h);
  for (const ckpt::Record& r : c.records()) {
    // Counters are compared by step elsewhere; the generator is per worker
    // (reseeded every step from the step and the worker's part of the batch).
    if (r.name == "trainer/state" || r.name == "rng/cpu") continue;
    XXH3_64bits_update(h, r.name.data(), r.name.size());
    XXH3_64bits_update(h, r.data.data(), r.data.size());
  }
  uint64_t v = XXH3_64bits_digest(h);
  XXH3_freeState(h);
  return v;
}

}  // namespace spot::dist
