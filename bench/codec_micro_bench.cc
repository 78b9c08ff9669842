// Micro-benchmarks of the checkpoint chunk codecs (src/ckpt/codec.h): the
// byte-plane shuffle alone, and encoding / decoding one 4 MiB chunk of f32
// weights shaped like a trained model's (normal(0, 0.05)). For the delta
// codecs the base is the same weights before one small optimizer-like step.
// Counters: bytes/s of raw chunk data, and `ratio` = raw bytes / stored bytes.
#include <benchmark/benchmark.h>

#include <random>
#include <string>
#include <vector>

#include "ckpt/codec.h"

namespace spot::ckpt {
namespace {

struct Chunk {
  std::string raw;   // the current weights
  std::string base;  // the weights one step earlier
};

const Chunk& F32Chunk() {
  static const Chunk chunk = [] {
    std::mt19937_64 rng(42);
    std::normal_distribution<float> weights(0, 0.05f), step(0, 1e-4f);
    std::vector<float> now(kChunkBytes / 4), before(now.size());
    for (size_t i = 0; i < now.size(); ++i) {
      before[i] = weights(rng);
      now[i] = before[i] + step(rng);
    }
    return Chunk{std::string(reinterpret_cast<char*>(now.data()), kChunkBytes),
                 std::string(reinterpret_cast<char*>(before.data()), kChunkBytes)};
  }();
  return chunk;
}

void BM_ShuffleF32(benchmark::State& state) {
  const std::string& raw = F32Chunk().raw;
  std::string out(raw.size(), '\0');
  for (auto _ : state) {
    ShuffleBytes({raw.data(), raw.size()}, 4, {out.data(), out.size()});
    benchmark::DoNotOptimize(out.data());
  }
  state.SetBytesProcessed(state.iterations() * static_cast<int64_t>(raw.size()));
}
BENCHMARK(BM_ShuffleF32);

void BM_UnshuffleF32(benchmark::State& state) {
  const std::string& raw = F32Chunk().raw;
  std::string out(raw.size(), '\0');
  for (auto _ : state) {
    UnshuffleBytes({raw.data(), raw.size()}, 4, {out.data(), out.size()});
    benchmark::DoNotOptimize(out.data());
  }
  state.SetBytesProcessed(state.iterations() * static_cast<int64_t>(raw.size()));
}
BENCHMARK(BM_UnshuffleF32);

void BM_Encode(benchmark::State& state) {
  const auto codec = static_cast<Codec>(state.range(0));
  const Chunk& chunk = F32Chunk();
  ChunkCodec codec_state;
  std::string base = chunk.base, out;
  for (auto _ : state) {
    // q8-delta moves the base; every iteration starts from the same one.
    state.PauseTiming();
    base = chunk.base;
    state.ResumeTiming();
    Status s = codec_state.Encode(codec, DType::kF32, {chunk.raw.data(), chunk.raw.size()},
                                  {base.data(), base.size()}, &out);
    if (!s.ok()) state.SkipWithError(s.ToString().c_str());
  }
  state.SetLabel(std::string(CodecName(codec)));
  state.SetBytesProcessed(state.iterations() * static_cast<int64_t>(chunk.raw.size()));
  state.counters["ratio"] = static_cast<double>(chunk.raw.size()) / std::max<size_t>(out.size(), 1);
}

void BM_Decode(benchmark::State& state) {
  const auto codec = static_cast<Codec>(state.range(0));
  const Chunk& chunk = F32Chunk();
  ChunkCodec codec_state;
  std::string base = chunk.base, stored;
  Status s = codec_state.Encode(codec, DType::kF32, {chunk.raw.data(), chunk.raw.size()},
                                {base.data(), base.size()}, &stored);
  if (!s.ok()) state.SkipWithError(s.ToString().c_str());
  std::string dst;
  for (auto _ : state) {
    state.PauseTiming();
    dst = chunk.base;  // delta codecs decode on top of the base
    state.ResumeTiming();
    s = codec_state.Decode(codec, DType::kF32, stored, {dst.data(), dst.size()});
    if (!s.ok()) state.SkipWithError(s.ToString().c_str());
  }
  state.SetLabel(std::string(CodecName(codec)));
  state.SetBytesProcessed(state.iterations() * static_cast<int64_t>(chunk.raw.size()));
  state.counters["ratio"] =
      static_cast<double>(chunk.raw.size()) / std::max<size_t>(stored.size(), 1);
}

void CompressingCodecs(benchmark::internal::Benchmark* b) {
  for (Codec c : {Codec::kShuffleZstd, Codec::kPlanesZstd, Codec::kXorDelta, Codec::kSubDelta,
                  Codec::kQ8Delta}) {
    b->Arg(static_cast<int>(c));
  }
  b->Unit(benchmark::kMillisecond);
}
BENCHMARK(BM_Encode)->Apply(CompressingCodecs);
BENCHMARK(BM_Decode)->Apply(CompressingCodecs);

}  // namespace
}  // namespace spot::ckpt
