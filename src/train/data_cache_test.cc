#include "train/data_cache.h"

#include <ATen/ATen.h>
#include <gtest/gtest.h>
#include <png.h>

#include <filesystem>
#include <fstream>

#include "ckpt/blob_store.h"
#include "core/temp_dir.h"
#include "train/folder_data.h"

namespace spot::train {
namespace {

namespace fs = std::filesystem;
using ckpt::MemoryBlobStore;

std::string Payload(size_t n, int seed) {
  std::string s(n, '\0');
  for (size_t i = 0; i < n; ++i) s[i] = static_cast<char>((i * 31 + seed * 7) % 251);
  return s;
}

TEST(DataCacheTest, EveryDamagedByteAndTruncationIsCaught) {
  const std::string raw = Payload(300, 1);
  const std::string stored = DataCache::Encode(42, raw, 1);
  std::string why;
  ASSERT_EQ(DataCache::Decode(stored, 42, &why), raw);
  EXPECT_FALSE(DataCache::Decode(stored, 43, &why)) << "another fingerprint";
  EXPECT_NE(why.find("fingerprint"), std::string::npos) << why;
  for (size_t i = 0; i < stored.size(); ++i) {
    std::string bad = stored;
    bad[i] = static_cast<char>(bad[i] ^ 0x5a);
    EXPECT_FALSE(DataCache::Decode(bad, 42, &why)) << "byte " << i << " flipped";
  }
  for (size_t n = 0; n < stored.size(); ++n) {
    EXPECT_FALSE(DataCache::Decode(stored.substr(0, n), 42, &why)) << "cut at " << n;
  }
}

TEST(DataCacheTest, AReplacementWorkerWarmsFromTheDurableTierAndCopiesItLocal) {
  auto durable = std::make_shared<MemoryBlobStore>();
  auto first_local = std::make_shared<MemoryBlobStore>();
  DataCache first(first_local, durable, 0);
  CacheTier from;
  EXPECT_FALSE(first.Get("s0", 7, &from)) << "cold";
  first.Put("s0", 7, Payload(1000, 2));
  EXPECT_EQ(first.stats().shards[3], 1) << "decoded from the origin";
  EXPECT_TRUE(first_local->Size("s0").ok());
  EXPECT_TRUE(durable->Size("s0").ok());

  // A new machine: empty local disk, the same durable tier.
  auto second_local = std::make_shared<MemoryBlobStore>();
  DataCache second(second_local, durable, 0);
  EXPECT_EQ(second.Get("s0", 7, &from), Payload(1000, 2));
  EXPECT_EQ(from, CacheTier::kDurable);
  EXPECT_TRUE(second_local->Size("s0").ok()) << "copied to the local tier";
  EXPECT_EQ(second.Get("s0", 7, &from), Payload(1000, 2));
  EXPECT_EQ(from, CacheTier::kLocal);
  const DataCacheStats s = second.stats();
  EXPECT_EQ(s.shards[1], 1);
  EXPECT_EQ(s.shards[2], 1);
  EXPECT_EQ(s.Summary(), "2 shards: 0 memory, 1 local, 1 durable, 0 decoded");
  EXPECT_FALSE(second.Get("s0", 8, &from)) << "another data set's fingerprint never hits";
}

TEST(DataCacheTest, ADamagedLocalCopyIsSkippedAndRewrittenFromTheDurableOne) {
  auto local = std::make_shared<MemoryBlobStore>();
  auto durable = std::make_shared<MemoryBlobStore>();
  DataCache cache(local, durable, 0);
  cache.Put("s", 1, Payload(500, 3));
  local->blob("s")[60] ^= 1;
  CacheTier from;
  EXPECT_EQ(cache.Get("s", 1, &from), Payload(500, 3));
  EXPECT_EQ(from, CacheTier::kDurable);
  EXPECT_EQ(cache.stats().damaged, 1);
  EXPECT_EQ(cache.Get("s", 1, &from), Payload(500, 3));
  EXPECT_EQ(from, CacheTier::kLocal) << "the local copy was replaced by a sound one";
  // Damaged everywhere: a miss, so the caller decodes the origin again.
  local->blob("s")[60] ^= 1;
  durable->blob("s").resize(20);
  EXPECT_FALSE(cache.Get("s", 1, &from));
  EXPECT_EQ(cache.stats().damaged, 3);
}

TEST(DataCacheTest, TheMemoryTierServesFirstAndEvictsTheLeastRecentlyUsed) {
  ClearDataCacheMemory();
  auto local = std::make_shared<MemoryBlobStore>();
  DataCache cache(local, nullptr, /*memory_bytes=*/2500);
  cache.Put("a", 1, Payload(1000, 1));
  cache.Put("b", 1, Payload(1000, 2));
  CacheTier from;
  EXPECT_EQ(cache.Get("a", 1, &from), Payload(1000, 1));
  EXPECT_EQ(from, CacheTier::kMemory);
  cache.Put("c", 1, Payload(1000, 3));  // over 2500 bytes: b, the least recently used, goes
  EXPECT_EQ(cache.Get("b", 1, &from), Payload(1000, 2));
  EXPECT_EQ(from, CacheTier::kLocal);
  EXPECT_EQ(cache.Get("c", 1, &from), Payload(1000, 3));
  EXPECT_EQ(from, CacheTier::kMemory);
  EXPECT_FALSE(cache.Get("c", 2, &from)) << "another fingerprint: not even from memory";
  ClearDataCacheMemory();
}

// A tier that refuses every write: the cache logs and carries on.
class FullStore final : public MemoryBlobStore {
 public:
  Result<std::unique_ptr<ckpt::BlobWriter>> Create(const std::string& name) override {
    return UnavailableError("no space left on device: " + name);
  }
};

TEST(DataCacheTest, ATierThatCannotBeWrittenNeverFailsTheLoad) {
  auto durable = std::make_shared<MemoryBlobStore>();
  DataCache cache(std::make_shared<FullStore>(), durable, 0);
  cache.Put("s", 1, Payload(100, 1));
  EXPECT_EQ(cache.stats().write_failures, 1);
  CacheTier from;
  EXPECT_EQ(cache.Get("s", 1, &from), Payload(100, 1));
  EXPECT_EQ(from, CacheTier::kDurable);
}

// An image folder of `n` PNGs (RGB, 8 x 6, each a different colour), two classes.
void WriteFolder(const fs::path& root, int n) {
  for (const char* split : {"train", "test"}) {
    for (int i = 0; i < n; ++i) {
      const fs::path dir = root / split / (i % 2 ? "odd" : "even");
      fs::create_directories(dir);
      std::vector<uint8_t> px(8 * 6 * 3);
      for (size_t p = 0; p < px.size(); ++p) px[p] = static_cast<uint8_t>(i * 13 + p * 5);
      png_image image{};
      image.version = PNG_IMAGE_VERSION;
      image.width = 8;
      image.height = 6;
      image.format = PNG_FORMAT_RGB;
      const std::string file = (dir / (std::to_string(i) + ".png")).string();
      ASSERT_TRUE(png_image_write_to_file(&image, file.c_str(), 0, px.data(), 0, nullptr));
    }
  }
}

class ImageCacheTest : public testing::Test {
 protected:
  void SetUp() override {
    ClearDataCacheMemory();
    WriteFolder(dir_.path() / "data", 21);
    spec_.dataset = "images";
    spec_.dataset_path = (dir_.path() / "data").string();
    spec_.image_size = 4;
    spec_.channels = 3;
    spec_.cache.shard_size = 4;
    spec_.checkpoint.dir = (dir_.path() / "machine1").string();
    spec_.checkpoint.durable_dir = (dir_.path() / "durable").string();
  }
  TensorSet Load(Split split = Split::kTrain) {
    Result<TensorSet> t = LoadImageFolderSplit(spec_, split);
    EXPECT_TRUE(t.ok()) << t.status().ToString();
    return t.ok() ? std::move(t).value() : TensorSet{};
  }

  TempDir dir_ = TempDir::Create("data_cache_test").value();
  TrainSpec spec_;
};

TEST_F(ImageCacheTest, CachedLoadsEqualDecodingAndAReplacementNeverTouchesTheOrigin) {
  spec_.cache.enabled = false;
  const TensorSet plain = Load();
  EXPECT_FALSE(plain.cache_stats);
  spec_.cache.enabled = true;

  const TensorSet cold = Load();
  ASSERT_TRUE(cold.cache_stats);
  EXPECT_EQ(cold.cache_stats->Summary(), "6 shards: 0 memory, 0 local, 0 durable, 6 decoded");
  EXPECT_TRUE(at::equal(cold.images, plain.images));
  EXPECT_TRUE(at::equal(cold.labels, plain.labels));
  EXPECT_TRUE(fs::is_directory(dir_.path() / "machine1" / "data-cache"));
  EXPECT_TRUE(fs::is_directory(dir_.path() / "durable" / "data-cache"));

  // The replacement machine: a fresh local disk. The origin's files now hold
  // garbage of the same sizes and times (the fingerprint cannot tell), so a
  // single file decoded instead of read from the cache would fail the load.
  spec_.checkpoint.dir = (dir_.path() / "machine2").string();
  for (const auto& e : fs::recursive_directory_iterator(dir_.path() / "data" / "train")) {
    if (!e.is_regular_file()) continue;
    const auto size = fs::file_size(e.path());
    const auto time = fs::last_write_time(e.path());
    std::ofstream(e.path(), std::ios::trunc | std::ios::binary) << std::string(size, 'x');
    fs::last_write_time(e.path(), time);
  }
  const TensorSet warm = Load();
  ASSERT_TRUE(warm.cache_stats);
  EXPECT_EQ(warm.cache_stats->shards[2], 6) << warm.cache_stats->Summary();
  EXPECT_EQ(warm.cache_stats->shards[3], 0) << warm.cache_stats->Summary();
  EXPECT_TRUE(at::equal(warm.images, plain.images));
  const TensorSet local = Load();
  EXPECT_EQ(local.cache_stats->shards[1], 6) << local.cache_stats->Summary();
  EXPECT_TRUE(at::equal(local.images, plain.images));
}

TEST_F(ImageCacheTest, AChangedFileOrSettingMissesAndADamagedShardIsDecodedAgain) {
  const TensorSet cold = Load();
  ASSERT_EQ(cold.cache_stats->shards[3], 6);
  spec_.image_size = 5;
  EXPECT_EQ(Load().cache_stats->shards[3], 6) << "another size: another fingerprint";
  spec_.image_size = 4;
  EXPECT_EQ(Load().cache_stats->shards[1], 6);

  // Damage every local copy: each is read from the durable tier instead (and
  // its local copy rewritten), the data identical.
  for (const auto& e : fs::directory_iterator(dir_.path() / "machine1" / "data-cache")) {
    if (e.path().filename().string().find("-train-") == std::string::npos) continue;
    std::fstream f(e.path(), std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(50);
    f.put('\x7f');
  }
  const TensorSet again = Load();
  EXPECT_EQ(again.cache_stats->damaged, 6) << again.cache_stats->Summary();
  EXPECT_EQ(again.cache_stats->shards[2], 6) << again.cache_stats->Summary();
  EXPECT_TRUE(at::equal(again.images, cold.images));
  EXPECT_EQ(Load().cache_stats->shards[1], 6) << "rewritten locally";

  // A file rewritten with other pixels: a new fingerprint, nothing stale served.
  fs::path one = dir_.path() / "data" / "train" / "even" / "0.png";
  std::vector<uint8_t> px(8 * 6 * 3, 255);
  png_image image{};
  image.version = PNG_IMAGE_VERSION;
  image.width = 8;
  image.height = 6;
  image.format = PNG_FORMAT_RGB;
  fs::remove(one);
  ASSERT_TRUE(png_image_write_to_file(&image, one.c_str(), 0, px.data(), 0, nullptr));
  fs::last_write_time(one, fs::last_write_time(one) + std::chrono::seconds(5));
  const TensorSet changed = Load();
  EXPECT_EQ(changed.cache_stats->shards[3], 6) << changed.cache_stats->Summary();
  EXPECT_EQ(changed.images[0].min().item<int>(), 255);
}

TEST_F(ImageCacheTest, TheTestSplitHasShardsOfItsOwnAndDurableNoneKeepsItLocal) {
  spec_.cache.durable = "none";
  const TensorSet test = Load(Split::kTest);
  EXPECT_EQ(test.cache_stats->shards[3], 6);
  EXPECT_FALSE(fs::exists(dir_.path() / "durable" / "data-cache"));
  EXPECT_EQ(Load(Split::kTest).cache_stats->shards[1], 6);
  EXPECT_EQ(Load(Split::kTrain).cache_stats->shards[3], 6) << "the train split is not the test's";
}

// Loaded shard by shard (an elastic worker's set): nothing is held at first;
// Load takes only the shards asked for, Take and Range load the shards of
// the rows they read, and the rows equal the whole load's. A damaged image is
// found by the load of its shard, named, and thrown by Take.
TEST_F(ImageCacheTest, AShardedSetLoadsOnlyTheShardsAskedForOrTaken) {
  const TensorSet whole = Load();
  ClearDataCacheMemory();
  spec_.checkpoint.dir = (dir_.path() / "machine2").string();  // a fresh disk
  Result<TensorSet> r = LoadImageFolderSplit(spec_, Split::kTrain, /*sharded=*/true);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  TensorSet t = std::move(r).value();
  ASSERT_TRUE(t.shards);
  EXPECT_EQ(t.size(), 21);
  EXPECT_EQ(t.shards->shards(), 6);
  EXPECT_EQ(t.shards->held(), 0);
  EXPECT_TRUE(at::equal(t.labels, whole.labels));

  ASSERT_TRUE(t.shards->Load({1, 3}).ok());
  EXPECT_EQ(t.shards->held(), 2);
  EXPECT_TRUE(t.shards->Holds(1) && t.shards->Holds(3) && !t.shards->Holds(0));
  EXPECT_EQ(t.shards->stats().shards[2], 2) << "from the durable tier";
  EXPECT_TRUE(at::equal(t.images.slice(0, 4, 8), whole.images.slice(0, 4, 8)));

  // Rows 0 and 20: shards 0 and 5; row 13 (shard 3) is held.
  auto [x, y] = t.Take(at::tensor({20, 13, 0}, at::kLong));
  EXPECT_EQ(t.shards->held(), 4);
  EXPECT_TRUE(t.shards->Holds(0) && t.shards->Holds(5));
  auto [wx, wy] = whole.Take(at::tensor({20, 13, 0}, at::kLong));
  EXPECT_TRUE(at::equal(x, wx));
  EXPECT_TRUE(at::equal(y, wy));
  t.Range(8, 9);
  EXPECT_TRUE(t.shards->Holds(2));
  ASSERT_TRUE(t.shards->LoadAll().ok());
  EXPECT_TRUE(at::equal(t.images, whole.images));

  // A limit keeps a view: the shards still fill the whole tensor's rows.
  Result<TensorSet> cut = LoadSplit(spec_, Split::kTrain, 10, /*sharded=*/true);
  ASSERT_TRUE(cut.ok()) << cut.status().ToString();
  EXPECT_EQ(cut->size(), 10);
  EXPECT_TRUE(at::equal(cut->Range(0, 10).first, whole.Range(0, 10).first));

  // A damaged image in a shard no tier holds (a new size: a new fingerprint).
  spec_.image_size = 5;
  // Files go by class, then name: even/4.png is row 8, in shard 2.
  const fs::path bad = dir_.path() / "data" / "train" / "even" / "4.png";
  std::ofstream(bad, std::ios::trunc | std::ios::binary) << "not a png";
  Result<TensorSet> d = LoadImageFolderSplit(spec_, Split::kTrain, /*sharded=*/true);
  ASSERT_TRUE(d.ok()) << "nothing decoded before a shard is asked for";
  ASSERT_TRUE(d->shards->Load({0, 1}).ok());
  const Status st = d->shards->Load({2, 3});
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(st.message().find(bad.string()), std::string::npos) << st.message();
  EXPECT_FALSE(d->shards->Holds(2)) << "a failed load holds none of its shards";
  EXPECT_THROW(d->Take(at::tensor({8}, at::kLong)), std::invalid_argument);
}

}  // namespace
}  // namespace spot::train
