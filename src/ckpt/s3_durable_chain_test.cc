// Durable copies written in full (StoreOptions::durable_max_chain) in an S3
// durable tier: moto's server (aws/aws_testing.h), shared with the other S3
// tests of this binary.
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "aws/aws_testing.h"
#include "ckpt/async_saver.h"
#include "ckpt/s3_blob_store.h"
#include "ckpt/store.h"
#include "ckpt/store_testing.h"
#include "core/temp_dir.h"

namespace spot::ckpt {
namespace {

namespace fs = std::filesystem;

// The same server and part sizes as s3_blob_store_test.cc's (the first
// caller's options start it).
aws::MotoServer* Moto() { return aws::SharedMotoServer(SPOT_SOURCE_DIR, {.min_part_size = 1024}); }

// The durable tier in S3, as `checkpoint.durable_dir: s3://...` opens it
// (from the environment).
class S3DurableChainTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (Moto() == nullptr) {
      if (!HasFailure()) GTEST_SKIP() << "moto is unavailable";
      return;
    }
    static int n = 0;
    bucket_ = "spot-durable-chain-" + std::to_string(++n);
    ASSERT_TRUE(Moto()->CreateBucket(bucket_).ok());
    const aws::AwsConfig cfg = Moto()->Config();
    setenv("AWS_ENDPOINT_URL", cfg.endpoint.c_str(), 1);
    setenv("AWS_ACCESS_KEY_ID", cfg.credentials.access_key_id.c_str(), 1);
    setenv("AWS_SECRET_ACCESS_KEY", cfg.credentials.secret_access_key.c_str(), 1);
    setenv("AWS_REGION", "us-east-1", 1);
  }
  void TearDown() override {
    for (const char* var :
         {"AWS_ENDPOINT_URL", "AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_REGION"}) {
      unsetenv(var);
    }
  }
  std::string bucket_;
};

TEST_F(S3DurableChainTest, ARestartFromS3DecodesTheMaterializedChain) {
  auto dir = TempDir::Create("spot_s3_chain");
  ASSERT_TRUE(dir.ok());
  const StoreOptions options{.dir = (dir->path() / "local").string(),
                             .durable_dir = "s3://" + bucket_ + "/ckpt/job",
                             .retention = {.keep_last = 2},
                             .durable_max_chain = 1};
  {
    auto store = CheckpointStore::Open(options);
    ASSERT_TRUE(store.ok()) << store.status().ToString();
    AsyncSaverOptions o;
    o.min_delta_saving = 0;  // State(seed)s differ in every byte: deltas save nothing
    AsyncSaver saver(store->get(), o);
    for (uint64_t seed = 1; seed <= 4; ++seed) {
      auto c = saver.Acquire();
      ASSERT_TRUE(c.ok()) << c.status().ToString();
      **c = store_testing::State(seed);
      saver.Submit(*c, {.step = static_cast<int64_t>(10 * seed)});
    }
    ASSERT_TRUE(saver.Flush().ok());
    std::vector<SaveReport> done = saver.TakeCompleted();
    ASSERT_EQ(done.size(), 4u);
    for (const SaveReport& r : done) EXPECT_EQ(r.durable_full, r.info.id == 3) << r.info.id;
  }
  // Version 3 (a delta at depth 2 locally) is full in S3, and version 4 a
  // delta on it: retention keeps the last two and nothing below 3.
  auto s3 = S3BlobStore::Open("s3://" + bucket_ + "/ckpt/job", Moto()->Config());
  ASSERT_TRUE(s3.ok()) << s3.status().ToString();
  EXPECT_EQ(*(*s3)->List(), (std::vector<std::string>{"ckpt-000003.bin", "ckpt-000003.json",
                                                      "ckpt-000004.bin", "ckpt-000004.json"}));
  auto three = nlohmann::json::parse(*(*s3)->Read("ckpt-000003.json"));
  EXPECT_EQ(three["base"], -1);
  EXPECT_EQ(three["materialized_from"]["chain_depth"], 2);
  auto four = nlohmann::json::parse(*(*s3)->Read("ckpt-000004.json"));
  EXPECT_EQ(four["base"], 3);
  EXPECT_EQ(four["chain_depth"], 1);

  fs::remove_all(options.dir);  // the machine is gone
  auto store = CheckpointStore::Open(options);
  ASSERT_TRUE(store.ok()) << store.status().ToString();
  for (int64_t id : {3, 4}) {
    Status st = (*store)->Verify(id, Tier::kDurable);
    EXPECT_TRUE(st.ok()) << st.ToString();
  }
  auto loaded = (*store)->LoadNewestValid();
  ASSERT_TRUE(loaded.ok()) << loaded.status().ToString();
  EXPECT_EQ(loaded->info.id, 4);
  EXPECT_EQ(loaded->info.chain_depth, 1);
  EXPECT_EQ(loaded->info.tiers, std::vector<Tier>{Tier::kDurable});
  store_testing::ExpectSame(loaded->container, store_testing::State(4));
}

}  // namespace
}  // namespace spot::ckpt
