#include "train/step_runner.h"

#include <ATen/ATen.h>
#include <gtest/gtest.h>
#include <torch/utils.h>

#include <algorithm>
#include <cmath>
#include <optional>
#include <set>

#include "core/temp_dir.h"
#include "train/checkpointer.h"
#include "train/model.h"
#include "train/partition.h"
#include "train/sampler.h"
#include "train/test_replica.h"

namespace spot::train {
namespace {

// A small job on synthetic images: the mlp over 40 samples in batches of 16.
TensorSet FortySamples() {
  TensorSet data;
  data.images = at::arange(40 * 784, at::kFloat).reshape({40, 1, 28, 28}).mul(0.0007).sin();
  data.labels = at::arange(40, at::kLong).remainder(10);
  return data;
}

struct Replica : testing::Replica {
  explicit Replica(TrainSpec s) : testing::Replica(std::move(s), FortySamples()) {}
};

TrainSpec SmallSpec() {
  TrainSpec s;
  s.model = "mlp";
  s.batch_size = 16;
  s.epochs = 2;
  s.seed = 7;
  s.optimizer.lr = 0.05;
  return s;
}

TEST(StepRunnerTest, BatchesCoverEachEpochOnceAndTheCountersFollow) {
  Replica r(SmallSpec());
  EXPECT_EQ(r.runner->steps_per_epoch(), 3);  // 16 + 16 + 8
  EXPECT_EQ(r.runner->total_steps(), 6);
  std::vector<std::pair<int64_t, int64_t>> seen;
  int epochs_done = 0;
  while (!r.runner->Finished()) {
    LocalSync sync;
    Slice b = r.runner->NextBatch();
    seen.push_back({b.begin, b.end});
    auto out = r.runner->Run(b, b, sync);
    ASSERT_TRUE(out.ok() && out->committed);
    EXPECT_GT(out->loss, 0);
    BatchEnd e = r.runner->Advance(b);
    epochs_done += e.epoch_done;
    EXPECT_EQ(e.last, r.counters.step == 6);
  }
  EXPECT_EQ(epochs_done, 2);
  EXPECT_EQ(r.counters.step, 6);
  EXPECT_EQ(r.counters.epoch, 2);
  std::vector<std::pair<int64_t, int64_t>> want = {{0, 16}, {16, 32}, {32, 40},
                                                   {0, 16}, {16, 32}, {32, 40}};
  EXPECT_EQ(seen, want);
}

// Data held in shards (an elastic worker's image folder): each rank's part of
// a batch is exactly the batch's samples of the shards it owns, the ranks'
// parts tile the batch, and one owner of everything changes nothing.
TEST(StepRunnerTest, PartsByShardOwnerTileEveryBatchWithEachRanksOwnSamples) {
  const int64_t shard = 5;  // 8 shards of the 40 samples
  const std::vector<int32_t> owners = ShardOwners(8, 8, {"x", "y"});
  ASSERT_NE(std::count(owners.begin(), owners.end(), 0), 0);
  ASSERT_NE(std::count(owners.begin(), owners.end(), 1), 0);
  Replica r0(SmallSpec()), r1(SmallSpec());
  r0.runner->SetShardOwners(shard, owners, 0);
  r1.runner->SetShardOwners(shard, owners, 1);
  EXPECT_TRUE(r0.runner->PartsByOwner());
  for (int64_t k = 0; k < 6; ++k) {  // two epochs
    const Slice b = r0.runner->NextBatch();
    const Slice p0 = r0.runner->OwnPart(b), p1 = r1.runner->OwnPart(b);
    EXPECT_EQ(p0.begin, b.begin) << "batch " << k;
    EXPECT_EQ(p0.end, p1.begin) << "batch " << k;
    EXPECT_EQ(p1.end, b.end) << "batch " << k;
    const std::vector<int64_t> order = EpochOrder(7, r0.counters.epoch, 40);
    int64_t of0 = 0;
    for (int64_t p = b.begin; p < b.end; ++p) of0 += owners[order[p] / shard] == 0;
    EXPECT_EQ(p0.size(), of0) << "batch " << k;
    LocalSync sync;
    ASSERT_TRUE(r0.runner->Run(b, p0, sync).ok());
    ASSERT_TRUE(r1.runner->Run(b, p1, sync).ok());
    r0.runner->Advance(b);
    r1.runner->Advance(b);
  }
  Replica plain(SmallSpec()), one(SmallSpec());
  one.runner->SetShardOwners(shard, std::vector<int32_t>(8, 0), 0);
  for (int i = 0; i < 4; ++i) {
    const Slice b = one.runner->NextBatch();
    EXPECT_EQ(one.runner->OwnPart(b).size(), b.size());
    EXPECT_EQ(one.Step().loss, plain.Step().loss) << "step " << i;
  }
}

TEST(StepRunnerTest, TheSameSpecTrainsBitwiseTheSameAndMicroBatchesAgree) {
  // Dropout included: its draws are seeded from the step and the samples.
  Replica a(SmallSpec()), b(SmallSpec());
  for (int i = 0; i < 4; ++i) EXPECT_EQ(a.Step().loss, b.Step().loss) << "step " << i;
  EXPECT_EQ(a.Weights(), b.Weights());

  // Without dropout, four micro-batches a step are the same mathematics as
  // one (the summed loss over the batch size), rounded differently.
  TrainSpec micro = SmallSpec();
  micro.distributed.accumulation_steps = 4;
  Replica whole(SmallSpec()), parts(micro);
  whole.model->eval();
  parts.model->eval();
  for (int i = 0; i < 4; ++i) {
    EXPECT_NEAR(parts.Step().loss, whole.Step().loss, 1e-5) << "step " << i;
  }
  std::vector<float> w = whole.Weights(), p = parts.Weights();
  for (size_t k = 0; k < w.size(); k += 97) EXPECT_NEAR(p[k], w[k], 1e-5) << k;
}

// Batches made ahead on the prefetch thread are the batches made on demand:
// with augmentation, micro-batches and this replica's share of a world of
// three, both runs take the same losses and weights, step for step; the
// prefetched one found nearly every micro-batch ready.
TEST(StepRunnerTest, PrefetchedBatchesTrainBitForBitAsBatchesMadeOnDemand) {
  auto spec = [](bool prefetch) {
    TrainSpec s = SmallSpec();
    s.prefetch = prefetch ? "true" : "false";
    s.augment.crop_padding = 2;
    s.augment.flip = true;
    s.augment.brightness = 0.3;
    s.augment.contrast = 0.3;
    s.distributed.accumulation_steps = 2;
    return s;
  };
  // Two intra-op threads for the step, one on the prefetch thread: the
  // batches must not depend on that.
  const int threads = at::get_num_threads();
  at::set_num_threads(2);
  Replica ahead(spec(true)), inline_(spec(false));
  while (!ahead.runner->Finished()) {
    std::vector<double> losses;
    for (Replica* r : {&ahead, &inline_}) {
      LocalSync sync;
      const Slice batch = r->runner->NextBatch();
      const Slice mine = SplitBatch(batch, {1.0, 1.0, 1.0})[1];
      auto out = r->runner->Run(batch, mine, sync);
      ASSERT_TRUE(out.ok() && out->committed);
      losses.push_back(out->loss);
      r->runner->Advance(batch);
    }
    EXPECT_EQ(losses[0], losses[1]) << "step " << ahead.counters.step;
  }
  EXPECT_EQ(ahead.Weights(), inline_.Weights());
  EXPECT_EQ(inline_.runner->prefetch_hits() + inline_.runner->prefetch_misses(), 0);
  // 6 steps of 2 micro-batches. Not foreseen: each epoch's first (its order
  // is not made before it starts) and the first of its short last batch (split
  // 3, 3, 2, not at the offset and size of this replica's 5 of 16).
  EXPECT_EQ(ahead.runner->prefetch_hits(), 8);
  EXPECT_EQ(ahead.runner->prefetch_misses(), 4);
  at::set_num_threads(threads);
}

TEST(StepRunnerTest, ADivergedLossIsJudgedBeforeItTouchesTheWeights) {
  TrainSpec s = SmallSpec();
  s.faults.nan_loss_at_step = 3;  // the third batch (0-based 2)
  Replica r(s);
  r.Step();
  r.Step();
  const std::vector<float> before = r.Weights();
  StepOutcome bad = r.Step();
  EXPECT_FALSE(bad.committed);
  EXPECT_EQ(bad.anomaly, "loss is nan");
  EXPECT_EQ(bad.batch, 2);
  EXPECT_EQ(r.counters.step, 2);
  EXPECT_EQ(r.Weights(), before);

  // A spike: judged once the moving average has warmed up.
  TrainSpec sp = SmallSpec();
  sp.rollback.warmup_steps = 2;
  sp.faults.spike_loss_at_step = 4;
  Replica q(sp);
  for (int i = 0; i < 3; ++i) EXPECT_TRUE(q.Step().committed);
  StepOutcome spike = q.Step();
  EXPECT_FALSE(spike.committed);
  EXPECT_NE(spike.anomaly.find("loss spike"), std::string::npos) << spike.anomaly;
  // With rollback off a spike is not judged (a NaN always is).
  sp.rollback.enabled = false;
  Replica off(sp);
  for (int i = 0; i < 4; ++i) EXPECT_TRUE(off.Step().committed);
}

TEST(StepRunnerTest, RollbackRestoresAnEarlierVersionAndSkipsTheBatchForGood) {
  auto tmp = TempDir::Create("spot_step_runner_test");
  ASSERT_TRUE(tmp.ok());
  TrainSpec s = SmallSpec();
  s.output_dir = tmp->path().string();
  s.checkpoint.dir = (tmp->path() / "ck").string();
  s.checkpoint.interval = "steps";
  s.checkpoint.interval_steps = 2;
  s.faults.nan_loss_at_step = 4;
  Replica r(s);
  auto ckpt = Checkpointer::Open(r.spec);
  ASSERT_TRUE(ckpt.ok()) << ckpt.status().message();
  Checkpointer& k = **ckpt;
  ASSERT_TRUE(k.Save(r.Refs()).ok());  // step 0
  StepOutcome out;
  while ((out = r.Step()).committed) {
    if (k.Due(r.counters.step)) {
      ASSERT_TRUE(k.Save(r.Refs()).ok());
    }
  }
  EXPECT_EQ(r.counters.step, 3);
  auto e = k.Rollback(r.Refs(), out.batch, out.anomaly);
  ASSERT_TRUE(e.ok()) << e.status().message();
  EXPECT_EQ(e->restored_step, 2);
  EXPECT_EQ(e->at_step, 4);
  EXPECT_EQ(r.counters.step, 2);
  EXPECT_EQ(r.counters.rollbacks, 1);
  EXPECT_EQ(r.counters.skipped_batches, std::vector<int64_t>{3});
  r.runner->Reset();
  // Batch 2 trains again; batch 3 (the one that diverged) is passed over.
  EXPECT_TRUE(r.Step().committed);
  EXPECT_TRUE(r.runner->NextIsSkipped());
  r.runner->Advance(r.runner->NextBatch());
  EXPECT_FALSE(r.runner->NextIsSkipped());
  EXPECT_TRUE(r.Step().committed);
  EXPECT_EQ(r.counters.step, 4);

  // Used up: the run cannot go on, and says why.
  Status st = RollbackAllowed(r.spec.rollback, r.spec.rollback.max_rollbacks, "loss is nan", 9);
  EXPECT_EQ(st.code(), StatusCode::kDataLoss);
  EXPECT_NE(st.message().find("after 5 rollbacks"), std::string::npos) << st.message();
}

// param_groups: fc1 frozen for the first two steps (no gradient, no state,
// unchanged weights), then trained; fc3 at a tenth of the learning rate.
TEST(StepRunnerTest, ParamGroupsFreezeAndScaleTheirLayers) {
  TrainSpec spec = SmallSpec();
  spec.optimizer.type = "adam";
  spec.param_groups = {{.prefix = "fc1.", .frozen_until = 2}, {.prefix = "fc3.", .lr_scale = 0.1}};
  Replica r(spec);
  auto& groups = r.optimizer->param_groups();
  ASSERT_EQ(groups.size(), 3u);  // fc1, fc3, the rest (fc2)
  EXPECT_EQ(groups[0].params().size(), 2u);
  const at::Tensor fc1 = r.model->named_parameters()["fc1.weight"];
  const at::Tensor fc2 = r.model->named_parameters()["fc2.weight"];
  const at::Tensor fc1_start = fc1.clone(), fc2_start = fc2.clone();
  for (int s = 0; s < 2; ++s) ASSERT_TRUE(r.Step().committed);
  EXPECT_TRUE(fc1.equal(fc1_start)) << "frozen";
  EXPECT_FALSE(fc1.requires_grad());
  EXPECT_FALSE(fc2.equal(fc2_start));
  EXPECT_EQ(r.optimizer->state().count(c10::guts::to_string(fc1.unsafeGetTensorImpl())), 0u);
  const StepOutcome third = r.Step();
  ASSERT_TRUE(third.committed);
  EXPECT_FALSE(fc1.equal(fc1_start)) << "unfrozen at step 2";
  EXPECT_DOUBLE_EQ(groups[1].options().get_lr(), third.lr * 0.1);
  EXPECT_DOUBLE_EQ(groups[2].options().get_lr(), third.lr);

  spec.param_groups = {{.prefix = "conv."}};
  Replica none(SmallSpec());
  auto bad = MakeOptimizer(spec, *none.model);
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("no parameter of model mlp"), std::string::npos)
      << bad.status().message();
}

}  // namespace
}  // namespace spot::train

namespace spot::train {
namespace {

TEST(StepRunnerTest, LayerGroupsAreModulesAtMostTwoLevelsDeep) {
  EXPECT_EQ(LayerGroupOf("fc1.weight"), "fc1");
  EXPECT_EQ(LayerGroupOf("blocks.0.attn.qkv.weight"), "blocks.0");
  EXPECT_EQ(LayerGroupOf("a.b.c"), "a.b");
  EXPECT_EQ(LayerGroupOf("weight"), "model");
}

// Per layer group on the steps asked for: gradient norms that add up (in
// squares) to the global one, and for plain SGD an update of lr x gradient;
// the statistics change nothing in training.
TEST(StepRunnerTest, LayerStatsAddUpAndLeaveTrainingBitwiseUnchanged) {
  TrainSpec spec = testing::ReplicaSpec("mlp", "fp32");
  spec.optimizer.type = "sgd";
  spec.optimizer.lr = 0.1;
  spec.optimizer.momentum = 0;
  testing::Replica with(spec), without(spec);
  with.runner->set_layer_stats_every(2);
  for (int i = 0; i < 3; ++i) {
    LocalSync sync;
    Slice batch = with.runner->NextBatch();
    auto out = with.runner->Run(batch, batch, sync, /*want_grad_norm=*/true);
    ASSERT_TRUE(out.ok() && out->committed);
    with.runner->Advance(batch);
    without.Step();
    if (i == 1) {
      EXPECT_TRUE(out->layers.empty());
      continue;
    }
    std::set<std::string> want;
    for (const auto& p : with.model->named_parameters()) want.insert(LayerGroupOf(p.key()));
    std::set<std::string> got;
    double sq = 0;
    for (const LayerGroupStats& l : out->layers) {
      got.insert(l.group);
      sq += l.grad_norm * l.grad_norm;
      ASSERT_GT(l.weight_norm, 0);
      EXPECT_NEAR(l.update_ratio, 0.1 * l.grad_norm / l.weight_norm, 1e-4 * l.update_ratio)
          << l.group;
    }
    EXPECT_EQ(got, want);
    EXPECT_GE(got.size(), 2u);
    EXPECT_NEAR(std::sqrt(sq), out->grad_norm, 1e-5 * out->grad_norm);
  }
  EXPECT_TRUE(at::equal(with.State(), without.State()));
}

}  // namespace
}  // namespace spot::train
