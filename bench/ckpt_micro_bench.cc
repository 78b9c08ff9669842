// Micro-benchmarks of checkpoint files (format v3, no LibTorch):
// WriteCheckpointFile and CheckpointFile::ReadAll over an in-memory BlobStore,
// full (raw, shuffle-zstd, planes-zstd) and delta (xor-delta, sub-delta,
// q8-delta) versions, the XXH3 checksum alone, and ReadAll of a 50M-parameter
// state from a file on 1 and 2 threads, and ReadChain of it and a delta (BM_ReadAll50M). Records
// are shaped like the CNN + Adam state (parameters, exp_avg, exp_avg_sq; ~5 MB of f32) and hold
// trained-looking values: normal(0, 0.05), the delta's base one small step earlier. The chunk
// codecs alone are in codec_micro_bench. Counters: bytes/s of raw record bytes, `ratio` = raw bytes
// / file bytes.
#include <benchmark/benchmark.h>
#include <fmt/format.h>

#include <cstring>
#include <map>
#include <random>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "ckpt/blob_store.h"
#include "ckpt/codec.h"
#include "ckpt/container.h"
#include "ckpt/format.h"
#include "core/temp_dir.h"

namespace spot::ckpt {
namespace {

// Blobs in memory. A writer appends to the storage of the blob the last
// commit replaced, so steady-state writes do not measure string growth.
class MemoryBlobStore : public BlobStore {
 public:
  std::string Describe(std::string_view name) const override { return "mem:" + std::string(name); }
  Result<std::unique_ptr<BlobWriter>> Create(const std::string& name) override {
    return std::unique_ptr<BlobWriter>(new Writer(this, name));
  }
  Status ReadInto(const std::string& name, uint64_t offset, std::span<char> dst) const override {
    auto it = blobs_.find(name);
    if (it == blobs_.end()) return NotFoundError(Describe(name) + ": missing");
    if (offset > it->second.size() || dst.size() > it->second.size() - offset) {
      return DataLossError(Describe(name) + ": short read");
    }
    if (!dst.empty()) std::memcpy(dst.data(), it->second.data() + offset, dst.size());
    return Status::Ok();
  }
  Result<uint64_t> Size(const std::string& name) const override {
    auto it = blobs_.find(name);
    if (it == blobs_.end()) return NotFoundError(Describe(name) + ": missing");
    return uint64_t{it->second.size()};
  }
  Result<std::vector<std::string>> List() const override {
    std::vector<std::string> out;
    for (const auto& [name, bytes] : blobs_) out.push_back(name);
    return out;
  }
  Status Delete(const std::string& name) override {
    blobs_.erase(name);
    return Status::Ok();
  }

 private:
  class Writer : public BlobWriter {
   public:
    Writer(MemoryBlobStore* s, std::string name)
        : s_(s), name_(std::move(name)), buf_(std::move(s_->spare_)) {
      buf_.clear();
    }
    Status Append(std::string_view d) override {
      buf_.append(d);
      return Status::Ok();
    }
    // The blob replaced, if any, keeps its storage for the next writer.
    Status Commit() override {
      s_->blobs_[name_].swap(buf_);
      s_->spare_ = std::move(buf_);
      return Status::Ok();
    }

   private:
    MemoryBlobStore* s_;
    std::string name_, buf_;
  };
  std::map<std::string, std::string> blobs_;
  std::string spare_;  // storage for the next writer
};

// The CNN's parameter shapes (src/train/model.h), each three times (the
// parameter and Adam's two moments): ~5 MB of float32 in all.
const std::vector<std::vector<int64_t>>& CnnShapes() {
  static const std::vector<std::vector<int64_t>> shapes = {
      {32, 1, 3, 3}, {32}, {32}, {64, 32, 3, 3}, {64}, {64}, {128, 3136}, {128}, {10, 128}, {10}};
  return shapes;
}

// Two snapshots of the same records: `before`, and `now` one small step later.
struct Snapshots {
  Container before, now;
};

Snapshots MakeSnapshots() {
  Snapshots s;
  std::mt19937_64 rng(42);
  std::normal_distribution<float> weights(0, 0.05f), step(0, 1e-4f);
  int i = 0;
  for (const char* kind : {"model", "optim/exp_avg", "optim/exp_avg_sq"}) {
    for (const auto& shape : CnnShapes()) {
      std::string name = std::string(kind) + "/" + std::to_string(i++);
      std::span<char> b = s.before.AddUninitialized(name, DType::kF32, shape);
      std::span<char> n = s.now.AddUninitialized(name, DType::kF32, shape);
      for (size_t k = 0; k + 4 <= b.size(); k += 4) {
        float w = weights(rng), d = w + step(rng);
        std::memcpy(b.data() + k, &w, 4);
        std::memcpy(n.data() + k, &d, 4);
      }
    }
  }
  return s;
}

void CopyInto(const Container& from, Container* to) {
  to->Recycle();
  for (const Record& r : from.records()) {
    std::span<char> d = to->AddUninitialized(r.name, r.dtype, r.shape);
    if (!d.empty()) std::memcpy(d.data(), r.data.data(), d.size());
  }
}

enum Kind { kRawFull, kZstdFull, kPlanesFull, kXorDelta, kSubDelta, kQ8Delta };

CodecPlan PlanFor(Kind k) {
  CodecPlan p;
  if (k == kRawFull) p.full = Codec::kRaw;
  if (k == kZstdFull) p.full = Codec::kShuffleZstd;
  if (k == kXorDelta) p.delta = p.lossless_delta = Codec::kXorDelta;
  if (k == kQ8Delta) {
    p.delta = Codec::kQ8Delta;
    p.q8_optimizer_state = true;  // every record, so the benchmark measures q8 throughout
  }
  return p;
}

bool IsDeltaKind(Kind k) { return k == kXorDelta || k == kSubDelta || k == kQ8Delta; }

std::string_view KindName(Kind k) {
  switch (k) {
    case kRawFull:
      return "full raw";
    case kZstdFull:
      return "full shuffle-zstd";
    case kPlanesFull:
      return "full planes-zstd";
    case kXorDelta:
      return "delta xor";
    case kSubDelta:
      return "delta sub";
    case kQ8Delta:
      return "delta q8";
  }
  return "";
}

// Writes `s.now` as version 2 (a delta against `s.before`, version 1, for the
// delta kinds). `reference` is reset to the base first (untimed by callers).
Status WriteOnce(Kind k, Snapshots& s, Container* reference, ChunkCodec& codec,
                 MemoryBlobStore& mem, uint64_t* file_bytes) {
  auto w = mem.Create("ckpt-2.bin");
  if (!w.ok()) return w.status();
  auto f =
      WriteCheckpointFile(s.now, PlanFor(k), reference, 2, IsDeltaKind(k) ? 1 : -1, codec, **w);
  if (!f.ok()) return f.status();
  *file_bytes = f->file_bytes;
  return (*w)->Commit();
}

void ResetReference(Kind k, const Snapshots& s, Container* reference) {
  if (IsDeltaKind(k)) {
    CopyInto(s.before, reference);
  } else {
    reference->Recycle();
  }
}

void BM_Write(benchmark::State& state) {
  const auto kind = static_cast<Kind>(state.range(0));
  Snapshots s = MakeSnapshots();
  MemoryBlobStore mem;
  ChunkCodec codec;
  Container reference;
  uint64_t file_bytes = 0;
  for (auto _ : state) {
    state.PauseTiming();
    ResetReference(kind, s, &reference);
    state.ResumeTiming();
    Status st = WriteOnce(kind, s, &reference, codec, mem, &file_bytes);
    if (!st.ok()) state.SkipWithError(st.ToString().c_str());
  }
  state.SetLabel(std::string(KindName(kind)));
  state.SetBytesProcessed(state.iterations() * static_cast<int64_t>(s.now.payload_bytes()));
  state.counters["ratio"] = static_cast<double>(s.now.payload_bytes()) /
                            static_cast<double>(std::max<uint64_t>(1, file_bytes));
}

void BM_ReadAll(benchmark::State& state) {
  const auto kind = static_cast<Kind>(state.range(0));
  Snapshots s = MakeSnapshots();
  MemoryBlobStore mem;
  ChunkCodec codec;
  Container reference, base;
  uint64_t file_bytes = 0;
  ResetReference(kind, s, &reference);
  Status st = WriteOnce(kind, s, &reference, codec, mem, &file_bytes);
  if (!st.ok()) state.SkipWithError(st.ToString().c_str());
  for (auto _ : state) {
    state.PauseTiming();
    if (IsDeltaKind(kind)) CopyInto(s.before, &base);  // ReadAll takes the base's storage
    state.ResumeTiming();
    auto f = CheckpointFile::Open(mem, "ckpt-2.bin");
    if (!f.ok()) {
      state.SkipWithError(f.status().ToString().c_str());
      break;
    }
    auto c = f->ReadAll(IsDeltaKind(kind) ? &base : nullptr, codec);
    if (!c.ok()) {
      state.SkipWithError(c.status().ToString().c_str());
      break;
    }
    benchmark::DoNotOptimize(c->records().data());
    state.PauseTiming();
    c = Container();  // frees outside the timing
    state.ResumeTiming();
  }
  state.SetLabel(std::string(KindName(kind)));
  state.SetBytesProcessed(state.iterations() * static_cast<int64_t>(s.now.payload_bytes()));
  state.counters["ratio"] = static_cast<double>(s.now.payload_bytes()) /
                            static_cast<double>(std::max<uint64_t>(1, file_bytes));
}

// A full version of the 50M MLP's shapes (784 -> 4096 x 3 -> 10, weights,
// exp_avg and exp_avg_sq: 643 MB) in planes-zstd, and a sub-delta one step
// later (each value moved as by an Adam step of lr 1e-3), as ckpt-1.bin and
// ckpt-2.bin in a directory. Written once per process, removed at its exit.
const TempDir& Mlp50MFiles() {
  static const TempDir dir = [] {
    TempDir d = TempDir::Create("ckpt-micro-bench").value();
    Container before, now;
    std::mt19937_64 rng(42);
    std::normal_distribution<float> weights(0, 0.05f), step(0, 1e-3f);
    const std::vector<std::vector<int64_t>> shapes = {{4096, 784},  {4096}, {4096, 4096}, {4096},
                                                      {4096, 4096}, {4096}, {4096, 4096}, {4096},
                                                      {10, 4096},   {10}};
    int i = 0;
    for (const char* kind : {"model", "optim/exp_avg", "optim/exp_avg_sq"}) {
      const bool squares = std::string_view(kind).ends_with("sq");
      for (const auto& shape : shapes) {
        const std::string name = std::string(kind) + "/" + std::to_string(i++);
        std::span<char> b = before.AddUninitialized(name, DType::kF32, shape);
        std::span<char> n = now.AddUninitialized(name, DType::kF32, shape);
        for (size_t k = 0; k + 4 <= b.size(); k += 4) {
          float w = weights(rng), v = w + step(rng);
          if (squares) w = w * w * 1e-3f, v = w * (1 + 20 * step(rng));
          std::memcpy(b.data() + k, &w, 4);
          std::memcpy(n.data() + k, &v, 4);
        }
      }
    }
    auto store = DirectoryBlobStore::Open(d.path().string()).value();
    ChunkCodec codec;
    Container reference;
    for (int id : {1, 2}) {
      auto w = store->Create(fmt::format("ckpt-{}.bin", id)).value();
      if (!WriteCheckpointFile(id == 1 ? before : now, CodecPlan{}, &reference, id,
                               id == 1 ? -1 : 1, codec, *w)
               .ok() ||
          !w->Commit().ok()) {
        std::abort();
      }
    }
    return d;
  }();
  return dir;
}

// Decoding the 50M MLP's state from files in the page cache on range(0)
// threads: range(1) = 0, ReadAll of the full version; 1, ReadChain of the
// full version and its delta. How the decode scales with threads, apart from
// everything else a restore does. Each decode's memory is freed untimed.
void BM_ReadAll50M(benchmark::State& state) {
  const int threads = static_cast<int>(state.range(0));
  const bool chain = state.range(1) == 1;
  auto store = DirectoryBlobStore::Open(Mlp50MFiles().path().string()).value();
  auto full = CheckpointFile::Open(*store, "ckpt-1.bin");
  auto delta = CheckpointFile::Open(*store, "ckpt-2.bin");
  if (!full.ok() || !delta.ok()) {
    state.SkipWithError((full.ok() ? delta.status() : full.status()).ToString().c_str());
    return;
  }
  const CheckpointFile* files[] = {&*full, &*delta};
  ChunkCodec codec;
  uint64_t bytes = 0;
  for (auto _ : state) {
    auto c = chain ? CheckpointFile::ReadChain(files, nullptr, codec, threads)
                   : full->ReadAll(nullptr, codec, threads);
    if (!c.ok()) {
      state.SkipWithError(c.status().ToString().c_str());
      break;
    }
    bytes = c->payload_bytes();
    state.PauseTiming();
    c = Container();
    state.ResumeTiming();
  }
  state.SetLabel(chain ? "full + delta" : "full");
  state.SetBytesProcessed(state.iterations() * static_cast<int64_t>(bytes));
}
BENCHMARK(BM_ReadAll50M)->ArgsProduct({{1, 2}, {0, 1}})->Unit(benchmark::kMillisecond)->MinTime(3);

void AllKinds(benchmark::internal::Benchmark* b) {
  for (Kind k : {kRawFull, kZstdFull, kPlanesFull, kXorDelta, kSubDelta, kQ8Delta}) b->Arg(k);
  b->Unit(benchmark::kMillisecond);
}
BENCHMARK(BM_Write)->Apply(AllKinds);
BENCHMARK(BM_ReadAll)->Apply(AllKinds);

void BM_Checksum(benchmark::State& state) {
  const std::string bytes(static_cast<size_t>(state.range(0)), 'x');
  for (auto _ : state) benchmark::DoNotOptimize(Checksum(bytes));
  state.SetBytesProcessed(state.iterations() * state.range(0));
}
BENCHMARK(BM_Checksum)->Arg(4 << 10)->Arg(5 << 20)->Unit(benchmark::kMicrosecond);

}  // namespace
}  // namespace spot::ckpt
