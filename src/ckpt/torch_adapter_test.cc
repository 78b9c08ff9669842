#include "ckpt/torch_adapter.h"

#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <cstring>
#include <limits>
#include <string>
#include <utility>
#include <vector>

#include "ckpt/blob_store.h"
#include "ckpt/format.h"
#include "ckpt/store.h"
#include "core/temp_dir.h"

namespace spot::ckpt {
namespace {

TEST(TorchAdapterTest, RoundTripsDtypesAndLayouts) {
  at::manual_seed(3);
  Container c;
  at::Tensor f = at::randn({3, 4});
  at::Tensor strided = at::randn({4, 3}).t();  // not contiguous
  at::Tensor d = at::randn({5}, at::kDouble);
  at::Tensor l = at::arange(7, at::kLong);
  at::Tensor scalar = at::scalar_tensor(2.5, at::kFloat);
  at::Tensor b = at::randn({6}).to(at::kBFloat16);
  ASSERT_TRUE(PutTensor(&c, "f", f).ok());
  ASSERT_TRUE(PutTensor(&c, "strided", strided).ok());
  ASSERT_TRUE(PutTensor(&c, "d", d).ok());
  ASSERT_TRUE(PutTensor(&c, "l", l).ok());
  ASSERT_TRUE(PutTensor(&c, "scalar", scalar).ok());
  ASSERT_TRUE(PutTensor(&c, "b", b).ok());
  // Through a saved checkpoint and back.
  auto tmp = TempDir::Create("spot_torch_adapter_test");
  ASSERT_TRUE(tmp.ok()) << tmp.status().ToString();
  auto store = CheckpointStore::Open({.dir = tmp->path().string()});
  ASSERT_TRUE(store.ok()) << store.status().ToString();
  auto saved = (*store)->Save(c, SaveRequest{});
  ASSERT_TRUE(saved.ok()) << saved.status().ToString();
  auto loaded = (*store)->Load(saved->id);
  ASSERT_TRUE(loaded.ok()) << loaded.status().ToString();
  const Container* dec = &loaded->container;
  for (auto [name, t] : {std::pair{"f", f},
                         {"strided", strided},
                         {"d", d},
                         {"l", l},
                         {"scalar", scalar},
                         {"b", b}}) {
    auto got = GetTensor(*dec, name);
    ASSERT_TRUE(got.ok()) << name;
    EXPECT_TRUE(at::equal(*got, t)) << name;
    at::Tensor into = at::zeros_like(t);
    ASSERT_TRUE(GetTensorInto(*dec, name, into).ok()) << name;
    EXPECT_TRUE(at::equal(into, t)) << name;
  }
  // In place into a non-contiguous destination.
  at::Tensor dst = at::zeros({3, 4}).t().contiguous().t();
  ASSERT_TRUE(GetTensorInto(*dec, "f", dst).ok());
  EXPECT_TRUE(at::equal(dst, f));
}

TEST(TorchAdapterTest, MismatchesAreReported) {
  Container c;
  ASSERT_TRUE(PutTensor(&c, "w", at::ones({2, 2})).ok());
  Status s = GetTensorInto(c, "w", at::zeros({3}));
  EXPECT_EQ(s.code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(s.message().find("f32[2, 2]"), std::string::npos) << s.message();
  EXPECT_EQ(GetTensorInto(c, "missing", at::zeros({1})).code(), StatusCode::kFailedPrecondition);
  EXPECT_FALSE(PutTensor(&c, "u", at::Tensor()).ok());
}

TEST(TorchAdapterTest, TensorCaptureMatchesPutTensor) {
  at::manual_seed(4);
  // Big enough to be split into pieces across threads, plus a channels-last
  // tensor (copied at once), an empty one and a 0-d one.
  const std::vector<std::pair<std::string, at::Tensor>> tensors = {
      {"big", at::randn({3, 1 << 19})},
      {"cl", at::randn({4, 3, 5, 5}).contiguous(at::MemoryFormat::ChannelsLast)},
      {"empty", at::randn({0, 3})},
      {"scalar", at::scalar_tensor(7, at::kLong)},
      {"small", at::randn({17}, at::kDouble)}};
  Container want, got;
  for (const auto& [name, t] : tensors) ASSERT_TRUE(PutTensor(&want, name, t).ok());
  TensorCapture cap(&got);
  for (const auto& [name, t] : tensors) ASSERT_TRUE(cap.Put(name, t).ok());
  cap.Finish();
  ASSERT_EQ(got.records().size(), want.records().size());
  for (size_t i = 0; i < want.records().size(); ++i) {
    const Record& w = want.records()[i];
    const Record& g = got.records()[i];
    EXPECT_EQ(g.name, w.name);
    EXPECT_EQ(g.dtype, w.dtype);
    EXPECT_EQ(g.shape, w.shape);
    EXPECT_TRUE(g.data == w.data) << w.name;
  }
  // The same refusals as PutTensor.
  EXPECT_FALSE(cap.Put("undefined", at::Tensor()).ok());
  EXPECT_FALSE(cap.Put("complex", at::randn({2}, at::kComplexFloat)).ok());
  EXPECT_FALSE(cap.Put("sparse", at::eye(3).to_sparse()).ok());
}

TEST(TorchAdapterTest, GetTensorIntoCopiesLargeRecordsExactly) {
  at::manual_seed(5);
  // Several 1 MiB pieces and a short last one, copied on the intra-op threads.
  const at::Tensor src = at::randn({(5 << 18) + 37});
  Container c;
  ASSERT_TRUE(PutTensor(&c, "w", src).ok());
  at::Tensor dst = at::zeros_like(src);
  ASSERT_TRUE(GetTensorInto(c, "w", dst).ok());
  EXPECT_EQ(std::memcmp(dst.data_ptr(), src.data_ptr(), src.nbytes()), 0);
  // A non-contiguous destination takes the strided path.
  const at::Tensor src2 = at::randn({1024, 768});
  Container c2;
  ASSERT_TRUE(PutTensor(&c2, "w", src2).ok());
  at::Tensor dst2 = at::zeros({768, 1024}).t();
  ASSERT_TRUE(GetTensorInto(c2, "w", dst2).ok());
  EXPECT_TRUE(at::equal(dst2, src2));
}

TEST(TorchAdapterTest, GetTensorSharesDecodedRecordsAndCopiesOthers) {
  at::manual_seed(6);
  const at::Tensor src = at::randn({300, 1000});  // several chunks
  const at::Tensor small = at::arange(10, at::kLong);
  Container c;
  ASSERT_TRUE(PutTensor(&c, "optim/0/exp_avg", src).ok());
  ASSERT_TRUE(PutTensor(&c, "step", small).ok());
  MemoryBlobStore store;
  ChunkCodec codec;
  Container ref;
  {
    auto w = store.Create("v");
    ASSERT_TRUE(w.ok());
    ASSERT_TRUE(WriteCheckpointFile(c, CodecPlan{}, &ref, 1, -1, codec, **w).ok());
    ASSERT_TRUE((*w)->Commit().ok());
  }
  auto f = CheckpointFile::Open(store, "v");
  ASSERT_TRUE(f.ok());
  at::Tensor t, s;
  const char* decoded = nullptr;
  {
    auto got = f->ReadAll(nullptr, codec);
    ASSERT_TRUE(got.ok()) << got.status().ToString();
    decoded = got->Find("optim/0/exp_avg")->data.data();
    auto a = GetTensor(*got, "optim/0/exp_avg");
    auto b = GetTensor(*got, "step");
    ASSERT_TRUE(a.ok() && b.ok());
    t = *a;
    s = *b;
  }
  // The decoded record's own memory, kept alive by the tensor.
  EXPECT_EQ(static_cast<const char*>(t.data_ptr()), decoded);
  EXPECT_TRUE(at::equal(t, src));
  EXPECT_TRUE(at::equal(s, small));
  t.add_(1);  // writable, as an optimizer's state must be
  EXPECT_TRUE(at::equal(t, src + 1));
  // A record the Container owns alone is copied.
  auto copy = GetTensor(c, "optim/0/exp_avg");
  ASSERT_TRUE(copy.ok());
  EXPECT_NE(copy->data_ptr(), static_cast<const void*>(c.records()[0].data.data()));
  EXPECT_TRUE(at::equal(*copy, src));
}

TEST(TorchAdapterTest, TensorPlacementDecodesStraightIntoTheTensors) {
  at::manual_seed(7);
  const at::Tensor w = at::randn({700, 1500});  // three chunks
  const at::Tensor bias = at::randn({1500}).to(at::kDouble);
  const at::Tensor other = at::randn({64});
  Container c;
  ASSERT_TRUE(PutTensor(&c, "model/w", w).ok());
  ASSERT_TRUE(PutTensor(&c, "model/bias", bias).ok());
  ASSERT_TRUE(PutTensor(&c, "optim/other", other).ok());
  auto tmp = TempDir::Create("spot_torch_adapter_test");
  ASSERT_TRUE(tmp.ok()) << tmp.status().ToString();
  auto store = CheckpointStore::Open({.dir = tmp->path().string()});
  ASSERT_TRUE(store.ok()) << store.status().ToString();
  ASSERT_TRUE((*store)->Save(c, SaveRequest{.step = 1}).ok());

  at::Tensor w_dst = at::zeros_like(w);
  at::Tensor bias_wrong = at::zeros({1500});  // f32, not the record's f64
  TensorPlacement place;
  place.Add("model/w", w_dst);
  place.Add("model/bias", bias_wrong);
  auto loaded = (*store)->LoadNewestValid(std::numeric_limits<int64_t>::max(), place.place());
  ASSERT_TRUE(loaded.ok()) << loaded.status().ToString();
  const Container& dec = loaded->container;
  // Decoded into the tensor itself: already restored, nothing left to copy.
  EXPECT_EQ(dec.Find("model/w")->data.data(), static_cast<const char*>(w_dst.data_ptr()));
  EXPECT_TRUE(at::equal(w_dst, w));
  ASSERT_TRUE(GetTensorInto(dec, "model/w", w_dst).ok());
  EXPECT_TRUE(at::equal(w_dst, w));
  // A tensor that does not fit is left alone, and the record decoded elsewhere.
  EXPECT_TRUE(at::equal(bias_wrong, at::zeros({1500})));
  EXPECT_NE(dec.Find("model/bias")->data.data(), static_cast<const char*>(bias_wrong.data_ptr()));
  EXPECT_EQ(GetTensorInto(dec, "model/bias", bias_wrong).code(), StatusCode::kFailedPrecondition);
  auto o = GetTensor(dec, "optim/other");
  ASSERT_TRUE(o.ok());
  EXPECT_TRUE(at::equal(*o, other));
}

TEST(TorchAdapterTest, TensorPlacementRefusesADamagedFile) {
  at::manual_seed(8);
  const at::Tensor w = at::randn({300, 1000});
  Container c;
  ASSERT_TRUE(PutTensor(&c, "model/w", w).ok());
  MemoryBlobStore store;
  ChunkCodec codec;
  Container ref;
  {
    auto out = store.Create("v");
    ASSERT_TRUE(out.ok());
    ASSERT_TRUE(WriteCheckpointFile(c, CodecPlan{}, &ref, 1, -1, codec, **out).ok());
    ASSERT_TRUE((*out)->Commit().ok());
  }
  std::string bad = store.blob("v");
  bad[100000] = static_cast<char>(bad[100000] ^ 0x04);  // inside the first chunk
  store.Set("v", bad);
  auto f = CheckpointFile::Open(store, "v");
  ASSERT_TRUE(f.ok());
  at::Tensor dst = at::zeros_like(w);
  TensorPlacement place;
  place.Add("model/w", dst);
  auto got = f->ReadAll(nullptr, codec, 0, place.place());
  ASSERT_FALSE(got.ok());
  EXPECT_EQ(got.status().code(), StatusCode::kDataLoss);
  EXPECT_NE(got.status().message().find("model/w"), std::string::npos) << got.status().message();
}

}  // namespace
}  // namespace spot::ckpt
