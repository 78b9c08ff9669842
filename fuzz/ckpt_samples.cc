#include "ckpt_samples.h"

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <vector>

#include "ckpt/blob_store.h"
#include "ckpt/store.h"

namespace spot::fuzz {
namespace {

using ckpt::Container;
using ckpt::DType;

[[noreturn]] void Die(const std::string& what) {
  std::fprintf(stderr, "ckpt samples: %s\n", what.c_str());
  std::abort();
}

template <typename T>
void Fill(Container& c, const std::string& name, DType dtype, std::vector<int64_t> shape,
          const std::vector<T>& values) {
  std::span<char> dst = c.AddUninitialized(name, dtype, std::move(shape));
  if (dst.size() != values.size() * sizeof(T)) Die("sample record size: " + name);
  std::memcpy(dst.data(), values.data(), dst.size());
}

}  // namespace

Container SampleState(int version) {
  const float d = version == 1 ? 0.0f : 0.015625f;
  std::vector<float> w(32);
  for (size_t i = 0; i < w.size(); ++i) w[i] = 0.25f * static_cast<float>(i % 7) - 0.5f + d;
  std::vector<double> m(6);
  for (size_t i = 0; i < m.size(); ++i) m[i] = 1e-3 * static_cast<double>(i) + d;
  Container c;
  Fill(c, "model/fc.weight", DType::kF32, {4, 8}, w);
  const uint16_t last = version == 1 ? 0 : 1;
  Fill<uint16_t>(c, "model/fc.bias", DType::kF16, {4}, {0x3c00, 0xbc00, 0x0000, static_cast<uint16_t>(0x3800 + last)});
  Fill<uint16_t>(c, "model/emb", DType::kBF16, {3}, {0x3f80, 0x4000, static_cast<uint16_t>(0xc040 + last)});
  Fill(c, "optim/exp_avg", DType::kF64, {6}, m);
  Fill<int64_t>(c, "optim/step", DType::kI64, {}, {version * 10});
  Fill<uint8_t>(c, "model/mask", DType::kBool, {5}, {1, 0, 1, 1, static_cast<uint8_t>(version & 1)});
  c.AddBytes("trainer/state", version == 1 ? R"({"step": 10})" : R"({"step": 20})");
  return c;
}

std::string SampleCheckpointFile(int id, const ckpt::CodecPlan& plan) {
  ckpt::MemoryBlobStore store;
  ckpt::ChunkCodec codec;
  Container reference;
  for (int v = 1; v <= id; ++v) {
    Container state = SampleState(v);
    auto out = store.Create("ckpt.bin");
    if (!out.ok()) Die(out.status().ToString());
    auto written = ckpt::WriteCheckpointFile(state, plan, &reference, v, v == 1 ? -1 : v - 1,
                                             codec, **out);
    if (!written.ok()) Die(written.status().ToString());
    if (auto s = (*out)->Commit(); !s.ok()) Die(s.ToString());
  }
  auto bytes = store.Read("ckpt.bin");
  if (!bytes.ok()) Die(bytes.status().ToString());
  return *bytes;
}

void WriteSampleStore(const std::string& dir) {
  auto store = ckpt::CheckpointStore::Open({.dir = dir});
  if (!store.ok()) Die(store.status().ToString());
  ckpt::ChunkCodec codec;
  Container reference;
  for (int v = 1; v <= 2; ++v) {
    Container state = SampleState(v);
    ckpt::SaveRequest req{.step = v * 10, .parent = v - 1 > 0 ? v - 1 : -1,
                          .meta_json = v == 1 ? R"({"test_loss": 0.5})" : R"({"test_loss": 0.25})"};
    int64_t id = (*store)->ReserveId();
    auto info = (*store)->Write(id, state, &reference, v == 1 ? -1 : 1, v == 1 ? 0 : 1, req, codec);
    if (!info.ok()) Die(info.status().ToString());
  }
}

}  // namespace spot::fuzz
