// GlooGroupBuilder with threads as ranks over an in-memory store (the same
// code path as the workers, with KvC10dStore standing in for TCPStore).
#include "dist/gloo_group.h"

#include <ATen/ATen.h>
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <thread>
#include <torch/csrc/distributed/c10d/PrefixStore.hpp>

#include "dist/c10d_stores.h"
#include "dist/rendezvous.h"

namespace spot::dist {
namespace {

using std::chrono::milliseconds;

struct RankResult {
  Status status;
  size_t abandoned = 0;
  double sum = 0;  // of an all-reduce over the group built
};

// `world` threads join one generation; rank i of them runs, unless `dies(i)`,
// which leaves the rendezvous (its liveness lapses at once) without building
// the group. The others build it with `timeout` and all-reduce a 1.
std::vector<RankResult> BuildGroups(int world, const std::function<bool(int)>& dies,
                                    milliseconds timeout) {
  std::shared_ptr<KvStore> kv = NewMemoryKvStore(milliseconds(2000));
  auto group_store = NewKvC10dStore(kv, "c10d/", timeout);
  std::vector<RankResult> out(world);
  std::vector<std::thread> threads;
  for (int i = 0; i < world; ++i) {
    threads.emplace_back([&, i] {
      const std::string me = fmt::format("w{}", i);
      Rendezvous r(
          kv.get(),
          {.job = "t", .min_workers = world, .max_workers = world, .poll = milliseconds(1)}, me);
      Result<Generation> g = r.Join({});
      ASSERT_TRUE(g.ok()) << g.status().message();
      if (dies(i)) {
        ASSERT_TRUE(r.Leave().ok());
        return;
      }
      auto gone = [&] { return FirstMemberGone(kv.get(), *g, me); };
      GlooGroupBuilder builder;
      auto store = c10::make_intrusive<c10d::PrefixStore>(g->store_prefix("t"), group_store);
      auto pg = builder.Build(store, g->rank, g->world_size(),
                              {.timeout = timeout, .poll = milliseconds(20)}, gone);
      out[i].status = pg.status();
      out[i].abandoned = builder.abandoned();
      if (!pg.ok()) return;
      std::vector<at::Tensor> t{at::ones({1})};
      (*pg)->allreduce(t)->wait();
      out[i].sum = t[0].item<double>();
    });
  }
  for (std::thread& t : threads) t.join();
  return out;
}

TEST(GlooGroupBuilder, BuildsTheGroupWhenEveryMemberIsAlive) {
  std::vector<RankResult> r = BuildGroups(
      3, [](int) { return false; }, milliseconds(5000));
  for (int i = 0; i < 3; ++i) {
    EXPECT_TRUE(r[i].status.ok()) << i << ": " << r[i].status.message();
    EXPECT_EQ(r[i].abandoned, 0u) << i;
    EXPECT_EQ(r[i].sum, 3) << i;
  }
}

// A member that died after the rendezvous formed the generation and before
// it published its address: the others give up on the build once its
// liveness lapses, naming it, instead of failing on Gloo's timeout (4 s, which
// the abandoned builds still run out on their threads before the builders
// are destroyed).
TEST(GlooGroupBuilder, AMemberGoneWhileTheGroupIsBuiltIsNotWaitedFor) {
  std::vector<RankResult> r = BuildGroups(
      3, [](int i) { return i == 2; }, milliseconds(4000));
  for (int i = 0; i < 2; ++i) {
    EXPECT_EQ(r[i].status.code(), StatusCode::kAborted) << i;
    EXPECT_NE(r[i].status.message().find(
                  "member w2 is gone (its liveness lapsed) while the group was being built"),
              std::string::npos)
        << i << ": " << r[i].status.message();
    EXPECT_EQ(r[i].abandoned, 1u) << i;
  }
}

}  // namespace
}  // namespace spot::dist
