// Threads as ranks: every rank is a thread with its own ProcessGroupGloo over one shared
// in-memory store, each test under its own prefix.
#include "dist/compression.h"

#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <atomic>
#include <cmath>
#include <cstring>
#include <functional>
#include <latch>
#include <random>
#include <string>
#include <thread>
#include <torch/csrc/distributed/c10d/HashStore.hpp>
#include <torch/csrc/distributed/c10d/PrefixStore.hpp>
#include <torch/csrc/distributed/c10d/ProcessGroupGloo.hpp>
#include <vector>

namespace spot::dist {
namespace {

using std::chrono::milliseconds;
using Floats = std::vector<float>;
constexpr milliseconds kTimeout{10000};

// Runs body(rank, group) on `world` threads. The groups are built concurrently (they meet
// through the store), with `timeout` as the group's own operation timeout.
void RunRanks(int world, const std::function<void(int, c10d::ProcessGroup&)>& body,
              milliseconds timeout = kTimeout) {
  static auto* const store =
      new c10::intrusive_ptr<c10d::Store>(c10::make_intrusive<c10d::HashStore>());
  static std::atomic<int> next_prefix{0};
  const std::string prefix = "compression_test/" + std::to_string(next_prefix++);
  std::vector<std::thread> threads;
  for (int rank = 0; rank < world; ++rank) {
    threads.emplace_back([&, rank] {
      try {
        auto prefixed = c10::make_intrusive<c10d::PrefixStore>(prefix, *store);
        auto opts = c10d::ProcessGroupGloo::Options::create(timeout);
        opts->devices.push_back(c10d::ProcessGroupGloo::createDeviceForHostname("127.0.0.1"));
        opts->threads = 1;
        auto pg = c10::make_intrusive<c10d::ProcessGroupGloo>(prefixed, rank, world, opts);
        body(rank, *pg);
      } catch (const std::exception& e) {
        ADD_FAILURE() << "rank " << rank << ": " << e.what();
      }
    });
  }
  for (std::thread& t : threads) t.join();
}

Floats RandomGrad(uint64_t seed, int64_t numel) {  // uniform in [-1, 1)
  std::mt19937_64 rng(seed * 7919 + 1);
  Floats v(numel);
  for (float& x : v) x = float(int64_t(rng() >> 40) - (1 << 23)) / float(1 << 23);
  return v;
}

at::Tensor ToTensor(const Floats& v) {
  at::Tensor t = at::empty({int64_t(v.size())}, at::kFloat);
  std::memcpy(t.data_ptr<float>(), v.data(), v.size() * sizeof(float));
  return t;
}

Floats ToFloats(const at::Tensor& t) {
  return Floats(t.data_ptr<float>(), t.data_ptr<float>() + t.numel());
}

std::unique_ptr<GradientReducer> MakeReducer(const CompressionOptions& o,
                                             std::vector<TensorSpan> layout, int64_t numel) {
  auto reducer = GradientReducer::Create(o, std::move(layout), numel);
  EXPECT_TRUE(reducer.ok()) << reducer.status().ToString();
  return reducer.ok() ? std::move(reducer).value() : nullptr;
}

void ExpectBitwiseEqual(const std::vector<Floats>& per_rank) {
  for (size_t r = 1; r < per_rank.size(); ++r) {
    ASSERT_EQ(per_rank[r].size(), per_rank[0].size());
    EXPECT_EQ(
        0, std::memcmp(per_rank[r].data(), per_rank[0].data(), per_rank[0].size() * sizeof(float)))
        << "rank " << r << " differs from rank 0";
  }
}

double Norm(const std::vector<double>& v) {
  double s = 0;
  for (double x : v) s += x * x;
  return std::sqrt(s);
}

TEST(CompressionNames, ParseRoundTripsAndRejectsUnknown) {
  for (Compression c : {Compression::kNone, Compression::kFp16, Compression::kBf16,
                        Compression::kPowerSgd, Compression::kTopK}) {
    auto parsed = ParseCompression(CompressionName(c));
    ASSERT_TRUE(parsed.ok());
    EXPECT_EQ(*parsed, c);
  }
  auto bad = ParseCompression("zstd");
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(bad.status().message().find("powersgd"), std::string::npos);
  EXPECT_FALSE(ParseCompression("FP16").ok());
}

TEST(CompressionReducer, CreateRejectsBadOptionsAndLayout) {
  CompressionOptions o;
  o.topk_ratio = 0;
  EXPECT_EQ(GradientReducer::Create(o, {}, 10).status().code(), StatusCode::kInvalidArgument);
  o = {};
  o.powersgd_rank = 0;
  EXPECT_FALSE(GradientReducer::Create(o, {}, 10).ok());
  o = {};
  EXPECT_FALSE(GradientReducer::Create(o, {}, 0).ok());
  EXPECT_FALSE(GradientReducer::Create(o, {{0, {4, 3}}, {10, {2}}}, 12).ok());  // overlap
  EXPECT_FALSE(GradientReducer::Create(o, {{8, {5}}}, 12).ok());                // past end
  EXPECT_TRUE(GradientReducer::Create(o, {{10, {2}}, {0, {2, 5}}}, 12).ok());   // unsorted ok
}

TEST(CompressionReducer, StateExportImportReset) {
  CompressionOptions o;
  o.kind = Compression::kPowerSgd;
  o.powersgd_min_numel = 0;
  o.powersgd_rank = 2;
  constexpr int64_t kN = 120;  // one 12 x 10 matrix
  auto a = MakeReducer(o, {{0, {12, 10}}}, kN);
  auto b = MakeReducer(o, {{0, {12, 10}}}, kN);
  auto fresh = MakeReducer(o, {{0, {12, 10}}}, kN);
  ASSERT_TRUE(a && b && fresh);
  RunRanks(1, [&](int, c10d::ProcessGroup& pg) {
    for (int step = 0; step < 3; ++step) {
      ASSERT_TRUE(a->AllReduceSum(pg, ToTensor(RandomGrad(step, kN)), kTimeout).ok());
    }
    ReducerState state = a->ExportState();
    EXPECT_EQ(state.step, 3);
    EXPECT_EQ(state.error.size(), size_t(kN));
    EXPECT_EQ(state.powersgd_q.size(), 20u);  // m * r = 10 * 2
    ASSERT_TRUE(b->ImportState(state).ok());
    at::Tensor fa = ToTensor(RandomGrad(9, kN)), fb = fa.clone(), fc = fa.clone();
    ASSERT_TRUE(a->AllReduceSum(pg, fa, kTimeout).ok());
    ASSERT_TRUE(b->AllReduceSum(pg, fb, kTimeout).ok());
    ASSERT_TRUE(fresh->AllReduceSum(pg, fc, kTimeout).ok());
    EXPECT_TRUE(at::equal(fa, fb));
    EXPECT_FALSE(at::equal(fa, fc));  // the state matters
    auto wrong_size = a->AllReduceSum(pg, at::zeros({kN - 1}), kTimeout);
    EXPECT_EQ(wrong_size.status().code(), StatusCode::kInvalidArgument);
    EXPECT_FALSE(a->AllReduceSum(pg, at::zeros({kN}, at::kDouble), kTimeout).ok());
  });
  ReducerState bad;
  bad.error.assign(7, 0.0f);
  EXPECT_EQ(b->ImportState(bad).code(), StatusCode::kInvalidArgument);
  b->Reset();
  EXPECT_EQ(b->ExportState().step, 0);
  EXPECT_TRUE(b->ExportState().error.empty());
  EXPECT_TRUE(b->ExportState().powersgd_q.empty());
}

// none / fp16 / bf16 over world sizes 1..8: the exact sum within the cast's tolerance.
class CompressionCastTest : public ::testing::TestWithParam<int> {};

TEST_P(CompressionCastTest, SumMatchesExactAndRanksAgreeBitwise) {
  const int world = GetParam();
  constexpr int64_t kNumel = 1000;
  const Compression kinds[] = {Compression::kNone, Compression::kFp16, Compression::kBf16};
  const double rel_tol[] = {1e-6, 1e-3 * world, 4e-3};  // of the sum of |inputs|
  const uint64_t bytes[] = {4 * kNumel, 2 * kNumel, 2 * kNumel};
  std::vector<std::vector<Floats>> got(3, std::vector<Floats>(world));
  RunRanks(world, [&](int rank, c10d::ProcessGroup& pg) {
    for (int i = 0; i < 3; ++i) {
      CompressionOptions o;
      o.kind = kinds[i];
      auto reducer = MakeReducer(o, {}, kNumel);
      ASSERT_TRUE(reducer);
      at::Tensor flat = ToTensor(RandomGrad(rank, kNumel));
      auto stats = reducer->AllReduceSum(pg, flat, kTimeout);
      ASSERT_TRUE(stats.ok()) << stats.status().ToString();
      // fp16 first gathers each rank's peak (8 bytes) for the common scale.
      const bool gathers_peak = kinds[i] == Compression::kFp16;
      EXPECT_EQ(stats->bytes_sent, bytes[i] + (gathers_peak ? 8 : 0));
      EXPECT_EQ(stats->collectives, gathers_peak ? 2 : 1);
      got[i][rank] = ToFloats(flat);
    }
  });
  std::vector<double> exact(kNumel, 0.0), abs_sum(kNumel, 0.0);
  for (int r = 0; r < world; ++r) {
    Floats g = RandomGrad(r, kNumel);
    for (int64_t j = 0; j < kNumel; ++j) exact[j] += g[j], abs_sum[j] += std::fabs(g[j]);
  }
  for (int i = 0; i < 3; ++i) {
    SCOPED_TRACE(std::string(CompressionName(kinds[i])));
    ExpectBitwiseEqual(got[i]);
    ASSERT_EQ(got[i][0].size(), size_t(kNumel));
    for (int64_t j = 0; j < kNumel; ++j) {
      ASSERT_NEAR(got[i][0][j], exact[j], rel_tol[i] * abs_sum[j] + 1e-7) << "element " << j;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(WorldSizes, CompressionCastTest, ::testing::Range(1, 9));

// Runs `steps` calls with a constant per-rank gradient RandomGrad(rank) and checks error
// feedback: every rank agrees bitwise, memories + applied sums add up to the true sums, and
// the cumulative applied sum approaches the cumulative true sum. Returns rank 0's stats and
// last output.
std::pair<CommStats, Floats> RunConstantGradient(int world, const CompressionOptions& o,
                                                 const std::vector<TensorSpan>& layout,
                                                 int64_t numel, int steps, double max_rel_gap) {
  std::vector<Floats> applied(world, Floats(numel, 0.0f)), memory(world);
  std::vector<Floats> outputs(world);
  CommStats stats0;
  RunRanks(world, [&](int rank, c10d::ProcessGroup& pg) {
    auto reducer = MakeReducer(o, layout, numel);
    ASSERT_TRUE(reducer);
    const Floats grad = RandomGrad(rank, numel);
    for (int s = 0; s < steps; ++s) {
      at::Tensor flat = ToTensor(grad);
      auto stats = reducer->AllReduceSum(pg, flat, kTimeout);
      ASSERT_TRUE(stats.ok()) << stats.status().ToString();
      if (rank == 0) stats0 = *stats;
      const Floats out = ToFloats(flat);
      outputs[rank].insert(outputs[rank].end(), out.begin(), out.end());
      for (int64_t j = 0; j < numel; ++j) applied[rank][j] += out[j];
    }
    memory[rank] = reducer->ExportState().error;
    memory[rank].resize(numel, 0.0f);
  });
  ExpectBitwiseEqual(outputs);
  std::vector<double> truth(numel, 0.0), gap(numel), conservation(numel);
  for (int r = 0; r < world; ++r) {
    Floats g = RandomGrad(r, numel);
    for (int64_t j = 0; j < numel; ++j) truth[j] += double(g[j]) * steps;
  }
  for (int64_t j = 0; j < numel; ++j) {
    gap[j] = applied[0][j] - truth[j];
    double mem = 0;
    for (int r = 0; r < world; ++r) mem += memory[r][j];
    conservation[j] = gap[j] + mem;
  }
  EXPECT_LT(Norm(conservation), 1e-3 * Norm(truth)) << "applied + memories != true sum";
  EXPECT_LT(Norm(gap), max_rel_gap * Norm(truth)) << "error feedback does not catch up";
  return {stats0, Floats(outputs[0].end() - numel, outputs[0].end())};
}

class CompressionTopKTest : public ::testing::TestWithParam<int> {};

TEST_P(CompressionTopKTest, ErrorFeedbackCatchesUpAndBytesMatchRatio) {
  CompressionOptions o;
  o.kind = Compression::kTopK;
  o.topk_ratio = 0.1;  // k = 10 of 100: 10 int32 indices + 10 fp32 values
  auto [stats, last] = RunConstantGradient(GetParam(), o, {}, 100, 200, 0.1);
  EXPECT_EQ(stats.bytes_sent, 80u);  // = ratio * (4 + 4) / 4 of the 400 bytes of "none"
  EXPECT_EQ(stats.collectives, 1);
}

INSTANTIATE_TEST_SUITE_P(WorldSizes, CompressionTopKTest, ::testing::Values(1, 2, 3, 4));

class CompressionPowerSgdTest : public ::testing::TestWithParam<int> {};

TEST_P(CompressionPowerSgdTest, ErrorFeedbackCatchesUpAndSmallTensorsAreExact) {
  CompressionOptions o;
  o.kind = Compression::kPowerSgd;
  o.powersgd_rank = 2;
  o.powersgd_min_numel = 100;
  // 32x16 matrix (compressed), a bias of 16 and a 8x4 matrix (both below min: exact).
  const std::vector<TensorSpan> layout = {{0, {32, 16}}, {512, {16}}, {528, {8, 4}}};
  auto [stats, last] = RunConstantGradient(GetParam(), o, layout, 560, 100, 0.1);
  for (int64_t j = 512; j < 560; ++j) {  // uncompressed elements: the plain fp32 sum
    double exact = 0;
    for (int r = 0; r < GetParam(); ++r) exact += RandomGrad(r, 560)[j];
    EXPECT_NEAR(last[j], exact, 1e-5) << "element " << j;
  }
  EXPECT_EQ(stats.bytes_sent, 4u * (48 + 32 * 2 + 16 * 2));  // plain + P + Q
  EXPECT_EQ(stats.collectives, 2);
}

TEST_P(CompressionPowerSgdTest, RankOneSumIsNearExactAfterAZeroStep) {
  const int world = GetParam();
  CompressionOptions o;
  o.kind = Compression::kPowerSgd;
  o.powersgd_rank = 1;
  o.powersgd_min_numel = 0;
  // Rank r holds (r + 1) * u v^T: the sum is exactly rank 1. A zero gradient comes first: it
  // zeroes Q, which must be re-drawn or PowerSGD would send zeros forever.
  const int64_t n = 24, m = 20;
  std::vector<Floats> outputs(world);
  RunRanks(world, [&](int rank, c10d::ProcessGroup& pg) {
    auto reducer = MakeReducer(o, {{0, {n, m}}}, n * m);
    ASSERT_TRUE(reducer);
    const Floats u = RandomGrad(100, n), v = RandomGrad(101, m);
    for (int step = 0; step < 3; ++step) {
      Floats matrix(n * m);
      for (int64_t i = 0; i < n; ++i) {
        for (int64_t j = 0; j < m; ++j)
          matrix[i * m + j] = float(step > 0) * (rank + 1) * u[i] * v[j];
      }
      at::Tensor flat = ToTensor(matrix);
      ASSERT_TRUE(reducer->AllReduceSum(pg, flat, kTimeout).ok());
      outputs[rank] = ToFloats(flat);
    }
  });
  ExpectBitwiseEqual(outputs);
  const Floats u = RandomGrad(100, n), v = RandomGrad(101, m);
  const double scale = world * (world + 1) / 2.0;
  std::vector<double> diff(n * m), truth(n * m);
  for (int64_t i = 0; i < n; ++i) {
    for (int64_t j = 0; j < m; ++j) {
      truth[i * m + j] = scale * u[i] * v[j];
      diff[i * m + j] = outputs[0][i * m + j] - truth[i * m + j];
    }
  }
  EXPECT_LT(Norm(diff), 1e-4 * Norm(truth));
}

INSTANTIATE_TEST_SUITE_P(WorldSizes, CompressionPowerSgdTest, ::testing::Values(1, 2, 3, 4));

TEST(CompressionPowerSgd, BigMatrixBytesMatchRankRatio) {
  CompressionOptions o;
  o.kind = Compression::kPowerSgd;
  o.powersgd_rank = 4;
  const int64_t n = 256, m = 128;
  std::vector<uint64_t> bytes(2);
  RunRanks(2, [&](int rank, c10d::ProcessGroup& pg) {
    auto reducer = MakeReducer(o, {{0, {n, m}}}, n * m);
    ASSERT_TRUE(reducer);
    auto stats = reducer->AllReduceSum(pg, ToTensor(RandomGrad(rank, n * m)), kTimeout);
    ASSERT_TRUE(stats.ok()) << stats.status().ToString();
    bytes[rank] = stats->bytes_sent;
  });
  EXPECT_EQ(bytes[0], uint64_t(4 * 4 * (n + m)));  // r (n + m) / (n m) = 0.047 of 131072
  EXPECT_EQ(bytes[1], bytes[0]);
}

TEST(CompressionReducer, WarmupStepsUsePlainAllReduce) {
  CompressionOptions o;
  o.kind = Compression::kTopK;
  o.topk_ratio = 0.1;
  o.warmup_steps = 2;
  std::vector<std::vector<uint64_t>> bytes(2);
  RunRanks(2, [&](int rank, c10d::ProcessGroup& pg) {
    auto reducer = MakeReducer(o, {}, 50);
    ASSERT_TRUE(reducer);
    for (int step = 0; step < 3; ++step) {
      auto stats = reducer->AllReduceSum(pg, ToTensor(RandomGrad(rank, 50)), kTimeout);
      ASSERT_TRUE(stats.ok());
      bytes[rank].push_back(stats->bytes_sent);
    }
    EXPECT_EQ(reducer->ExportState().step, 3);
  });
  EXPECT_EQ(bytes[0], (std::vector<uint64_t>{200, 200, 40}));
}

// Gradients far below fp16's normal range (1e-6 here: subnormal, 3 bits of
// precision, if cast as they are) keep fp16's 11 bits through the scaling.
TEST(CompressionReducer, Fp16KeepsTinyGradientsPrecise) {
  constexpr int64_t kNumel = 4096;
  CompressionOptions o;
  o.kind = Compression::kFp16;
  std::vector<at::Tensor> in(2), out(2);
  RunRanks(2, [&](int rank, c10d::ProcessGroup& pg) {
    auto reducer = MakeReducer(o, {}, kNumel);
    ASSERT_TRUE(reducer);
    in[rank] = ToTensor(RandomGrad(rank, kNumel)) * 1e-6;
    out[rank] = in[rank].clone();
    ASSERT_TRUE(reducer->AllReduceSum(pg, out[rank], kTimeout).ok());
  });
  at::Tensor exact = in[0] + in[1];
  double rel = ((out[0] - exact).abs().max() / exact.abs().max()).item<double>();
  EXPECT_LT(rel, 2e-3);
  EXPECT_TRUE(at::equal(out[0], out[1]));
}

// bytes_sent per step on a small CNN's layout (conv 16x1x5x5, conv 32x16x5x5, fc 10x512 and
// biases; 18,378 floats) with the default options.
TEST(CompressionReducer, BytesSentPerChoiceOnCnnLayout) {
  const std::vector<TensorSpan> layout = {{0, {16, 1, 5, 5}},    {400, {16}},
                                          {416, {32, 16, 5, 5}}, {13216, {32}},
                                          {13248, {10, 512}},    {18368, {10}}};
  constexpr int64_t kNumel = 18378;
  const std::pair<Compression, uint64_t> expected[] = {
      {Compression::kNone, 4 * kNumel},
      {Compression::kFp16, 2 * kNumel + 8},  // + each rank's peak, for the common scale
      {Compression::kBf16, 2 * kNumel},
      // plain 458 + P (32x4 + 10x4) + Q (400x4 + 512x4) floats: 23% of none
      {Compression::kPowerSgd, 4 * (458 + 128 + 40 + 1600 + 2048)},
      {Compression::kTopK, 8 * 184},  // k = ceil(0.01 * 18378): 2% of none
  };
  for (const auto& [kind, bytes] : expected) {
    SCOPED_TRACE(std::string(CompressionName(kind)));
    CompressionOptions o;
    o.kind = kind;
    RunRanks(2, [&](int rank, c10d::ProcessGroup& pg) {
      auto reducer = MakeReducer(o, layout, kNumel);
      ASSERT_TRUE(reducer);
      auto stats = reducer->AllReduceSum(pg, ToTensor(RandomGrad(rank, kNumel)), kTimeout);
      ASSERT_TRUE(stats.ok()) << stats.status().ToString();
      EXPECT_EQ(stats->bytes_sent, bytes);
    });
  }
}

// A peer that never joins the collective: the others return Aborted within the timeout plus
// slack, and leave their gradients and error-feedback state as they were.
void ExpectAbortedWhenPeerIsMissing(Compression kind) {
  SCOPED_TRACE(std::string(CompressionName(kind)));
  constexpr milliseconds kShort{500};
  constexpr int kWorld = 3;
  CompressionOptions o;
  o.kind = kind;
  o.topk_ratio = 0.2;
  o.powersgd_min_numel = 0;
  std::latch done(kWorld - 1);
  RunRanks(
      kWorld,
      [&](int rank, c10d::ProcessGroup& pg) {
        auto reducer = MakeReducer(o, {{0, {8, 5}}}, 40);
        ASSERT_TRUE(reducer);
        ASSERT_TRUE(reducer->AllReduceSum(pg, ToTensor(RandomGrad(rank, 40)), kShort).ok());
        if (rank == kWorld - 1) return done.wait();  // keeps its group alive, never calls
        struct CountDown {
          std::latch& latch;
          ~CountDown() { latch.count_down(); }
        } count_down{done};
        const ReducerState before = reducer->ExportState();
        const Floats grad = RandomGrad(rank + 10, 40);
        at::Tensor flat = ToTensor(grad);
        const auto start = std::chrono::steady_clock::now();
        auto stats = reducer->AllReduceSum(pg, flat, kShort);
        const auto elapsed = std::chrono::steady_clock::now() - start;
        ASSERT_FALSE(stats.ok());
        EXPECT_EQ(stats.status().code(), StatusCode::kAborted) << stats.status().ToString();
        EXPECT_LT(elapsed, kShort + milliseconds(3000));
        EXPECT_EQ(ToFloats(flat), grad);
        const ReducerState after = reducer->ExportState();
        EXPECT_EQ(after.step, before.step);
        EXPECT_EQ(after.error, before.error);
        EXPECT_EQ(after.powersgd_q, before.powersgd_q);
      },
      kShort);
}

TEST(CompressionReducer, MissingPeerGivesAbortedWithinTimeout) {
  ExpectAbortedWhenPeerIsMissing(Compression::kNone);
  ExpectAbortedWhenPeerIsMissing(Compression::kTopK);
  ExpectAbortedWhenPeerIsMissing(Compression::kPowerSgd);
}

}  // namespace
}  // namespace spot::dist
