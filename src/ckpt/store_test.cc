#include "ckpt/store.h"

#include <fmt/format.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "core/file_io.h"
#include "core/temp_dir.h"

namespace spot::ckpt {
namespace {

namespace fs = std::filesystem;

// A small state whose every byte depends on `seed`: a few records of several
// dtypes, the same layout for every seed.
Container State(uint64_t seed) {
  Container c;
  uint64_t x = seed * 0x9E3779B97F4A7C15ULL + 1;
  auto next = [&] {
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    return x;
  };
  for (auto [name, dtype, shape] :
       std::vector<std::tuple<std::string, DType, std::vector<int64_t>>>{
           {"model/w", DType::kF32, {32, 32}},
           {"model/b", DType::kF32, {32}},
           {"optim/w.momentum", DType::kF32, {32, 32}},
           {"step", DType::kI64, {}}}) {
    std::span<char> d = c.AddUninitialized(name, dtype, shape);
    if (dtype == DType::kF32) {
      for (size_t i = 0; i < d.size() / 4; ++i) {
        float f = static_cast<float>(next() % 20000) / 10000.0f - 1.0f;
        std::memcpy(d.data() + 4 * i, &f, 4);
      }
    } else {
      int64_t v = static_cast<int64_t>(seed);
      std::memcpy(d.data(), &v, 8);
    }
  }
  // The trainer's counters: the step the store checks against the manifest's
  // (SaveFull and WriteChain save State(seed) at step 10 * seed).
  c.AddBytes("trainer/state", fmt::format("{{\"seed\":{},\"step\":{}}}", seed, 10 * seed));
  return c;
}

void ExpectSame(const Container& got, const Container& want, const std::string& what = "") {
  ASSERT_EQ(got.records().size(), want.records().size()) << what;
  for (size_t i = 0; i < want.records().size(); ++i) {
    EXPECT_EQ(got.records()[i].name, want.records()[i].name) << what;
    EXPECT_EQ(got.records()[i].dtype, want.records()[i].dtype) << what;
    EXPECT_EQ(got.records()[i].shape, want.records()[i].shape) << what;
    EXPECT_TRUE(got.records()[i].data == want.records()[i].data)
        << what << ": " << want.records()[i].name << " differs";
  }
}

std::string ReadAll(const fs::path& p) {
  auto r = ReadFile(p.string());
  EXPECT_TRUE(r.ok()) << r.status().ToString();
  return r.ok() ? *r : "";
}

void WriteAll(const fs::path& p, const std::string& bytes) {
  std::ofstream f(p, std::ios::binary | std::ios::trunc);
  f.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

void FlipByte(const fs::path& p, size_t offset) {
  std::string b = ReadAll(p);
  ASSERT_LT(offset, b.size());
  b[offset] = static_cast<char>(b[offset] ^ 0x40);
  WriteAll(p, b);
}

void Truncate(const fs::path& p, size_t len) { fs::resize_file(p, len); }

bool Contains(const std::vector<std::string>& v, std::string_view needle) {
  for (const std::string& s : v) {
    if (s.find(needle) != std::string::npos) return true;
  }
  return false;
}

std::string Join(const std::vector<std::string>& v) {
  std::string out;
  for (const std::string& s : v) out += s + "\n";
  return out;
}

class StoreTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto t = TempDir::Create("spot_store_test");
    ASSERT_TRUE(t.ok()) << t.status().ToString();
    tmp_.emplace(std::move(t).value());
    local_ = tmp_->path() / "local";
    durable_ = tmp_->path() / "durable";
  }

  std::unique_ptr<CheckpointStore> Open(RetentionPolicy retention = Keep(100),
                                        bool with_durable = false) {
    StoreOptions o;
    o.dir = local_.string();
    if (with_durable) o.durable_dir = durable_.string();
    o.retention = retention;
    auto s = CheckpointStore::Open(o);
    EXPECT_TRUE(s.ok()) << s.status().ToString();
    return s.ok() ? std::move(s).value() : nullptr;
  }

  static RetentionPolicy Keep(int n) {
    RetentionPolicy p;
    p.keep_last = n;
    return p;
  }

  // Saves full versions of State(seed) for each seed; step = 10 * seed.
  std::vector<VersionInfo> SaveFull(CheckpointStore& s, std::vector<uint64_t> seeds,
                                    std::string metric = "") {
    std::vector<VersionInfo> out;
    for (uint64_t seed : seeds) {
      Container c = State(seed);
      SaveRequest req;
      req.step = static_cast<int64_t>(10 * seed);
      req.meta_json = metric.empty() ? "{\"seed\":" + std::to_string(seed) + "}"
                                     : "{\"" + metric + "\":" + std::to_string(seed % 7) + "}";
      auto v = s.Save(c, req);
      EXPECT_TRUE(v.ok()) << v.status().ToString();
      if (v.ok()) out.push_back(*v);
    }
    return out;
  }

  // Writes a chain: full, then `deltas` deltas, of State(first), State(first+1), ...
  // through Write with a reference. Returns the infos.
  std::vector<VersionInfo> WriteChain(CheckpointStore& s, uint64_t first, int deltas,
                                      Codec delta_codec = Codec::kSubDelta) {
    std::vector<VersionInfo> out;
    ChunkCodec codec;
    Container reference;
    int64_t base = -1;
    int depth = 0;
    for (int i = 0; i <= deltas; ++i) {
      Container c = State(first + static_cast<uint64_t>(i));
      SaveRequest req;
      req.step = static_cast<int64_t>(10 * (first + static_cast<uint64_t>(i)));
      req.plan.delta = delta_codec;
      auto v = s.Write(s.ReserveId(), c, &reference, base, base >= 0 ? depth + 1 : 0, req, codec);
      EXPECT_TRUE(v.ok()) << v.status().ToString();
      if (!v.ok()) return out;
      out.push_back(*v);
      base = v->id;
      depth = v->chain_depth;
    }
    return out;
  }

  fs::path LocalData(int64_t id) const { return local_ / CheckpointStore::DataFileName(id); }
  fs::path LocalManifest(int64_t id) const {
    return local_ / CheckpointStore::ManifestFileName(id);
  }
  fs::path DurableData(int64_t id) const { return durable_ / CheckpointStore::DataFileName(id); }

  std::vector<int64_t> IdsIn(const fs::path& dir) const {
    std::set<int64_t> ids;
    if (!fs::exists(dir)) return {};
    for (const auto& e : fs::directory_iterator(dir)) {
      int64_t id = CheckpointStore::ParseId(e.path().filename().string());
      if (id >= 0) ids.insert(id);
    }
    return {ids.begin(), ids.end()};
  }

  std::optional<TempDir> tmp_;
  fs::path local_, durable_;
};

TEST(StoreNamesTest, FileNamesAndIds) {
  EXPECT_EQ(CheckpointStore::DataFileName(7), "ckpt-000007.bin");
  EXPECT_EQ(CheckpointStore::ManifestFileName(1234567), "ckpt-1234567.json");
  EXPECT_EQ(CheckpointStore::ParseId("ckpt-000007.bin"), 7);
  EXPECT_EQ(CheckpointStore::ParseId("ckpt-000007.json"), 7);
  EXPECT_EQ(CheckpointStore::ParseId("ckpt-1234567.json"), 1234567);
  for (const char* bad :
       {"ckpt-.bin", "ckpt-12a.bin", "ckpt-000007.txt", "xckpt-1.bin", "ckpt--1.bin",
        "ckpt-1234567890123456.bin", ".tmp.ckpt-000001.bin.12", "ckpt-000007.bin.bak", ""}) {
    EXPECT_EQ(CheckpointStore::ParseId(bad), -1) << bad;
  }
  EXPECT_EQ(TierName(Tier::kLocal), "local");
  EXPECT_EQ(TierName(Tier::kDurable), "durable");
}

TEST_F(StoreTest, OpenValidatesOptions) {
  StoreOptions o;
  EXPECT_EQ(CheckpointStore::Open(o).status().code(), StatusCode::kInvalidArgument);
  o.dir = local_.string();
  o.retention.keep_last = 0;
  EXPECT_EQ(CheckpointStore::Open(o).status().code(), StatusCode::kInvalidArgument);
  o.retention.keep_last = 1;
  o.durable_dir = o.dir;
  EXPECT_EQ(CheckpointStore::Open(o).status().code(), StatusCode::kInvalidArgument);
  o.durable_dir = durable_.string();
  auto s = CheckpointStore::Open(o);
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  EXPECT_TRUE((*s)->has_durable());
  EXPECT_TRUE(fs::is_directory(local_));
  EXPECT_TRUE(fs::is_directory(durable_));
  EXPECT_EQ((*s)->dir(), local_.string());
}

TEST_F(StoreTest, EmptyStore) {
  auto s = Open();
  EXPECT_TRUE(s->Empty());
  EXPECT_TRUE(s->List().empty());
  auto l = s->LoadNewestValid();
  EXPECT_EQ(l.status().code(), StatusCode::kNotFound);
  EXPECT_NE(l.status().message().find(local_.string()), std::string::npos);
  EXPECT_FALSE(s->Load(1).ok());
  EXPECT_EQ(s->ReserveId(), 1);
  EXPECT_EQ(s->ReserveId(), 2);
}

TEST_F(StoreTest, SaveListLoad) {
  auto s = Open();
  std::vector<VersionInfo> saved = SaveFull(*s, {1, 2, 3});
  ASSERT_EQ(saved.size(), 3u);
  EXPECT_FALSE(s->Empty());
  for (size_t i = 0; i < saved.size(); ++i) {
    const VersionInfo& v = saved[i];
    EXPECT_EQ(v.id, static_cast<int64_t>(i + 1));
    EXPECT_EQ(v.step, static_cast<int64_t>(10 * (i + 1)));
    EXPECT_EQ(v.base, -1);
    EXPECT_EQ(v.chain_depth, 0);
    EXPECT_EQ(v.records, 5);
    std::string bytes = ReadAll(LocalData(v.id));
    EXPECT_EQ(v.file_bytes, bytes.size());
    EXPECT_EQ(v.checksum, Checksum(bytes));
    EXPECT_EQ(v.payload_bytes, State(i + 1).payload_bytes());
    EXPECT_TRUE(fs::exists(LocalManifest(v.id)));
    EXPECT_GT(v.created_unix_ms, 0);
  }
  std::vector<VersionInfo> list = s->List();
  ASSERT_EQ(list.size(), 3u);
  EXPECT_EQ(list[0].id, 3);  // newest first
  EXPECT_EQ(list[2].id, 1);
  EXPECT_EQ(list[0].step, 30);
  EXPECT_EQ(list[0].tiers, std::vector<Tier>{Tier::kLocal});
  EXPECT_EQ(list[0].meta_json, "{\"seed\":3}");
  EXPECT_EQ(list[0].checksum, saved[2].checksum);
  EXPECT_EQ(list[0].codecs, saved[2].codecs);
  EXPECT_EQ(list[0].file_bytes, saved[2].file_bytes);

  for (uint64_t seed : {1, 2, 3}) {
    auto l = s->Load(static_cast<int64_t>(seed));
    ASSERT_TRUE(l.ok()) << l.status().ToString();
    ExpectSame(l->container, State(seed), "version " + std::to_string(seed));
    EXPECT_EQ(l->info.step, static_cast<int64_t>(10 * seed));
    EXPECT_TRUE(l->skipped.empty());
    EXPECT_EQ(l->container.VerifyRecords(), "");
  }
  auto newest = s->LoadNewestValid();
  ASSERT_TRUE(newest.ok()) << newest.status().ToString();
  EXPECT_EQ(newest->info.id, 3);
  EXPECT_TRUE(newest->skipped.empty());
  ExpectSame(newest->container, State(3));
  for (Tier t : {Tier::kLocal}) EXPECT_TRUE(s->Verify(3, t).ok());
  EXPECT_EQ(s->Verify(3, Tier::kDurable).code(), StatusCode::kInvalidArgument);

  // A reopened store sees the same and continues the ids.
  s.reset();
  auto again = Open();
  EXPECT_EQ(again->List().size(), 3u);
  EXPECT_EQ(again->ReserveId(), 4);
}

TEST_F(StoreTest, MetadataMustBeJson) {
  auto s = Open();
  Container c = State(1);
  SaveRequest req;
  req.step = 10;
  req.meta_json = "{not json";
  EXPECT_EQ(s->Save(c, req).status().code(), StatusCode::kInvalidArgument);
  EXPECT_TRUE(s->Empty());
  req.meta_json = R"({"acc": 0.5, "epoch": 3})";
  auto v = s->Save(c, req);
  ASSERT_TRUE(v.ok());
  EXPECT_EQ(s->List()[0].meta_json, R"({"acc":0.5,"epoch":3})");
}

TEST_F(StoreTest, LoadNewestValidSkipsDamagedVersionsAndSaysWhy) {
  auto s = Open();
  SaveFull(*s, {1, 2, 3, 4, 5, 6});
  Truncate(LocalData(6), ReadAll(LocalData(6)).size() - 10);         // truncated
  FlipByte(LocalData(5), 40);                                        // a flipped byte
  fs::remove(LocalManifest(4));                                      // never committed
  WriteAll(LocalManifest(3), "{\"format\": \"spot-checkpoint\", ");  // malformed manifest
  auto l = s->LoadNewestValid();
  ASSERT_TRUE(l.ok()) << l.status().ToString();
  EXPECT_EQ(l->info.id, 2);
  ExpectSame(l->container, State(2));
  ASSERT_EQ(l->skipped.size(), 4u) << Join(l->skipped);
  EXPECT_NE(l->skipped[0].find("ckpt-000006.bin"), std::string::npos) << l->skipped[0];
  EXPECT_NE(l->skipped[0].find("truncated"), std::string::npos) << l->skipped[0];
  EXPECT_NE(l->skipped[1].find("ckpt-000005.bin"), std::string::npos) << l->skipped[1];
  EXPECT_NE(l->skipped[1].find("checksum"), std::string::npos) << l->skipped[1];
  EXPECT_NE(l->skipped[2].find("no manifest"), std::string::npos) << l->skipped[2];
  EXPECT_NE(l->skipped[3].find("malformed manifest"), std::string::npos) << l->skipped[3];
  // Inspect shows them all, each copy with its state; List only the usable
  // ones its quick check finds (the flipped byte of 5 is in a chunk it does
  // not read).
  std::vector<int64_t> listed;
  for (const VersionInfo& v : s->List()) listed.push_back(v.id);
  EXPECT_EQ(listed, (std::vector<int64_t>{5, 2, 1}));
  std::vector<std::pair<int64_t, CopyState>> seen;
  for (const VersionCheck& v : s->Inspect(CheckDepth::kFull)) seen.emplace_back(v.id, v.state());
  EXPECT_EQ(seen, (std::vector<std::pair<int64_t, CopyState>>{{6, CopyState::kDamaged},
                                                              {5, CopyState::kDamaged},
                                                              {4, CopyState::kUncommitted},
                                                              {3, CopyState::kDamaged},
                                                              {2, CopyState::kOk},
                                                              {1, CopyState::kOk}}));
  EXPECT_EQ(s->Verify(5, Tier::kLocal).code(), StatusCode::kDataLoss);
  EXPECT_EQ(s->Verify(6, Tier::kLocal).code(), StatusCode::kDataLoss);
  EXPECT_TRUE(s->Verify(2, Tier::kLocal).ok());
}

TEST_F(StoreTest, ManifestThatDisagreesWithItsFileIsSkipped) {
  auto s = Open();
  SaveFull(*s, {1, 2});
  // Version 2's manifest over version 1's (valid) data file: ids differ.
  fs::copy_file(LocalData(1), LocalData(2), fs::copy_options::overwrite_existing);
  auto l = s->LoadNewestValid();
  ASSERT_TRUE(l.ok());
  EXPECT_EQ(l->info.id, 1);
  ASSERT_EQ(l->skipped.size(), 1u);
}

TEST_F(StoreTest, NoValidVersionIsNotFoundWithReasons) {
  auto s = Open();
  SaveFull(*s, {1, 2});
  FlipByte(LocalData(1), 20);
  FlipByte(LocalData(2), 20);
  auto l = s->LoadNewestValid();
  EXPECT_EQ(l.status().code(), StatusCode::kNotFound);
  EXPECT_NE(l.status().message().find("ckpt-000001.bin"), std::string::npos);
  EXPECT_NE(l.status().message().find("ckpt-000002.bin"), std::string::npos);
}

TEST_F(StoreTest, LoadNewestValidBeforeStep) {
  auto s = Open();
  SaveFull(*s, {1, 2, 3});  // steps 10, 20, 30
  auto l = s->LoadNewestValid(30);
  ASSERT_TRUE(l.ok());
  EXPECT_EQ(l->info.id, 2);
  EXPECT_TRUE(l->skipped.empty());
  l = s->LoadNewestValid(25);
  ASSERT_TRUE(l.ok());
  EXPECT_EQ(l->info.id, 2);
  l = s->LoadNewestValid(11);
  ASSERT_TRUE(l.ok());
  EXPECT_EQ(l->info.id, 1);
  EXPECT_EQ(s->LoadNewestValid(10).status().code(), StatusCode::kNotFound);
  l = s->LoadNewestValid(31);
  ASSERT_TRUE(l.ok());
  EXPECT_EQ(l->info.id, 3);
}

// ---------------------------------------------------------------------------
// Two tiers.

TEST_F(StoreTest, SaveReplicatesToTheDurableTier) {
  auto s = Open(Keep(100), /*with_durable=*/true);
  std::vector<VersionInfo> saved = SaveFull(*s, {1, 2});
  for (const VersionInfo& v : saved) {
    EXPECT_EQ(ReadAll(DurableData(v.id)), ReadAll(LocalData(v.id)));
    EXPECT_EQ(ReadAll(durable_ / CheckpointStore::ManifestFileName(v.id)),
              ReadAll(LocalManifest(v.id)));
    EXPECT_TRUE(s->Verify(v.id, Tier::kDurable).ok());
  }
  std::vector<VersionInfo> list = s->List();
  ASSERT_EQ(list.size(), 2u);
  EXPECT_EQ(list[0].tiers, (std::vector<Tier>{Tier::kLocal, Tier::kDurable}));
}

TEST_F(StoreTest, ReplicateCopiesDataAndManifest) {
  auto s = Open(Keep(100), true);
  std::vector<VersionInfo> chain = WriteChain(*s, 1, 1);
  ASSERT_EQ(chain.size(), 2u);
  EXPECT_TRUE(IdsIn(durable_).empty());  // Write alone stays local
  for (const VersionInfo& v : chain) ASSERT_TRUE(s->Replicate(v).ok());
  EXPECT_EQ(IdsIn(durable_), (std::vector<int64_t>{1, 2}));
  EXPECT_EQ(ReadAll(DurableData(2)), ReadAll(LocalData(2)));
  EXPECT_TRUE(s->Verify(2, Tier::kDurable).ok());

  // A local file that no longer matches its manifest is not replicated.
  std::vector<VersionInfo> more = WriteChain(*s, 10, 0);
  FlipByte(LocalData(more[0].id), 30);
  Status st = s->Replicate(more[0]);
  EXPECT_EQ(st.code(), StatusCode::kDataLoss);
  EXPECT_FALSE(fs::exists(DurableData(more[0].id)));
  EXPECT_FALSE(fs::exists(durable_ / CheckpointStore::ManifestFileName(more[0].id)));

  // Without a durable tier Replicate does nothing.
  auto single = CheckpointStore::Open({.dir = (tmp_->path() / "single").string()});
  ASSERT_TRUE(single.ok());
  EXPECT_TRUE((*single)->Replicate(chain[0]).ok());
}

TEST_F(StoreTest, DamagedLocalCopyFallsBackToTheDurableCopyOfTheSameVersion) {
  auto s = Open(Keep(100), true);
  SaveFull(*s, {1, 2, 3});
  FlipByte(LocalData(3), 50);
  auto l = s->LoadNewestValid();
  ASSERT_TRUE(l.ok()) << l.status().ToString();
  EXPECT_EQ(l->info.id, 3);
  EXPECT_EQ(l->info.tiers, std::vector<Tier>{Tier::kDurable});
  ExpectSame(l->container, State(3));
  ASSERT_EQ(l->skipped.size(), 1u) << Join(l->skipped);
  EXPECT_NE(l->skipped[0].find(LocalData(3).string()), std::string::npos) << l->skipped[0];

  // The same through Load(id), and with the local manifest gone.
  fs::remove(LocalManifest(3));
  auto by_id = s->Load(3);
  ASSERT_TRUE(by_id.ok()) << by_id.status().ToString();
  EXPECT_EQ(by_id->info.tiers, std::vector<Tier>{Tier::kDurable});
  ExpectSame(by_id->container, State(3));
}

TEST_F(StoreTest, VersionsOnlyInTheDurableTierAreFound) {
  {
    auto s = Open(Keep(100), true);
    SaveFull(*s, {1, 2, 3});
  }
  fs::remove_all(local_);  // a new machine: the local disk is empty
  auto s = Open(Keep(100), true);
  auto l = s->LoadNewestValid();
  ASSERT_TRUE(l.ok()) << l.status().ToString();
  EXPECT_EQ(l->info.id, 3);
  EXPECT_EQ(l->info.tiers, std::vector<Tier>{Tier::kDurable});
  ExpectSame(l->container, State(3));
  EXPECT_TRUE(l->skipped.empty()) << Join(l->skipped);
  EXPECT_EQ(s->List().size(), 3u);
  EXPECT_FALSE(s->Empty());
  // New ids continue above the durable ones.
  EXPECT_EQ(s->ReserveId(), 4);
}

TEST_F(StoreTest, ReserveIdIsAboveIdsInBothTiers) {
  {
    auto s = Open(Keep(100), true);
    SaveFull(*s, {1, 2, 3});  // ids 1..3 in both tiers
  }
  {
    // A store with the same durable tier and a fresh local one.
    StoreOptions o;
    o.dir = (tmp_->path() / "other_local").string();
    o.durable_dir = durable_.string();
    auto s = CheckpointStore::Open(o);
    ASSERT_TRUE(s.ok());
    EXPECT_EQ((*s)->ReserveId(), 4);
    EXPECT_EQ((*s)->ReserveId(), 5);
  }
  {
    // The same local tier and a fresh durable one.
    StoreOptions o;
    o.dir = local_.string();
    o.durable_dir = (tmp_->path() / "other_durable").string();
    auto s = CheckpointStore::Open(o);
    ASSERT_TRUE(s.ok());
    EXPECT_EQ((*s)->ReserveId(), 4);
  }
  {
    // A leftover data file without a manifest counts too: its id is not reused.
    WriteAll(durable_ / CheckpointStore::DataFileName(9), "partial");
    auto s = Open(Keep(100), true);
    EXPECT_EQ(s->ReserveId(), 10);
    auto v = SaveFull(*s, {4});
    ASSERT_EQ(v.size(), 1u);
    EXPECT_EQ(v[0].id, 11);
  }
}

// ---------------------------------------------------------------------------
// One check: what Verify and Inspect call damaged is exactly what a restore
// skips, and nothing is dropped from the listing.

void EditManifest(const fs::path& p, const std::function<void(nlohmann::json&)>& edit) {
  nlohmann::json j = nlohmann::json::parse(ReadAll(p));
  edit(j);
  WriteAll(p, j.dump(2));
}

void Swap(const fs::path& a, const fs::path& b) {
  std::string x = ReadAll(a), y = ReadAll(b);
  WriteAll(a, y);
  WriteAll(b, x);
}

struct DamageCase {
  const char* name;
  std::function<void(const fs::path& dir)> damage;  // on SaveFull({1, 2, 3}) in `dir`
  std::vector<int64_t> damaged;                     // the versions it damages
  const char* reason;                               // in every damaged version's reason
  bool quick_sees_it;                               // found without reading every byte
};

std::vector<DamageCase> DamageCases() {
  auto data = [](const fs::path& d, int64_t id) { return d / CheckpointStore::DataFileName(id); };
  auto manifest = [](const fs::path& d, int64_t id) {
    return d / CheckpointStore::ManifestFileName(id);
  };
  return {
      {"truncated manifest",
       [=](const fs::path& d) { Truncate(manifest(d, 3), fs::file_size(manifest(d, 3)) / 2); },
       {3},
       "malformed manifest",
       true},
      {"manifest id is not its file's",
       [=](const fs::path& d) { EditManifest(manifest(d, 3), [](auto& j) { j["id"] = 2; }); },
       {3},
       "id 2 does not match the file name's 3",
       true},
      {"manifests swapped",
       [=](const fs::path& d) { Swap(manifest(d, 2), manifest(d, 3)); },
       {3, 2},
       "does not match the file name's",
       true},
      {"data files swapped",
       [=](const fs::path& d) { Swap(data(d, 2), data(d, 3)); },
       {3, 2},
       "files swapped or renamed?",
       true},
      {"manifest step is not the data's",
       [=](const fs::path& d) { EditManifest(manifest(d, 3), [](auto& j) { j["step"] = 5; }); },
       {3},
       "holds step 30 (its trainer/state record), the manifest says step 5",
       true},
      {"wrong manifest checksum",
       [=](const fs::path& d) {
         EditManifest(manifest(d, 3), [](auto& j) { j["checksum"] = "xxh3-64:0123456789abcdef"; });
       },
       {3},
       "does not match the manifest's 0123456789abcdef",
       false},
      // fuzz/regressions/ckpt_manifest/: a float where an integer belongs
      // was cast to int64_t (undefined out of range); now the manifest is
      // malformed.
      {"manifest step is a float out of range",
       [=](const fs::path& d) { EditManifest(manifest(d, 3), [](auto& j) { j["step"] = 1e30; }); },
       {3},
       "step: expected an integer (got 1e+30)",
       true},
      {"manifest checksum with a sign",
       [=](const fs::path& d) {
         EditManifest(manifest(d, 3), [](auto& j) { j["checksum"] = "xxh3-64:-123456789abcdef"; });
       },
       {3},
       "checksum is not xxh3-64:<16 hex digits>",
       true},
      {"data file deleted",
       [=](const fs::path& d) { fs::remove(data(d, 3)); },
       {3},
       "missing, though its manifest is there",
       true},
  };
}

TEST_F(StoreTest, EveryDamagedVersionIsReportedAndSkippedAlike) {
  for (const DamageCase& c : DamageCases()) {
    SCOPED_TRACE(c.name);
    fs::remove_all(local_);
    auto s = Open();
    SaveFull(*s, {1, 2, 3});
    c.damage(local_);
    const std::set<int64_t> damaged(c.damaged.begin(), c.damaged.end());

    // Verify: every damaged version, and only those, is DataLoss, saying why.
    for (int64_t id : {1, 2, 3}) {
      Status st = s->Verify(id, Tier::kLocal);
      if (damaged.count(id)) {
        EXPECT_EQ(st.code(), StatusCode::kDataLoss) << id;
        EXPECT_NE(st.message().find(c.reason), std::string::npos) << st.message();
        EXPECT_EQ(s->Load(id).status().code(), StatusCode::kDataLoss) << id;
      } else {
        EXPECT_TRUE(st.ok()) << id << ": " << st.ToString();
      }
    }
    // Inspect lists every version, the damaged ones marked with the reason.
    for (CheckDepth depth : {CheckDepth::kFull, CheckDepth::kQuick}) {
      std::vector<VersionCheck> all = s->Inspect(depth);
      ASSERT_EQ(all.size(), 3u);
      for (const VersionCheck& v : all) {
        bool bad = damaged.count(v.id) && (depth == CheckDepth::kFull || c.quick_sees_it);
        EXPECT_EQ(v.state(), bad ? CopyState::kDamaged : CopyState::kOk) << v.id;
        ASSERT_EQ(v.copies.size(), 1u);
        if (bad) {
          EXPECT_NE(v.copies[0].problem.find(c.reason), std::string::npos) << v.copies[0].problem;
          EXPECT_TRUE(v.info.tiers.empty());
        }
      }
    }
    // The restore skips exactly those, newest first, and says why.
    auto l = s->LoadNewestValid();
    ASSERT_TRUE(l.ok()) << l.status().ToString();
    int64_t want = 3;
    while (damaged.count(want)) --want;
    EXPECT_EQ(l->info.id, want);
    EXPECT_EQ(l->info.step, 10 * want);
    ExpectSame(l->container, State(static_cast<uint64_t>(want)));
    ASSERT_EQ(l->skipped.size(), damaged.size()) << Join(l->skipped);
    for (const std::string& why : l->skipped)
      EXPECT_NE(why.find(c.reason), std::string::npos) << why;
  }
}

TEST_F(StoreTest, QuickCheckReadsTheStepOfADeltaWithoutDecodingTheChain) {
  auto s = Open();
  std::vector<VersionInfo> chain = WriteChain(*s, 1, 3);  // 1 full, 2..4 deltas
  ASSERT_EQ(chain.size(), 4u);
  for (const VersionCheck& v : s->Inspect(CheckDepth::kQuick)) {
    EXPECT_TRUE(v.intact()) << v.id << ": " << Join(v.Problems());
  }
  // The step record of a delta is itself a delta (the same length): the
  // quick check decodes it alone along the chain.
  EditManifest(LocalManifest(4), [](auto& j) { j["step"] = 31; });
  VersionCheck v = s->Inspect(4, CheckDepth::kQuick);
  EXPECT_EQ(v.state(), CopyState::kDamaged);
  ASSERT_TRUE(v.has_info);
  EXPECT_EQ(v.info.step, 31);
  EXPECT_TRUE(Contains(v.Problems(), "local copy: ")) << Join(v.Problems());
  EXPECT_TRUE(Contains(v.Problems(), "holds step 40")) << Join(v.Problems());
  EXPECT_EQ(s->Verify(4, Tier::kLocal).code(), StatusCode::kDataLoss);
  auto l = s->LoadNewestValid();
  ASSERT_TRUE(l.ok());
  EXPECT_EQ(l->info.id, 3);
  EXPECT_TRUE(Contains(l->skipped, "holds step 40")) << Join(l->skipped);
  // A broken base shows in its deltas' quick check too.
  Truncate(LocalData(2), 100);
  for (int64_t id : {2, 3, 4}) {
    EXPECT_EQ(s->Inspect(id, CheckDepth::kQuick).state(), CopyState::kDamaged) << id;
  }
  EXPECT_TRUE(Contains(s->Inspect(3, CheckDepth::kQuick).Problems(), "base version 2 is unusable"));
  EXPECT_TRUE(s->Inspect(1, CheckDepth::kQuick).intact());
}

TEST_F(StoreTest, UncommittedVersionIsShownNotDamaged) {
  auto s = Open();
  SaveFull(*s, {1});
  WriteAll(LocalData(2), "a save in progress");
  VersionCheck v = s->Inspect(2, CheckDepth::kFull);
  EXPECT_EQ(v.state(), CopyState::kUncommitted);
  EXPECT_FALSE(v.has_info);
  EXPECT_TRUE(Contains(v.Problems(), "no manifest")) << Join(v.Problems());
  EXPECT_EQ(s->Inspect(CheckDepth::kQuick).size(), 2u);
  EXPECT_EQ(s->List().size(), 1u);
  auto l = s->LoadNewestValid();
  ASSERT_TRUE(l.ok());
  EXPECT_EQ(l->info.id, 1);
  EXPECT_TRUE(Contains(l->skipped, "no manifest")) << Join(l->skipped);
  // A version no tier has.
  VersionCheck none = s->Inspect(7, CheckDepth::kFull);
  EXPECT_EQ(none.state(), CopyState::kMissing);
  EXPECT_EQ(s->Load(7).status().code(), StatusCode::kNotFound);
  EXPECT_EQ(s->Verify(7, Tier::kLocal).code(), StatusCode::kNotFound);
}

TEST_F(StoreTest, AVersionIsIntactWhenOneTierHoldsAnIntactCopy) {
  auto s = Open(Keep(100), true);
  SaveFull(*s, {1, 2});
  EditManifest(LocalManifest(2), [](auto& j) { j["step"] = 7; });
  VersionCheck v = s->Inspect(2, CheckDepth::kFull);
  EXPECT_EQ(v.state(), CopyState::kOk);
  ASSERT_EQ(v.copies.size(), 2u);
  EXPECT_EQ(v.copies[0].state, CopyState::kDamaged);
  EXPECT_EQ(v.copies[1].state, CopyState::kOk);
  EXPECT_EQ(v.info.tiers, std::vector<Tier>{Tier::kDurable});
  EXPECT_EQ(v.info.step, 20);  // from the copy that passed
  auto l = s->LoadNewestValid();
  ASSERT_TRUE(l.ok());
  EXPECT_EQ(l->info.id, 2);
  EXPECT_EQ(l->info.tiers, std::vector<Tier>{Tier::kDurable});
  ASSERT_EQ(l->skipped.size(), 1u);
  EXPECT_NE(l->skipped[0].find("the manifest says step 7"), std::string::npos) << l->skipped[0];
  std::vector<VersionInfo> list = s->List();
  ASSERT_EQ(list.size(), 2u);
  EXPECT_EQ(list[0].tiers, std::vector<Tier>{Tier::kDurable});
  EXPECT_EQ(list[1].tiers, (std::vector<Tier>{Tier::kLocal, Tier::kDurable}));
}

TEST_F(StoreTest, ReadOnlyStoreReadsTheDurableTierAloneAndChangesNothing) {
  {
    auto s = Open(Keep(100), true);
    SaveFull(*s, {1, 2});
  }
  fs::remove_all(local_);  // the machine is gone; the durable tier is complete
  WriteAll(durable_ / ".tmp.ckpt-000003.bin.1", "another writer's file in progress");
  auto ro = CheckpointStore::Open(
      {.dir = local_.string(), .durable_dir = durable_.string(), .read_only = true});
  ASSERT_TRUE(ro.ok()) << ro.status().ToString();
  CheckpointStore& s = **ro;
  std::vector<VersionCheck> all = s.Inspect(CheckDepth::kFull);
  ASSERT_EQ(all.size(), 2u);
  for (const VersionCheck& v : all) {
    EXPECT_TRUE(v.intact()) << Join(v.Problems());
    EXPECT_EQ(v.copies[0].state, CopyState::kMissing);
    EXPECT_EQ(v.copies[1].state, CopyState::kOk);
  }
  auto l = s.LoadNewestValid();
  ASSERT_TRUE(l.ok()) << l.status().ToString();
  EXPECT_EQ(l->info.id, 2);
  EXPECT_FALSE(fs::exists(local_));                              // not created
  EXPECT_TRUE(fs::exists(durable_ / ".tmp.ckpt-000003.bin.1"));  // not cleaned
  Container c = State(3);
  EXPECT_EQ(s.Save(c, {.step = 30}).status().code(), StatusCode::kFailedPrecondition);
  EXPECT_EQ(s.Replicate(l->info).code(), StatusCode::kFailedPrecondition);
  EXPECT_EQ(s.ApplyRetention(Tier::kDurable).status().code(), StatusCode::kFailedPrecondition);
  auto dry = s.ApplyRetention(Tier::kDurable, /*dry_run=*/true);
  ASSERT_TRUE(dry.ok()) << dry.status().ToString();
  EXPECT_FALSE(fs::exists(local_));
  EXPECT_EQ(IdsIn(durable_), (std::vector<int64_t>{1, 2}));
}

// ---------------------------------------------------------------------------
// Delta chains.

TEST_F(StoreTest, DeltaChainRestoresBitwise) {
  auto s = Open();
  std::vector<VersionInfo> chain = WriteChain(*s, 1, 4);  // full + 4 deltas
  ASSERT_EQ(chain.size(), 5u);
  for (size_t i = 0; i < chain.size(); ++i) {
    EXPECT_EQ(chain[i].base, i == 0 ? -1 : chain[i - 1].id);
    EXPECT_EQ(chain[i].chain_depth, static_cast<int>(i));
    if (i > 0) {
      EXPECT_NE(chain[i].codecs.find("sub-delta"), std::string::npos);
    }
  }
  for (size_t i = 0; i < chain.size(); ++i) {
    auto l = s->Load(chain[i].id);
    ASSERT_TRUE(l.ok()) << l.status().ToString();
    ExpectSame(l->container, State(1 + i), "version " + std::to_string(chain[i].id));
    EXPECT_EQ(l->info.base, chain[i].base);
    EXPECT_EQ(l->info.chain_depth, static_cast<int>(i));
    EXPECT_TRUE(s->Verify(chain[i].id, Tier::kLocal).ok());
  }
  auto newest = s->LoadNewestValid();
  ASSERT_TRUE(newest.ok());
  EXPECT_EQ(newest->info.id, chain.back().id);
  ExpectSame(newest->container, State(5));
  // The manifest records the chain.
  std::vector<VersionInfo> list = s->List();
  EXPECT_EQ(list[0].base, chain[3].id);
  EXPECT_EQ(list[0].chain_depth, 4);
}

TEST_F(StoreTest, Q8DeltaChainLoadsWhatWasWritten) {
  // Lossy deltas: each version loads to what its writer's reference held,
  // close to the saved state; optimizer state stays exact.
  auto s = Open();
  std::vector<VersionInfo> chain = WriteChain(*s, 1, 3, Codec::kQ8Delta);
  ASSERT_EQ(chain.size(), 4u);
  for (size_t i = 0; i < chain.size(); ++i) {
    auto l = s->Load(chain[i].id);
    ASSERT_TRUE(l.ok()) << l.status().ToString();
    Container want = State(1 + i);
    EXPECT_TRUE(l->container.Find("optim/w.momentum")->data == want.Find("optim/w.momentum")->data);
    const Record* w = l->container.Find("model/w");
    for (size_t k = 0; k < w->data.size() / 4; ++k) {
      float got, exp;
      std::memcpy(&got, w->data.data() + 4 * k, 4);
      std::memcpy(&exp, want.Find("model/w")->data.data() + 4 * k, 4);
      ASSERT_NEAR(got, exp, 2.0 / 127) << "element " << k;
    }
  }
}

TEST_F(StoreTest, WriteWithAnUnmatchedReferenceIsAFullVersion) {
  // A reference whose records all changed layout: nothing is delta-encoded,
  // the version must stand alone.
  auto s = Open();
  ChunkCodec codec;
  Container reference;
  Container c1;
  c1.AddUninitialized("model/w", DType::kF32, {4});
  auto v1 = s->Write(s->ReserveId(), c1, &reference, -1, 0, SaveRequest{}, codec);
  ASSERT_TRUE(v1.ok());
  Container c2;
  std::span<char> d = c2.AddUninitialized("model/w", DType::kF32, {8});
  std::memset(d.data(), 3, d.size());
  auto v2 = s->Write(s->ReserveId(), c2, &reference, v1->id, 1, SaveRequest{}, codec);
  ASSERT_TRUE(v2.ok()) << v2.status().ToString();
  EXPECT_EQ(v2->base, -1);
  EXPECT_EQ(v2->chain_depth, 0);
  auto l = s->Load(v2->id);
  ASSERT_TRUE(l.ok()) << l.status().ToString();
  EXPECT_TRUE(l->container.Find("model/w")->data == std::string(32, '\3'));
  EXPECT_TRUE(s->Verify(v2->id, Tier::kLocal).ok());
}

TEST_F(StoreTest, BrokenBaseMakesItsDeltasUnusable) {
  auto s = Open();
  std::vector<VersionInfo> a = WriteChain(*s, 1, 2);  // ids 1 (full), 2, 3
  std::vector<VersionInfo> b = WriteChain(*s, 4, 2);  // ids 4 (full), 5, 6
  ASSERT_EQ(b.size(), 3u);
  FlipByte(LocalData(4), 30);
  auto l = s->LoadNewestValid();
  ASSERT_TRUE(l.ok()) << l.status().ToString();
  EXPECT_EQ(l->info.id, 3);
  ExpectSame(l->container, State(3));
  // 6 and 5 for their base, 4 itself.
  EXPECT_TRUE(Contains(l->skipped, "ckpt-000006.bin")) << Join(l->skipped);
  EXPECT_TRUE(Contains(l->skipped, "ckpt-000005.bin")) << Join(l->skipped);
  EXPECT_TRUE(Contains(l->skipped, "base version 4 is unusable")) << Join(l->skipped);
  EXPECT_EQ(s->Load(6).status().code(), StatusCode::kDataLoss);
  EXPECT_EQ(s->Verify(6, Tier::kLocal).code(), StatusCode::kDataLoss);

  // A deleted base, likewise.
  fs::remove(LocalData(2));
  fs::remove(LocalManifest(2));
  l = s->LoadNewestValid();
  ASSERT_TRUE(l.ok()) << l.status().ToString();
  EXPECT_EQ(l->info.id, 1);
}

TEST_F(StoreTest, DeltaBasesResolveAcrossTiers) {
  auto s = Open(Keep(100), true);
  std::vector<VersionInfo> chain = WriteChain(*s, 1, 2);  // 1, 2, 3
  for (const VersionInfo& v : chain) ASSERT_TRUE(s->Replicate(v).ok());
  // The local base is damaged, the durable one is fine; the delta is local.
  FlipByte(LocalData(1), 30);
  fs::remove(DurableData(3));
  fs::remove(durable_ / CheckpointStore::ManifestFileName(3));
  auto l = s->LoadNewestValid();
  ASSERT_TRUE(l.ok()) << l.status().ToString();
  EXPECT_EQ(l->info.id, 3);
  EXPECT_EQ(l->info.tiers, std::vector<Tier>{Tier::kLocal});
  ExpectSame(l->container, State(3));
}

// ---------------------------------------------------------------------------
// Retention.

TEST_F(StoreTest, RetentionKeepsTheLastN) {
  auto s = Open(Keep(2));
  SaveFull(*s, {1, 2, 3, 4, 5});
  EXPECT_EQ(IdsIn(local_), (std::vector<int64_t>{4, 5}));
  auto l = s->LoadNewestValid();
  ASSERT_TRUE(l.ok());
  EXPECT_EQ(l->info.id, 5);
}

TEST_F(StoreTest, RetentionKeepsEveryMth) {
  RetentionPolicy p = Keep(1);
  p.keep_every = 3;
  auto s = Open(p);
  SaveFull(*s, {1, 2, 3, 4, 5, 6, 7, 8});
  EXPECT_EQ(IdsIn(local_), (std::vector<int64_t>{3, 6, 8}));
}

TEST_F(StoreTest, RetentionKeepsTheBestByAMetric) {
  // meta {"acc": seed % 7}: seed 6 (acc 6) is the best, seeds 7 and 14 (acc 0) the worst.
  for (bool higher : {true, false}) {
    SCOPED_TRACE(higher ? "higher is better" : "lower is better");
    fs::remove_all(local_);
    RetentionPolicy p = Keep(1);
    p.best_metric = "acc";
    p.best_higher = higher;
    p.keep_best = 1;
    auto s = Open(p);
    SaveFull(*s, {6, 7, 8, 9, 10}, "acc");  // ids 1..5, acc 6, 0, 1, 2, 3
    std::vector<int64_t> ids = IdsIn(local_);
    EXPECT_EQ(ids, higher ? (std::vector<int64_t>{1, 5}) : (std::vector<int64_t>{2, 5}));
  }
  // keep_best 2, with versions lacking the metric ignored.
  fs::remove_all(local_);
  RetentionPolicy p = Keep(1);
  p.best_metric = "acc";
  p.keep_best = 2;
  auto s = Open(p);
  SaveFull(*s, {6, 7}, "acc");                             // acc 6, 0
  SaveFull(*s, {12, 13, 1});                               // meta {"seed": ...}: no acc
  SaveFull(*s, {8}, "acc");                                // acc 1
  EXPECT_EQ(IdsIn(local_), (std::vector<int64_t>{1, 6}));  // best two: 6 (id 1), 1 (id 6)
}

TEST_F(StoreTest, RetentionDryRunDeletesNothing) {
  auto s = Open(Keep(100));
  SaveFull(*s, {1, 2, 3, 4});
  auto strict = Open(Keep(1));
  auto dropped = strict->ApplyRetention(Tier::kLocal, /*dry_run=*/true);
  ASSERT_TRUE(dropped.ok()) << dropped.status().ToString();
  EXPECT_EQ(*dropped, (std::vector<int64_t>{1, 2, 3}));
  EXPECT_EQ(IdsIn(local_), (std::vector<int64_t>{1, 2, 3, 4}));
  dropped = strict->ApplyRetention(Tier::kLocal);
  ASSERT_TRUE(dropped.ok());
  EXPECT_EQ(*dropped, (std::vector<int64_t>{1, 2, 3}));
  EXPECT_EQ(IdsIn(local_), (std::vector<int64_t>{4}));
}

TEST_F(StoreTest, RetentionNeverDeletesTheBaseChainOfAKeptDelta) {
  auto s = Open(Keep(1));
  WriteChain(*s, 1, 1);                               // 1 full, 2 delta
  std::vector<VersionInfo> b = WriteChain(*s, 3, 3);  // 3 full, 4, 5, 6 deltas
  auto dropped = s->ApplyRetention(Tier::kLocal);
  ASSERT_TRUE(dropped.ok()) << dropped.status().ToString();
  EXPECT_EQ(*dropped, (std::vector<int64_t>{1, 2}));
  EXPECT_EQ(IdsIn(local_), (std::vector<int64_t>{3, 4, 5, 6}));
  auto l = s->LoadNewestValid();
  ASSERT_TRUE(l.ok()) << l.status().ToString();
  EXPECT_EQ(l->info.id, 6);
  ExpectSame(l->container, State(6));

  // The best-by-metric version's chain is kept as well.
  RetentionPolicy p = Keep(1);
  p.best_metric = "acc";
  p.keep_best = 1;
  fs::remove_all(local_);
  auto m = Open(p);
  ChunkCodec codec;
  Container reference;
  int64_t base = -1;
  int depth = 0;
  const double acc[] = {0.1, 0.2, 0.9, 0.3, 0.4};  // id 3 (a delta on 2, on 1) is the best
  for (int i = 0; i < 5; ++i) {
    Container c = State(static_cast<uint64_t>(i + 1));
    SaveRequest req;
    req.step = 10 * (i + 1);
    req.meta_json = "{\"acc\":" + std::to_string(acc[i]) + "}";
    bool full = i == 3;  // id 4 starts a new chain
    auto v = m->Write(m->ReserveId(), c, &reference, full ? -1 : base,
                      full || base < 0 ? 0 : depth + 1, req, codec);
    ASSERT_TRUE(v.ok());
    base = v->id;
    depth = v->chain_depth;
  }
  dropped = m->ApplyRetention(Tier::kLocal);
  ASSERT_TRUE(dropped.ok());
  EXPECT_EQ(*dropped, std::vector<int64_t>{});
  EXPECT_EQ(IdsIn(local_), (std::vector<int64_t>{1, 2, 3, 4, 5}));
  // Replace the newest by a full version: 4 and 5 are no longer needed.
  Container c = State(9);
  SaveRequest req;
  req.step = 90;
  req.meta_json = "{\"acc\":0.5}";
  ASSERT_TRUE(m->Write(m->ReserveId(), c, &reference, -1, 0, req, codec).ok());
  dropped = m->ApplyRetention(Tier::kLocal);
  ASSERT_TRUE(dropped.ok());
  EXPECT_EQ(*dropped, (std::vector<int64_t>{4, 5}));
  EXPECT_EQ(IdsIn(local_), (std::vector<int64_t>{1, 2, 3, 6}));
  auto best = m->Load(3);
  ASSERT_TRUE(best.ok()) << best.status().ToString();
  ExpectSame(best->container, State(3));
}

TEST_F(StoreTest, LocalRetentionKeepsUnreplicatedVersions) {
  auto s = Open(Keep(1), true);
  std::vector<VersionInfo> v = WriteChain(*s, 1, 0);
  std::vector<VersionInfo> w = WriteChain(*s, 2, 0);
  std::vector<VersionInfo> x = WriteChain(*s, 3, 0);  // ids 1, 2, 3: full, none replicated
  auto dropped = s->ApplyRetention(Tier::kLocal);
  ASSERT_TRUE(dropped.ok());
  EXPECT_TRUE(dropped->empty());
  EXPECT_EQ(IdsIn(local_), (std::vector<int64_t>{1, 2, 3}));
  ASSERT_TRUE(s->Replicate(v[0]).ok());
  ASSERT_TRUE(s->Replicate(w[0]).ok());
  dropped = s->ApplyRetention(Tier::kLocal);
  ASSERT_TRUE(dropped.ok());
  EXPECT_EQ(*dropped, (std::vector<int64_t>{1, 2}));
  EXPECT_EQ(IdsIn(local_), (std::vector<int64_t>{3}));  // kept: newest, and unreplicated
  // The durable tier applies its own policy.
  dropped = s->ApplyRetention(Tier::kDurable);
  ASSERT_TRUE(dropped.ok());
  EXPECT_EQ(*dropped, std::vector<int64_t>{1});
  EXPECT_EQ(IdsIn(durable_), std::vector<int64_t>{2});
}

TEST_F(StoreTest, ReplicatingADeltaFirstCopiesABaseWhoseCopyFailed) {
  // Version 2's copy fails; version 3, a delta on it, is copied fine. The
  // durable tier must not end up with a delta whose base it lacks: losing
  // the local disk would then lose every version.
  auto s = Open(Keep(1), true);
  std::vector<VersionInfo> chain = WriteChain(*s, 1, 2);  // 1 full, 2 and 3 deltas
  ASSERT_EQ(chain.size(), 3u);
  ASSERT_TRUE(s->Replicate(chain[0]).ok());
  VersionInfo wrong = chain[1];
  wrong.checksum ^= 1;  // as if the file changed under the copy
  EXPECT_EQ(s->Replicate(wrong).code(), StatusCode::kDataLoss);
  EXPECT_FALSE(fs::exists(DurableData(2)));
  ASSERT_TRUE(s->Replicate(chain[2]).ok());
  EXPECT_EQ(IdsIn(durable_), (std::vector<int64_t>{1, 2, 3}));
  ASSERT_TRUE(s->ApplyRetention(Tier::kDurable).ok());
  ASSERT_TRUE(s->ApplyRetention(Tier::kLocal).ok());
  EXPECT_EQ(IdsIn(durable_), (std::vector<int64_t>{1, 2, 3}));
  s.reset();
  fs::remove_all(local_);
  auto again = Open(Keep(1), true);
  auto l = again->LoadNewestValid();
  ASSERT_TRUE(l.ok()) << l.status().ToString();
  EXPECT_EQ(l->info.id, 3);
  ExpectSame(l->container, State(3));
}

TEST_F(StoreTest, RetentionLeavesASaveInProgressAndDropsOldOrphans) {
  auto s = Open(Keep(1));
  SaveFull(*s, {1, 2, 3});
  // An orphan data file older than the newest version (an interrupted save
  // long ago), and one newer (a save in progress).
  WriteAll(LocalData(2), "orphan");
  WriteAll(LocalData(9), "in progress");
  auto dropped = s->ApplyRetention(Tier::kLocal);
  ASSERT_TRUE(dropped.ok());
  EXPECT_EQ(*dropped, std::vector<int64_t>{2});
  EXPECT_EQ(IdsIn(local_), (std::vector<int64_t>{3, 9}));
}

}  // namespace
}  // namespace spot::ckpt
