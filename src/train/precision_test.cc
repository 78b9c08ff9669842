// Mixed precision through the step runner: fp16's loss scaling (on the CPU
// its arithmetic stays float32: LibTorch has no CPU half matrix products) and
// auto's per-layer selection.
#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>

#include "train/layer_precision.h"
#include "train/test_replica.h"

namespace spot::train {
namespace {

using testing::Replica;
using testing::ReplicaSpec;

// Scaling by a power of two and back is exact in float32: fp16's scaler on a
// float32 model trains bit for bit as fp32 does, while its scale grows.
TEST(PrecisionTest, LossScalingByPowersOfTwoIsExactInFloat32) {
  TrainSpec fp16 = ReplicaSpec("mlp", "fp16");
  fp16.precision_options.growth_interval = 2;
  Replica a(ReplicaSpec("mlp", "fp32")), b(fp16);
  for (int i = 0; i < 5; ++i) {
    const StepOutcome sa = a.Step(), sb = b.Step();
    EXPECT_EQ(sa.loss, sb.loss) << "step " << i;
    EXPECT_FALSE(sb.overflow);
    EXPECT_EQ(sb.loss_scale, 65536.0 * (1 << (i / 2)));
  }
  EXPECT_TRUE(a.State().equal(b.State()));
  EXPECT_EQ(b.counters.loss_scale, 65536.0 * 4);
  EXPECT_EQ(b.counters.loss_scale_growth_tracker, 1);
  EXPECT_EQ(a.counters.loss_scale, 0) << "fp32 keeps no scale";
}

// A sync that leaves an inf in one gradient on chosen steps, as an fp16
// overflow would.
class OverflowingSync final : public GradientSync {
 public:
  OverflowingSync(Net* model, std::vector<int> at) : model_(model), at_(std::move(at)) {}
  Result<GlobalLoss> Sync(const ReplicaLoss& mine) override {
    if (std::find(at_.begin(), at_.end(), calls_++) != at_.end()) {
      at::NoGradGuard no_grad;
      model_->parameters()[2].mutable_grad()[0][0] = std::numeric_limits<float>::infinity();
    }
    return GlobalLoss{mine.loss_sum, static_cast<double>(mine.samples)};
  }

 private:
  Net* model_;
  std::vector<int> at_;
  int calls_ = 0;
};

// An overflowed step is counted but changes no weight and no optimizer state,
// backs the scale off, and is no anomaly: no rollback. The scaler's state is
// part of the checkpoint, so a restored run continues bit for bit.
TEST(PrecisionTest, AnOverflowSkipsTheUpdateBacksOffAndResumesBitForBit) {
  TrainSpec spec = ReplicaSpec("mlp", "fp16");
  spec.precision_options.growth_interval = 3;
  Replica r(spec);
  OverflowingSync sync(r.model.get(), {1, 2});
  std::vector<StepOutcome> steps;
  std::vector<at::Tensor> states;
  for (int i = 0; i < 6; ++i) {
    const Slice batch = r.runner->NextBatch();
    auto out = r.runner->Run(batch, batch, sync);
    ASSERT_TRUE(out.ok());
    ASSERT_TRUE(out->committed) << out->anomaly;
    r.runner->Advance(batch);
    steps.push_back(*out);
    states.push_back(r.State());
  }
  EXPECT_FALSE(steps[0].overflow);
  EXPECT_TRUE(steps[1].overflow);
  EXPECT_TRUE(steps[2].overflow);
  EXPECT_TRUE(states[1].equal(states[0])) << "no update on overflow";
  EXPECT_TRUE(states[2].equal(states[0]));
  EXPECT_FALSE(states[3].equal(states[2]));
  EXPECT_EQ(steps[1].loss_scale, 65536.0);
  EXPECT_EQ(steps[2].loss_scale, 32768.0);
  EXPECT_EQ(steps[3].loss_scale, 16384.0);
  EXPECT_EQ(r.counters.step, 6) << "overflowed steps count";
  EXPECT_EQ(r.counters.loss_scale, 32768.0) << "grew after 3 clean steps";
  EXPECT_EQ(r.counters.rollbacks, 0);

  // Resume: a run captured after step 2 (scale 16384, mid-backoff) continues
  // as the uninterrupted one.
  Replica first(spec);
  OverflowingSync again(first.model.get(), {1, 2});
  for (int i = 0; i < 3; ++i) {
    const Slice batch = first.runner->NextBatch();
    ASSERT_TRUE(first.runner->Run(batch, batch, again).ok());
    first.runner->Advance(batch);
  }
  const ckpt::Container saved = first.Capture();
  TrainSpec other = spec;
  other.seed = 99;  // other initial weights, overwritten by the restore
  Replica resumed(other);
  resumed.spec.seed = spec.seed;
  resumed.Restore(saved);
  EXPECT_EQ(resumed.counters.loss_scale, 16384.0);
  LocalSync plain;
  for (int i = 3; i < 6; ++i) {
    const Slice batch = resumed.runner->NextBatch();
    auto out = resumed.runner->Run(batch, batch, plain);
    ASSERT_TRUE(out.ok());
    resumed.runner->Advance(batch);
    EXPECT_EQ(out->loss, steps[i].loss) << "step " << i;
    EXPECT_EQ(out->loss_scale, steps[i].loss_scale) << "step " << i;
  }
  EXPECT_TRUE(resumed.State().equal(r.State()));
}

// auto keeps the batch norms float32, computes the rest in bf16, and trains
// as float32 does within bf16's rounding; the choice is made once, is the
// same for the same data and seed, and travels with the checkpoint.
TEST(PrecisionTest, AutoKeepsNormsFloat32AndTrainsCloseToFloat32) {
  Replica fp32(ReplicaSpec("cnn", "fp32")), bf16(ReplicaSpec("cnn", "bf16")),
      autop(ReplicaSpec("cnn", "auto"));
  const std::vector<double> l32 = fp32.Steps(16), l16 = bf16.Steps(16), la = autop.Steps(16);
  EXPECT_TRUE(autop.counters.precision_chosen);
  EXPECT_EQ(autop.counters.fp32_layers, (std::vector<std::string>{"bn1", "bn2"}));
  EXPECT_EQ(autop.model->layer_precision()->kept(), autop.counters.fp32_layers);
  EXPECT_FALSE(fp32.counters.precision_chosen);
  EXPECT_NE(la, l32) << "auto ran layers in bf16";
  EXPECT_NE(la, l16) << "and kept the norms float32";
  auto eval_loss = [](Replica& r) {
    const EvalSums e = EvaluateRange(*r.model, r.data, 0, r.data.size(), r.spec);
    return e.loss_sum / e.count;
  };
  const double e32 = eval_loss(fp32), ea = eval_loss(autop);
  EXPECT_LT(e32, 0.5 * l32[0]) << "float32 learned";
  EXPECT_NEAR(ea, e32, 0.05 * e32) << "auto learned as much";

  Replica again(ReplicaSpec("cnn", "auto"));
  EXPECT_EQ(again.Steps(16), la) << "deterministic";
}

TEST(PrecisionTest, AutoResumesBitForBitWithTheCheckpointsSelection) {
  // A budget at the median of the measured errors, so that the selection
  // depends on the measurement and not only on the layer kinds.
  TrainSpec spec = ReplicaSpec("gpt", "auto");
  {
    Replica probe(spec);
    std::vector<at::Tensor> batches;
    for (int64_t k = 0; k < 4; ++k) batches.push_back(probe.data.Range(16 * k, 16 * (k + 1)).first);
    std::vector<double> errors;
    for (const LayerError& e : MeasureLayerErrors(*probe.model, batches)) {
      if (e.kind == LayerKind::kCompute) errors.push_back(e.error);
    }
    std::sort(errors.begin(), errors.end());
    spec.precision_options.budget = errors[errors.size() / 2];
  }
  Replica whole(spec);
  const std::vector<double> losses = whole.Steps(8);
  const std::vector<std::string> chosen = whole.counters.fp32_layers;
  EXPECT_GT(chosen.size(), 5u) << "more than the five layer norms";
  EXPECT_LT(chosen.size(), 16u);

  Replica first(spec);
  first.Steps(4);
  const ckpt::Container saved = first.Capture();
  TrainSpec looser = spec;
  looser.precision_options.budget = 1;  // a fresh measurement would keep only the norms
  Replica resumed(looser);
  resumed.Restore(saved);
  EXPECT_EQ(resumed.Steps(4), std::vector<double>(losses.begin() + 4, losses.end()));
  EXPECT_EQ(resumed.model->layer_precision()->kept(), chosen) << "the checkpoint's selection";
  EXPECT_TRUE(resumed.State().equal(whole.State()));
}

}  // namespace
}  // namespace spot::train
