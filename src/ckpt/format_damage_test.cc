// The format reader against damage: every truncation, every byte flip,
// random mutations, and index edits that keep a valid checksum. The store's
// check against damaged manifests and data files: store_damage_test.cc.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <cfloat>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <limits>
#include <map>
#include <mutex>
#include <optional>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "ckpt/format.h"
#include "ckpt/format_test_util.h"
#include "ckpt/store.h"
#include "core/temp_dir.h"

namespace spot::ckpt {
namespace {

using namespace format_testing;  // NOLINT: test helpers
namespace fs = std::filesystem;

// ---------------------------------------------------------------------------
// Damage: every truncation and every byte flip must be caught.

struct SmallFiles {
  MemoryBlobStore store;
  std::string full_raw, full_zstd, delta;
  Container base;  // what v1 decodes to (the delta's base)
  Container delta_decoded;
};

std::unique_ptr<SmallFiles> MakeSmallFiles() {
  auto s = std::make_unique<SmallFiles>();
  ChunkCodec codec;
  Container c1 = Make(SmallSpecs(), 11);
  // model/w and optim/m on a coarse grid, so that planes-zstd shrinks them
  // and their chunks are its output (the rest is noise, stored as is).
  for (const char* name : {"model/w", "optim/m"}) {
    std::span<char> d = c1.mutable_data(static_cast<size_t>(c1.FindIndex(name)));
    for (size_t i = 0; i < d.size() / 4; ++i) {
      const float v = 0.25f * static_cast<float>(i % 5) - 0.5f;
      std::memcpy(d.data() + 4 * i, &v, 4);
    }
  }
  Container ref;
  CodecPlan raw;
  raw.full = Codec::kRaw;
  Container scratch;
  Container c1_copy = Clone(c1);
  EXPECT_TRUE(WriteTo(s->store, "raw", c1_copy, raw, &scratch, 1, -1, codec).ok());
  CodecPlan q8;
  q8.delta = Codec::kQ8Delta;
  EXPECT_TRUE(WriteTo(s->store, "zstd", c1, q8, &ref, 1, -1, codec).ok());
  s->base = Clone(ref);
  Container c2 = Next(c1, 12);
  {
    // optim/m changes in one element only: its sub-delta chunk is the
    // codec's output, not stored as is.
    const Record* m1 = c1.Find("optim/m");
    std::span<char> d = c2.mutable_data(static_cast<size_t>(c2.FindIndex("optim/m")));
    std::memcpy(d.data(), m1->data.data(), d.size());
    float v;
    std::memcpy(&v, d.data(), 4);
    v += 0.25f;
    std::memcpy(d.data(), &v, 4);
  }
  EXPECT_TRUE(WriteTo(s->store, "delta", c2, q8, &ref, 2, 1, codec).ok());
  s->delta_decoded = Clone(ref);
  s->full_raw = s->store.blob("raw");
  s->full_zstd = s->store.blob("zstd");
  s->delta = s->store.blob("delta");
  return s;
}

// Opens and decodes `bytes`; the base given when the file asks for one.
Status TryDecode(MemoryBlobStore& store, const std::string& bytes, const Container& base,
                 ChunkCodec& codec, Container* out = nullptr) {
  store.Set("f", bytes);
  auto f = CheckpointFile::Open(store, "f");
  if (!f.ok()) return f.status();
  Container b = Clone(base);
  auto c = f->ReadAll(&b, codec);
  if (!c.ok()) return c.status();
  // A decode that succeeded is consistent with its index.
  if (c->records().size() != f->records().size()) return InternalError("record count");
  for (size_t i = 0; i < f->records().size(); ++i) {
    if (c->records()[i].data.size() != f->records()[i].raw_bytes) return InternalError("size");
  }
  if (!c->VerifyRecords().empty()) return InternalError("checksums");
  if (out) *out = std::move(c).value();
  return Status::Ok();
}

class DamageTest : public ::testing::Test {
 protected:
  void SetUp() override { files_ = MakeSmallFiles(); }

  struct File {
    std::string name;
    const std::string* bytes;
    const Container* base;
  };
  std::vector<File> Files() const {
    static const Container kNone;
    return {{"raw", &files_->full_raw, &kNone},
            {"zstd", &files_->full_zstd, &kNone},
            {"delta", &files_->delta, &files_->base}};
  }

  std::unique_ptr<SmallFiles> files_;
  MemoryBlobStore scratch_;
  ChunkCodec codec_;
};

TEST_F(DamageTest, IntactFilesDecode) {
  for (const File& f : Files()) {
    Container got;
    Status s = TryDecode(scratch_, *f.bytes, *f.base, codec_, &got);
    ASSERT_TRUE(s.ok()) << f.name << ": " << s.ToString();
    if (f.name == "delta") ExpectSame(got, files_->delta_decoded, "delta");
    if (f.name != "delta") ExpectSame(got, files_->base, f.name);
  }
  // The delta file really has delta records of both kinds.
  scratch_.Set("f", files_->delta);
  auto f = CheckpointFile::Open(scratch_, "f");
  ASSERT_TRUE(f.ok());
  std::set<Codec> codecs;
  for (const RecordEntry& e : f->records()) codecs.insert(e.codec);
  EXPECT_TRUE(codecs.count(Codec::kQ8Delta));
  EXPECT_TRUE(codecs.count(Codec::kSubDelta));
}

TEST_F(DamageTest, EveryTruncationIsDataLoss) {
  for (const File& f : Files()) {
    for (size_t len = 0; len < f.bytes->size(); ++len) {
      Status s = TryDecode(scratch_, f.bytes->substr(0, len), *f.base, codec_);
      ASSERT_EQ(s.code(), StatusCode::kDataLoss)
          << f.name << " truncated to " << len << ": " << s.ToString();
    }
  }
}

TEST_F(DamageTest, EveryByteFlipIsDataLoss) {
  for (const File& f : Files()) {
    for (size_t i = 0; i < f.bytes->size(); ++i) {
      for (unsigned mask : {0x01u, 0x80u}) {
        std::string b = *f.bytes;
        b[i] = static_cast<char>(b[i] ^ mask);
        Status s = TryDecode(scratch_, b, *f.base, codec_);
        ASSERT_EQ(s.code(), StatusCode::kDataLoss)
            << f.name << " byte " << i << " ^ " << mask << " of " << f.bytes->size() << ": "
            << s.ToString();
      }
    }
  }
}

TEST_F(DamageTest, AppendedBytesAreDataLoss) {
  for (const File& f : Files()) {
    for (size_t extra : {1, 7, 32, 100}) {
      Status s = TryDecode(scratch_, *f.bytes + std::string(extra, '\0'), *f.base, codec_);
      EXPECT_EQ(s.code(), StatusCode::kDataLoss) << f.name << " + " << extra;
    }
  }
}

TEST_F(DamageTest, RandomMutationsAreDataLoss) {
  std::mt19937_64 rng(20240601);
  for (const File& f : Files()) {
    int tried = 0;
    for (int k = 0; k < 1500; ++k) {
      std::string b = *f.bytes;
      switch (rng() % 4) {
        case 0: {  // overwrite a few bytes
          int n = 1 + static_cast<int>(rng() % 8);
          for (int j = 0; j < n; ++j) b[rng() % b.size()] = static_cast<char>(rng());
          break;
        }
        case 1: {  // overwrite a run
          size_t at = rng() % b.size();
          size_t n = std::min<size_t>(1 + rng() % 16, b.size() - at);
          for (size_t j = 0; j < n; ++j) b[at + j] = static_cast<char>(rng());
          break;
        }
        case 2: {  // insert bytes
          size_t at = rng() % (b.size() + 1);
          b.insert(at, std::string(1 + rng() % 8, static_cast<char>(rng())));
          break;
        }
        default: {  // delete bytes
          size_t at = rng() % b.size();
          b.erase(at, 1 + rng() % 8);
          break;
        }
      }
      if (b == *f.bytes) continue;
      ++tried;
      Status s = TryDecode(scratch_, b, *f.base, codec_);
      ASSERT_EQ(s.code(), StatusCode::kDataLoss)
          << f.name << " mutation " << k << ": " << s.ToString();
    }
    EXPECT_GT(tried, 1400);
  }
}

// ---------------------------------------------------------------------------
// A damaged index with a valid checksum: the structural checks must hold.

struct Located {
  uint64_t index_offset, index_bytes;
};

Located Locate(const std::string& file) {
  Located l;
  std::memcpy(&l.index_offset, file.data() + file.size() - kFooterBytes, 8);
  std::memcpy(&l.index_bytes, file.data() + file.size() - kFooterBytes + 8, 8);
  return l;
}

// `file` with its index replaced by `index` and the footer patched to match,
// checksum included.
std::string WithIndex(const std::string& file, const std::string& index) {
  Located l = Locate(file);
  std::string out = file.substr(0, l.index_offset) + index;
  auto put = [&](uint64_t v) { out.append(reinterpret_cast<const char*>(&v), 8); };
  put(l.index_offset);
  put(index.size());
  put(IndexChecksum(std::string_view(file).substr(0, kHeaderBytes), index));
  out.append(kFooterMagic);
  return out;
}

std::string IndexOf(const std::string& file) {
  Located l = Locate(file);
  return file.substr(l.index_offset, l.index_bytes);
}

// The index, parsed the way docs/checkpoint-format.md lays it out, to be
// edited field by field and serialized again.
struct IndexModel {
  struct Entry {
    std::string name;
    uint8_t dtype, codec;
    std::vector<int64_t> shape;
    uint64_t raw_bytes, raw_checksum;
    std::vector<ChunkRef> chunks;
  };
  int64_t id, base;
  uint32_t chunk_bytes;
  std::vector<Entry> entries;
  std::string trailing;

  static IndexModel Parse(const std::string& index) {
    IndexModel m;
    size_t pos = 0;
    auto get = [&](auto* v) {
      std::memcpy(v, index.data() + pos, sizeof(*v));
      pos += sizeof(*v);
    };
    uint32_t count;
    get(&m.id);
    get(&m.base);
    get(&m.chunk_bytes);
    get(&count);
    for (uint32_t i = 0; i < count; ++i) {
      Entry e;
      uint32_t len;
      get(&len);
      e.name = index.substr(pos, len);
      pos += len;
      uint8_t ndim;
      get(&e.dtype);
      get(&e.codec);
      get(&ndim);
      e.shape.resize(ndim);
      for (int64_t& d : e.shape) get(&d);
      get(&e.raw_bytes);
      get(&e.raw_checksum);
      uint32_t chunks;
      get(&chunks);
      e.chunks.resize(chunks);
      for (ChunkRef& c : e.chunks) {
        get(&c.offset);
        get(&c.stored_bytes);
        get(&c.checksum);
      }
      m.entries.push_back(std::move(e));
    }
    EXPECT_EQ(pos, index.size());
    return m;
  }

  std::string Serialize(std::optional<uint32_t> count = std::nullopt) const {
    std::string out;
    auto put = [&](auto v) { out.append(reinterpret_cast<const char*>(&v), sizeof(v)); };
    put(id);
    put(base);
    put(chunk_bytes);
    put(count.value_or(static_cast<uint32_t>(entries.size())));
    for (const Entry& e : entries) {
      put(static_cast<uint32_t>(e.name.size()));
      out.append(e.name);
      put(e.dtype);
      put(e.codec);
      put(static_cast<uint8_t>(e.shape.size()));
      for (int64_t d : e.shape) put(d);
      put(e.raw_bytes);
      put(e.raw_checksum);
      put(static_cast<uint32_t>(e.chunks.size()));
      for (const ChunkRef& c : e.chunks) {
        put(c.offset);
        put(c.stored_bytes);
        put(c.checksum);
      }
    }
    out.append(trailing);
    return out;
  }

  Entry& Find(std::string_view name) {
    for (Entry& e : entries) {
      if (e.name == name) return e;
    }
    ADD_FAILURE() << "no entry " << name;
    return entries[0];
  }
};

TEST_F(DamageTest, IndexModelRoundTrips) {
  for (const File& f : Files()) {
    std::string index = IndexOf(*f.bytes);
    EXPECT_EQ(IndexModel::Parse(index).Serialize(), index) << f.name;
    EXPECT_EQ(WithIndex(*f.bytes, index), *f.bytes) << f.name;
  }
}

TEST_F(DamageTest, StructurallyBadIndexesAreDataLoss) {
  struct Case {
    const char* what;
    const char* file;
    std::function<void(IndexModel&)> edit;
    std::function<uint32_t(uint32_t)> count;  // the record count to write, from the real one
  };
  const uint64_t kMax = std::numeric_limits<uint64_t>::max();
  std::vector<Case> cases = {
      {"negative id", "zstd", [](IndexModel& m) { m.id = -1; }, {}},
      {"base below -1", "zstd", [](IndexModel& m) { m.base = -2; }, {}},
      {"base equal to id", "delta", [](IndexModel& m) { m.base = m.id; }, {}},
      {"base above id", "delta", [](IndexModel& m) { m.base = m.id + 5; }, {}},
      {"chunk size 0", "zstd", [](IndexModel& m) { m.chunk_bytes = 0; }, {}},
      {"chunk size not a multiple of q8 blocks",
       "zstd",
       [](IndexModel& m) { m.chunk_bytes = 1000; },
       {}},
      {"count one more", "zstd", [](IndexModel&) {}, [](uint32_t n) { return n + 1; }},
      {"count one less", "zstd", [](IndexModel&) {}, [](uint32_t n) { return n - 1; }},
      {"count huge", "zstd", [](IndexModel&) {}, [](uint32_t) { return 0xffffffffu; }},
      {"count zero", "zstd", [](IndexModel&) {}, [](uint32_t) { return 0u; }},
      {"trailing bytes", "zstd", [](IndexModel& m) { m.trailing = "x"; }, {}},
      {"bad dtype", "zstd", [](IndexModel& m) { m.Find("model/i").dtype = kNumDTypes; }, {}},
      {"bad codec", "zstd", [](IndexModel& m) { m.Find("model/i").codec = kNumCodecs; }, {}},
      {"delta codec in a full version",
       "zstd",
       [](IndexModel& m) { m.Find("model/w").codec = static_cast<uint8_t>(Codec::kXorDelta); },
       {}},
      {"q8 on integers",
       "delta",
       [](IndexModel& m) { m.Find("model/i").codec = static_cast<uint8_t>(Codec::kQ8Delta); },
       {}},
      {"17 dimensions",
       "zstd",
       [](IndexModel& m) { m.Find("model/empty").shape = std::vector<int64_t>(17, 0); },
       {}},
      {"negative dimension",
       "zstd",
       [](IndexModel& m) {
         auto& e = m.Find("model/w");
         e.shape = {-8, -8};
       },
       {}},
      {"shape does not match bytes",
       "zstd",
       [](IndexModel& m) {
         m.Find("model/w").shape = {8, 9};
       },
       {}},
      {"dimensions overflow",
       "zstd",
       [](IndexModel& m) {
         auto& e = m.Find("model/empty");
         e.shape = {int64_t{1} << 62, 8};
         e.raw_bytes = 0;
       },
       {}},
      // 0xffffffff * 0x100000001 = 2^64 - 1 bytes: no overflow in the product,
      // but rounding up to whole chunks wraps around to 0 chunks.
      {"bytes just below 2^64 with no chunks",
       "zstd",
       [kMax](IndexModel& m) {
         auto& e = m.Find("model/empty");
         e.dtype = static_cast<uint8_t>(DType::kU8);
         e.shape = {0xffffffffLL, 0x100000001LL};
         e.raw_bytes = kMax;
       },
       {}},
      {"bytes 2^63 with no chunks",
       "zstd",
       [](IndexModel& m) {
         auto& e = m.Find("model/empty");
         e.dtype = static_cast<uint8_t>(DType::kU8);
         e.shape = {int64_t{1} << 62, 2};
         e.raw_bytes = uint64_t{1} << 63;
       },
       {}},
      {"too few chunks",
       "zstd",
       [](IndexModel& m) {
         auto& w = m.Find("model/w");
         auto& b = m.Find("model/b");
         // Move w's chunk into b so the chunks still tile the file.
         b.chunks.insert(b.chunks.begin(), w.chunks.begin(), w.chunks.end());
         w.chunks.clear();
       },
       {}},
      {"raw chunk of the wrong size",
       "raw",
       [](IndexModel& m) {
         m.Find("model/w").chunks[0].stored_bytes -= 4;
         m.Find("model/b").chunks[0].offset -= 4;
         m.Find("model/b").chunks[0].stored_bytes += 4;
       },
       {}},
      {"chunk larger than the file",
       "zstd",
       [](IndexModel& m) { m.Find("model/w").chunks[0].stored_bytes = uint64_t{1} << 40; },
       {}},
      {"chunk size wraps the tiling",
       "zstd",
       [kMax](IndexModel& m) { m.Find("model/w").chunks[0].stored_bytes = kMax; },
       {}},
      {"chunk that cannot expand enough",
       "zstd",
       [](IndexModel& m) {
         auto& e = m.Find("model/empty");
         e.dtype = static_cast<uint8_t>(DType::kU8);
         e.shape = {int64_t{4} << 20};
         e.raw_bytes = uint64_t{4} << 20;
         e.chunks = {ChunkRef{0, 0, Checksum("")}};
       },
       {}},
      {"chunks out of order",
       "zstd",
       [](IndexModel& m) {
         std::swap(m.Find("model/w").chunks[0].offset, m.Find("model/b").chunks[0].offset);
       },
       {}},
      {"chunk overlaps the index",
       "zstd",
       [](IndexModel& m) { m.entries.back().chunks[0].stored_bytes += 1; },
       {}},
      {"gap before the index",
       "zstd",
       [](IndexModel& m) { m.entries.back().chunks[0].stored_bytes -= 1; },
       {}},
      {"duplicate names", "zstd", [](IndexModel& m) { m.Find("model/b").name = "model/w"; }, {}},
      {"name too long",
       "zstd",
       [](IndexModel& m) { m.Find("model/b").name = std::string(5000, 'n'); },
       {}},
      {"wrong raw checksum",
       "zstd",
       [](IndexModel& m) { m.Find("model/w").raw_checksum ^= 1; },
       {}},
      {"wrong chunk checksum",
       "zstd",
       [](IndexModel& m) { m.Find("model/w").chunks[0].checksum ^= 1; },
       {}},
      {"wrong codec (raw for zstd)",
       "zstd",
       [](IndexModel& m) { m.Find("model/w").codec = static_cast<uint8_t>(Codec::kRaw); },
       {}},
      {"wrong codec (xor for q8)",
       "delta",
       [](IndexModel& m) { m.Find("model/w").codec = static_cast<uint8_t>(Codec::kXorDelta); },
       {}},
      {"wrong codec (q8 for xor)",
       "delta",
       [](IndexModel& m) { m.Find("optim/m").codec = static_cast<uint8_t>(Codec::kQ8Delta); },
       {}},
      {"another element size, same bytes",
       "zstd",
       [](IndexModel& m) {
         auto& e = m.Find("model/w");
         e.dtype = static_cast<uint8_t>(DType::kI16);
         e.shape = {8, 16};
       },
       {}},
  };
  const std::vector<File> files = Files();
  for (const Case& c : cases) {
    const File* file = nullptr;
    for (const File& f : files) {
      if (f.name == c.file) file = &f;
    }
    ASSERT_NE(file, nullptr);
    IndexModel m = IndexModel::Parse(IndexOf(*file->bytes));
    c.edit(m);
    std::optional<uint32_t> count;
    if (c.count) count = c.count(static_cast<uint32_t>(m.entries.size()));
    std::string bytes = WithIndex(*file->bytes, m.Serialize(count));
    Status s = TryDecode(scratch_, bytes, *file->base, codec_);
    EXPECT_EQ(s.code(), StatusCode::kDataLoss) << c.what << ": " << s.ToString();
    if (s.code() == StatusCode::kDataLoss) {
      EXPECT_NE(s.message().find("mem:f"), std::string::npos) << c.what << ": " << s.message();
    }
  }
}

TEST_F(DamageTest, ConsistentIndexEditsStillDecode) {
  // Format 3: a chunk stored at its raw size is stored as is whatever its
  // record's codec, so another codec for a raw record changes nothing.
  {
    IndexModel m = IndexModel::Parse(IndexOf(files_->full_raw));
    m.Find("model/b").codec = static_cast<uint8_t>(Codec::kShuffleZstd);
    Container got;
    Status s =
        TryDecode(scratch_, WithIndex(files_->full_raw, m.Serialize()), Container(), codec_, &got);
    ASSERT_TRUE(s.ok()) << s.ToString();
    EXPECT_TRUE(got.Find("model/b")->data == files_->base.Find("model/b")->data);
  }
  // Edits that leave a consistent file: renaming a record, a smaller chunk
  // size that still holds each record in one chunk.
  IndexModel m = IndexModel::Parse(IndexOf(files_->full_zstd));
  m.Find("model/w").name = "model/renamed";
  m.chunk_bytes = 2048;
  Container got;
  Status s =
      TryDecode(scratch_, WithIndex(files_->full_zstd, m.Serialize()), Container(), codec_, &got);
  ASSERT_TRUE(s.ok()) << s.ToString();
  ASSERT_NE(got.Find("model/renamed"), nullptr);
  EXPECT_TRUE(got.Find("model/renamed")->data == files_->base.Find("model/w")->data);
}

// Mutates index fields in place (bytes and machine words at every offset),
// patches the checksum, and requires a clean result: DataLoss, or a
// consistent decode. Run under ASan this also checks for memory errors.
TEST_F(DamageTest, IndexMutationsWithValidChecksumFailCleanly) {
  const uint64_t kWords[] = {0,
                             1,
                             2,
                             0x7f,
                             0xff,
                             0x800,
                             0xffff,
                             0x10000,
                             0x7fffffff,
                             0x80000000,
                             0xffffffff,
                             0x100000000ULL,
                             0x7fffffffffffffffULL,
                             0x8000000000000000ULL,
                             0xfffffffffffffff8ULL,
                             0xffffffffffffffffULL};
  int decoded_ok = 0, failed = 0;
  for (const File& f : Files()) {
    const std::string index = IndexOf(*f.bytes);
    auto check = [&](const std::string& mutated, const std::string& what) {
      if (mutated == index) return;
      Status s = TryDecode(scratch_, WithIndex(*f.bytes, mutated), *f.base, codec_);
      if (s.ok()) {
        ++decoded_ok;
      } else {
        ++failed;
        ASSERT_EQ(s.code(), StatusCode::kDataLoss) << f.name << " " << what << ": " << s.ToString();
      }
    };
    for (size_t i = 0; i < index.size(); ++i) {
      for (int v : {0x00, 0xff, 0x7f, 0x80, 0x01}) {
        std::string b = index;
        b[i] = static_cast<char>(v);
        check(b, "byte " + std::to_string(i) + " = " + std::to_string(v));
      }
      for (int delta : {1, -1}) {
        std::string b = index;
        b[i] = static_cast<char>(b[i] + delta);
        check(b, "byte " + std::to_string(i) + " + " + std::to_string(delta));
      }
      for (size_t width : {4, 8}) {
        if (i + width > index.size()) continue;
        for (uint64_t w : kWords) {
          std::string b = index;
          std::memcpy(b.data() + i, &w, width);
          check(b, "word" + std::to_string(width) + " at " + std::to_string(i) + " = " +
                       std::to_string(w));
        }
      }
    }
    // Random multi-field damage.
    std::mt19937_64 rng(99);
    for (int k = 0; k < 1500; ++k) {
      std::string b = index;
      int n = 1 + static_cast<int>(rng() % 4);
      for (int j = 0; j < n; ++j) {
        size_t at = rng() % b.size();
        if (rng() % 2 && at + 8 <= b.size()) {
          uint64_t w = kWords[rng() % std::size(kWords)];
          std::memcpy(b.data() + at, &w, 1 + rng() % 8);
        } else {
          b[at] = static_cast<char>(rng());
        }
      }
      if (rng() % 8 == 0) b.resize(rng() % b.size());  // and truncate
      check(b, "random " + std::to_string(k));
    }
  }
  EXPECT_GT(failed, 1000);
  // A few edits are harmless (a name's byte, a base id a full file ignores).
  EXPECT_GT(decoded_ok, 0);
}

}  // namespace
}  // namespace spot::ckpt
