// Threads as ranks (Gloo's own testing habit): real Gloo process groups over
// an in-memory store, world sizes swept 1-8.
#include <ATen/ATen.h>
#include <fmt/format.h>
#include <gtest/gtest.h>
#include <torch/nn/functional/loss.h>
#include <torch/optim/adam.h>

#include <future>
#include <mutex>
#include <thread>
#include <torch/csrc/distributed/c10d/PrefixStore.hpp>
#include <torch/csrc/distributed/c10d/ProcessGroupGloo.hpp>

#include "dist/c10d_stores.h"
#include "dist/compression.h"
#include "dist/rendezvous.h"
#include "dist/state_sync.h"
#include "train/model.h"
#include "train/partition.h"

namespace spot::dist {
namespace {

using std::chrono::milliseconds;
using train::Slice;
using train::SplitBatch;

// Runs fn(rank, group) on `world` threads, each with its own Gloo group
// formed through the rendezvous over one in-memory KvStore (the same code
// path as the workers, with KvC10dStore standing in for TCPStore).
template <typename Fn>
void RunRanks(int world, Fn fn, milliseconds timeout = milliseconds(5000)) {
  std::shared_ptr<KvStore> kv = NewMemoryKvStore(milliseconds(2000));
  auto group_store = NewKvC10dStore(kv, "c10d/", timeout);
  std::vector<std::thread> threads;
  for (int i = 0; i < world; ++i) {
    threads.emplace_back([&, i] {
      Rendezvous r(
          kv.get(),
          {.job = "t", .min_workers = world, .max_workers = world, .poll = milliseconds(1)},
          fmt::format("w{}", i));
      Result<Generation> g = r.Join({});
      ASSERT_TRUE(g.ok()) << g.status().message();
      auto o = c10d::ProcessGroupGloo::Options::create(timeout);
      o->devices.push_back(c10d::ProcessGroupGloo::createDeviceForHostname("127.0.0.1"));
      auto store = c10::make_intrusive<c10d::PrefixStore>(g->store_prefix("t"), group_store);
      c10d::ProcessGroupGloo pg(store, g->rank, g->world_size(), o);
      fn(g->rank, pg);
    });
  }
  for (std::thread& t : threads) t.join();
}

// A fixed batch of 48 random "images" and labels, the same in every thread.
struct Batch {
  at::Tensor x, y;
};
Batch MakeBatch() {
  at::manual_seed(11);
  return {at::randn({48, 1, 28, 28}), at::randint(0, 10, {48}, at::kLong)};
}

at::Tensor FlatGrad(train::Net& m) {
  std::vector<at::Tensor> g;
  for (const at::Tensor& p : m.parameters()) g.push_back(p.grad().reshape({-1}));
  return at::cat(g);
}

// The gradient of the mean loss over the samples [begin, end) of a batch of
// `total`, as each rank computes its share (dropout off: eval mode).
// Models are built under a lock: the threads share LibTorch's generator.
std::mutex g_model_mu;

std::shared_ptr<train::Net> SeededModel(uint64_t seed) {
  std::lock_guard<std::mutex> l(g_model_mu);
  at::manual_seed(seed);
  return train::MakeModel("mlp");
}

at::Tensor ShareGradient(const Batch& b, Slice part, int64_t total) {
  std::shared_ptr<train::Net> m = SeededModel(5);
  m->eval();
  m->zero_grad();
  at::Tensor loss =
      at::cross_entropy_loss(m->forward(b.x.slice(0, part.begin, part.end)),
                             b.y.slice(0, part.begin, part.end), {}, at::Reduction::Sum) /
      static_cast<double>(total);
  loss.backward();
  return FlatGrad(*m);
}

TEST(ElasticThreadsTest, ShareWeightedSumIsTheSingleProcessGradientForWorldsOneToEight) {
  const Batch batch = MakeBatch();
  const at::Tensor reference = ShareGradient(batch, {0, 48}, 48);
  for (int world = 1; world <= 8; ++world) {
    SCOPED_TRACE(fmt::format("world {}", world));
    std::vector<at::Tensor> results(world);
    // Unequal weights too: the split must not change the mathematics.
    std::vector<double> weights(world);
    for (int r = 0; r < world; ++r) weights[r] = 1.0 + r % 3;
    std::vector<Slice> parts = SplitBatch({0, 48}, weights);
    RunRanks(world, [&](int rank, c10d::ProcessGroup& pg) {
      at::Tensor g = ShareGradient(batch, parts[rank], 48);
      auto reducer = GradientReducer::Create({}, {}, g.numel());
      ASSERT_TRUE(reducer.ok());
      ASSERT_TRUE((*reducer)->AllReduceSum(pg, g, milliseconds(5000)).ok());
      results[rank] = g;
    });
    for (int r = 0; r < world; ++r) {
      EXPECT_TRUE(at::equal(results[r], results[0])) << "rank " << r << " differs from rank 0";
    }
    double err = (results[0] - reference).abs().max().item<double>();
    double scale = reference.abs().max().item<double>();
    EXPECT_GT(scale, 1e-3);
    EXPECT_LT(err, 1e-5 * scale) << "the sum depends on the world size beyond rounding";
  }
}

TEST(ElasticThreadsTest, BroadcastStateMakesJoinersBitwiseEqual) {
  for (int world : {2, 3, 5}) {
    SCOPED_TRACE(fmt::format("world {}", world));
    std::vector<uint64_t> hashes(world);
    std::vector<int64_t> steps(world);
    RunRanks(world, [&](int rank, c10d::ProcessGroup& pg) {
      std::shared_ptr<train::Net> m = SeededModel(100 + rank);  // every rank starts different
      torch::optim::Adam opt(m->parameters(), torch::optim::AdamOptions(1e-3));
      train::TrainerCounters c;
      c.optimizer = "adam";
      if (rank == world - 1) {  // the survivor: has taken 3 Adam steps
        Batch b = MakeBatch();
        for (int s = 0; s < 3; ++s) {
          opt.zero_grad();
          at::cross_entropy_loss(m->forward(b.x), b.y).backward();
          opt.step();
        }
        c.step = 3;
      }
      TrainRefs refs{m.get(), &opt, "adam", &c};
      Result<uint64_t> bytes = BroadcastState(pg, world - 1, refs);
      ASSERT_TRUE(bytes.ok()) << bytes.status().ToString();
      EXPECT_GT(*bytes, 235146u * 4 * 3) << "parameters and two Adam moments";
      hashes[rank] = StateHash(refs);
      steps[rank] = c.step;
    });
    for (int r = 0; r < world; ++r) {
      EXPECT_EQ(hashes[r], hashes[world - 1]) << "rank " << r;
      EXPECT_EQ(steps[r], 3);
    }
  }
}

TEST(ElasticThreadsTest, ACollectiveWithALostPeerFailsWithinTheTimeout) {
  // Rank 2 is alive but never joins the all-reduce (a cut link looks like
  // this: no error, just silence); the others must get Aborted at the
  // timeout, not hang.
  const milliseconds timeout(1000);
  std::vector<Status> got(3);
  std::vector<double> waited(3);
  RunRanks(
      3,
      [&](int rank, c10d::ProcessGroup& pg) {
        if (rank == 2) {
          std::this_thread::sleep_for(milliseconds(2500));
          return;
        }
        at::Tensor t = at::ones({1000});
        auto reducer = GradientReducer::Create({}, {}, t.numel());
        auto t0 = std::chrono::steady_clock::now();
        got[rank] = (*reducer)->AllReduceSum(pg, t, timeout).status();
        waited[rank] = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      },
      timeout);
  for (int r : {0, 1}) {
    EXPECT_EQ(got[r].code(), StatusCode::kAborted) << got[r].message();
    EXPECT_GE(waited[r], 0.9) << "rank " << r;
    EXPECT_LT(waited[r], 2.0) << "rank " << r << " hung past the timeout";
  }
}

}  // namespace
}  // namespace spot::dist
