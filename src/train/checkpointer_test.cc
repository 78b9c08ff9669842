#include "train/checkpointer.h"

#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <mutex>

#include "ckpt/blob_store.h"
#include "ckpt/format.h"
#include "ckpt/store.h"
#include "core/temp_dir.h"
#include "train/test_replica.h"

namespace spot::train {
namespace {

namespace fs = std::filesystem;

// The mlp on the replica's synthetic images, saving to <dir>/ck.
TrainSpec Spec(const fs::path& dir) {
  TrainSpec s = testing::ReplicaSpec("mlp", "fp32");
  s.output_dir = dir.string();
  s.checkpoint.dir = (dir / "ck").string();
  s.checkpoint.interval = "steps";
  s.checkpoint.interval_steps = 1000;
  return s;
}

at::Tensor GeneratorState() {
  at::Generator gen = at::detail::getDefaultCPUGenerator();
  std::lock_guard<std::mutex> lock(gen.mutex());
  return gen.get_state();
}

// Every parameter, buffer and optimizer record of a captured state.
void ExpectSameModelAndOptimizer(const ckpt::Container& got, const ckpt::Container& want) {
  int compared = 0;
  for (const ckpt::Record& w : want.records()) {
    if (!w.name.starts_with("model/") && !w.name.starts_with("optim/")) continue;
    const ckpt::Record* g = got.Find(w.name);
    ASSERT_NE(g, nullptr) << w.name;
    EXPECT_TRUE(g->data == w.data) << w.name << ": bytes differ";
    ++compared;
  }
  EXPECT_GT(compared, 6);
}

// Flips a byte in the middle of record `name`'s first chunk of version `id`.
void DamageRecord(const TrainSpec& spec, int64_t id, const std::string& name) {
  auto bs = ckpt::DirectoryBlobStore::Open(spec.checkpoint.dir);
  ASSERT_TRUE(bs.ok()) << bs.status().ToString();
  const std::string file = ckpt::CheckpointStore::DataFileName(id);
  uint64_t at = 0;
  {
    auto f = ckpt::CheckpointFile::Open(**bs, file);
    ASSERT_TRUE(f.ok()) << f.status().ToString();
    for (const ckpt::RecordEntry& e : f->records()) {
      if (e.name == name) at = e.chunks[0].offset + e.chunks[0].stored_bytes / 2;
    }
    ASSERT_GT(at, 0u) << "no record " << name;
  }
  std::fstream io(fs::path(spec.checkpoint.dir) / file,
                  std::ios::in | std::ios::out | std::ios::binary);
  io.seekg(static_cast<std::streamoff>(at));
  char c = 0;
  io.read(&c, 1);
  c = static_cast<char>(c ^ 0x40);
  io.seekp(static_cast<std::streamoff>(at));
  io.write(&c, 1);
  ASSERT_TRUE(io.good());
}

// Trains `steps` steps and saves; returns what was saved.
ckpt::Container TrainAndSave(testing::Replica& r, Checkpointer& k, int steps) {
  r.Steps(steps);
  auto saved = k.Save(r.Refs());
  EXPECT_TRUE(saved.ok()) << saved.status().ToString();
  EXPECT_TRUE(k.Flush().ok());
  return r.Capture();
}

// A new process's resume into `r`: a checkpointer opened on the spec's store.
Result<ResumeInfo> ResumeInto(const TrainSpec& spec, testing::Replica& r) {
  SPOT_ASSIGN_OR_RETURN(std::unique_ptr<Checkpointer> k, Checkpointer::Open(spec));
  return k->Resume(r.Refs());
}

TEST(CheckpointerTest, ResumeDecodesTheParametersStraightIntoTheModel) {
  auto tmp = TempDir::Create("spot_checkpointer_test");
  ASSERT_TRUE(tmp.ok());
  const TrainSpec spec = Spec(tmp->path());
  ckpt::Container saved;
  {
    testing::Replica a(spec);
    auto k = Checkpointer::Open(spec);
    ASSERT_TRUE(k.ok()) << k.status().ToString();
    saved = TrainAndSave(a, **k, 3);
  }
  testing::Replica b(spec);
  auto r = ResumeInto(spec, b);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->version, 1);
  EXPECT_EQ(r->step, 3);
  ExpectSameModelAndOptimizer(b.Capture(), saved);
}

TEST(CheckpointerTest, ADamagedOnlyVersionStartsFreshWithAFreshStartsWeights) {
  auto tmp = TempDir::Create("spot_checkpointer_test");
  ASSERT_TRUE(tmp.ok());
  const TrainSpec spec = Spec(tmp->path());
  {
    testing::Replica a(spec);
    auto k = Checkpointer::Open(spec);
    ASSERT_TRUE(k.ok()) << k.status().ToString();
    TrainAndSave(a, **k, 3);
  }
  // Records decode largest first, straight into the model: the smallest
  // parameter fails its check after the others hold the saved values, and
  // itself holds what the damaged file gave it.
  DamageRecord(spec, 1, "model/fc3.bias");
  testing::Replica fresh(spec);  // what a run without any checkpoint starts from
  const at::Tensor fresh_weights = fresh.State().clone();
  const at::Tensor fresh_generator = GeneratorState();
  const std::vector<double> fresh_losses = fresh.Steps(3);

  testing::Replica b(spec);
  const at::Tensor generator = GeneratorState();
  auto r = ResumeInto(spec, b);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->version, -1);
  EXPECT_TRUE(at::equal(b.State(), fresh_weights)) << "not the fresh start's weights";
  EXPECT_TRUE(at::equal(GeneratorState(), generator)) << "the generator moved";
  EXPECT_TRUE(at::equal(generator, fresh_generator));
  EXPECT_EQ(b.Steps(3), fresh_losses);
}

TEST(CheckpointerTest, ADamagedNewestVersionResumesTheOlderOneBitwise) {
  auto tmp = TempDir::Create("spot_checkpointer_test");
  ASSERT_TRUE(tmp.ok());
  TrainSpec spec = Spec(tmp->path());
  spec.checkpoint.delta = "none";  // two full versions
  ckpt::Container older;
  {
    testing::Replica a(spec);
    auto k = Checkpointer::Open(spec);
    ASSERT_TRUE(k.ok()) << k.status().ToString();
    older = TrainAndSave(a, **k, 2);
    TrainAndSave(a, **k, 2);
  }
  DamageRecord(spec, 2, "model/fc3.bias");
  testing::Replica b(spec);
  auto r = ResumeInto(spec, b);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->version, 1);
  EXPECT_EQ(r->step, 2);
  ExpectSameModelAndOptimizer(b.Capture(), older);
}

}  // namespace
}  // namespace spot::train
