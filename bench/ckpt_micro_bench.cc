// Micro-benchmarks of the checkpoint container (no LibTorch, no disk): encoding,
// decoding with checksum verification, and the XXH3 checksum alone, on records
// shaped like the CNN + Adam state (parameters, exp_avg, exp_avg_sq).
#include <benchmark/benchmark.h>

#include <cstring>
#include <string>

#include "ckpt/container.h"

namespace spot::ckpt {
namespace {

// The CNN's parameter shapes (src/train/model.h), each three times (the
// parameter and Adam's two moments): ~5 MB of float32 in all.
Container MakeCnnLikeContainer() {
  const std::vector<std::vector<int64_t>> shapes = {
      {32, 1, 3, 3}, {32}, {32}, {64, 32, 3, 3}, {64}, {64}, {128, 3136}, {128}, {10, 128}, {10}};
  Container c;
  int i = 0;
  for (const char* kind : {"model", "exp_avg", "exp_avg_sq"}) {
    for (const auto& shape : shapes) {
      std::span<char> data =
          c.AddUninitialized(std::string(kind) + "/" + std::to_string(i++), DType::kF32, shape);
      std::memset(data.data(), i, data.size());
    }
  }
  return c;
}

std::string EncodeToString(Container& c) {
  std::string scratch, file;
  uint64_t sum = 0;
  for (std::string_view piece : c.Encode(&scratch, &sum)) file.append(piece);
  return file;
}

void BM_Encode(benchmark::State& state) {
  Container c = MakeCnnLikeContainer();
  for (auto _ : state) {
    std::string scratch;
    uint64_t sum = 0;
    benchmark::DoNotOptimize(c.Encode(&scratch, &sum));
  }
  state.SetBytesProcessed(state.iterations() * static_cast<int64_t>(c.payload_bytes()));
}
BENCHMARK(BM_Encode)->Unit(benchmark::kMillisecond);

void BM_Decode(benchmark::State& state) {
  Container c = MakeCnnLikeContainer();
  const std::string file = EncodeToString(c);
  for (auto _ : state) {
    auto decoded = Container::Decode(file, "bench");  // copies `file`, as a read would
    if (!decoded.ok()) state.SkipWithError(decoded.status().message().c_str());
    benchmark::DoNotOptimize(decoded);
  }
  state.SetBytesProcessed(state.iterations() * static_cast<int64_t>(file.size()));
}
BENCHMARK(BM_Decode)->Unit(benchmark::kMillisecond);

void BM_Checksum(benchmark::State& state) {
  const std::string bytes(static_cast<size_t>(state.range(0)), 'x');
  for (auto _ : state) benchmark::DoNotOptimize(Container::Checksum(bytes));
  state.SetBytesProcessed(state.iterations() * state.range(0));
}
BENCHMARK(BM_Checksum)->Arg(4 << 10)->Arg(5 << 20)->Unit(benchmark::kMicrosecond);

}  // namespace
}  // namespace spot::ckpt
