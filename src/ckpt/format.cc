#include "ckpt/format.h"

#include <fmt/format.h>
#include <sys/mman.h>
#include <unistd.h>
#include <xxhash.h>
#if defined(__x86_64__)
// XXH3 on the widest vectors the CPU has (AVX2, AVX-512), chosen at run time:
// the same hashes, 1.7x the speed of the baseline SSE2 build here.
#include <xxh_x86dispatch.h>
#endif

#include <algorithm>
#include <atomic>
#include <cfloat>
#include <cmath>
#include <cstring>
#include <limits>
#include <map>
#include <memory>
#include <new>
#include <system_error>
#include <thread>
#include <unordered_map>
#include <unordered_set>

namespace spot::ckpt {
namespace {

constexpr size_t kMaxNameBytes = 4096;
constexpr size_t kMaxDims = 16;
// An index entry with an empty name, no dimensions and no chunks.
constexpr size_t kMinEntryBytes = 4 + 1 + 1 + 1 + 8 + 8 + 4;
constexpr uint64_t kMaxIndexBytes = uint64_t{256} << 20;
// No codec expands a chunk more than this: an unchanged 4 MiB f64 chunk stores
// as 41 bytes under q8-delta (about 1:100,000); 1 << 20 leaves margin.
constexpr uint64_t kMaxExpansion = uint64_t{1} << 20;

template <typename T>
void Put(std::string* out, T v) {
  char b[sizeof(T)];
  std::memcpy(b, &v, sizeof(T));  // the format is little-endian, as is every target here
  out->append(b, sizeof(T));
}

// Bounds-checked little-endian reader over a byte range.
class Reader {
 public:
  explicit Reader(std::string_view b) : b_(b) {}
  template <typename T>
  bool Get(T* v) {
    if (b_.size() - pos_ < sizeof(T)) return false;
    std::memcpy(v, b_.data() + pos_, sizeof(T));
    pos_ += sizeof(T);
    return true;
  }
  bool GetString(size_t n, std::string* s) {
    if (b_.size() - pos_ < n) return false;
    s->assign(b_.data() + pos_, n);
    pos_ += n;
    return true;
  }
  bool done() const { return pos_ == b_.size(); }

 private:
  std::string_view b_;
  size_t pos_ = 0;
};

// Appends to a BlobWriter while hashing and counting.
class HashingWriter {
 public:
  explicit HashingWriter(BlobWriter& out) : out_(out), st_(XXH3_createState()) {
    XXH3_64bits_reset(st_);
  }
  ~HashingWriter() { XXH3_freeState(st_); }
  Status Append(std::string_view d) {
    XXH3_64bits_update(st_, d.data(), d.size());
    offset_ += d.size();
    return out_.Append(d);
  }
  uint64_t offset() const { return offset_; }
  uint64_t digest() const { return XXH3_64bits_digest(st_); }

 private:
  BlobWriter& out_;
  XXH3_state_t* st_;
  uint64_t offset_ = 0;
};

bool SameLayout(const Record& a, const Record& b) {
  return a.dtype == b.dtype && a.shape == b.shape;
}

// Whether q8-delta can encode `raw` against `base`. The codec refuses
// non-finite values (and, for f64, differences too large for an f32 scale);
// such a record goes lossless instead of failing the whole save.
bool Q8CanEncode(DType t, std::string_view raw, std::string_view base) {
  auto all_finite = [](std::string_view b, size_t es, uint64_t exp_mask) {
    for (size_t i = 0; i + es <= b.size(); i += es) {
      uint64_t bits = 0;
      std::memcpy(&bits, b.data() + i, es);
      if ((bits & exp_mask) == exp_mask) return false;  // infinity or NaN
    }
    return true;
  };
  switch (t) {
    case DType::kF16:
      return all_finite(raw, 2, 0x7c00) && all_finite(base, 2, 0x7c00);
    case DType::kBF16:
      return all_finite(raw, 2, 0x7f80) && all_finite(base, 2, 0x7f80);
    case DType::kF32:
      return all_finite(raw, 4, 0x7f800000) && all_finite(base, 4, 0x7f800000);
    case DType::kF64:
      for (size_t i = 0; i + 8 <= raw.size() && i + 8 <= base.size(); i += 8) {
        double a, b;
        std::memcpy(&a, raw.data() + i, 8);
        std::memcpy(&b, base.data() + i, 8);
        if (!(std::fabs(a - b) / 127 <= FLT_MAX)) return false;  // NaN fails too
      }
      return true;
    default:
      return false;
  }
}

// Whether a chunk of `raw` bytes whose codec stored it in `encoded` bytes is
// better stored as is. Always when the codec saved nothing: in format 3 a
// chunk stored at its raw size is a raw chunk, so no codec's output may be.
bool StoreRaw(size_t encoded, size_t raw, double raw_below_saving) {
  if (encoded >= raw) return true;
  return static_cast<double>(raw - encoded) < raw_below_saving * static_cast<double>(raw);
}

Codec DeltaCodecFor(const Record& r, std::string_view base, const CodecPlan& plan) {
  if (plan.delta != Codec::kQ8Delta) return plan.delta;
  if (!SupportsQ8(r.dtype)) return plan.lossless_delta;
  if (r.name.starts_with("optim/") && !plan.q8_optimizer_state) return plan.lossless_delta;
  if (!Q8CanEncode(r.dtype, r.data, base)) return plan.lossless_delta;
  return Codec::kQ8Delta;
}

}  // namespace

uint64_t IndexChecksum(std::string_view header, std::string_view index) {
  uint32_t version = 0;
  if (header.size() >= 12) std::memcpy(&version, header.data() + 8, 4);
  if (version < 3) return Checksum(index);
  std::unique_ptr<XXH3_state_t, decltype(&XXH3_freeState)> st(XXH3_createState(), &XXH3_freeState);
  if (!st) throw std::bad_alloc();
  XXH3_64bits_reset(st.get());
  XXH3_64bits_update(st.get(), header.data(), header.size());
  XXH3_64bits_update(st.get(), index.data(), index.size());
  return XXH3_64bits_digest(st.get());
}

uint64_t RecordEntry::stored_bytes() const {
  uint64_t n = 0;
  for (const ChunkRef& c : chunks) n += c.stored_bytes;
  return n;
}

Result<WrittenFile> WriteCheckpointFile(Container& c, const CodecPlan& plan, Container* reference,
                                        int64_t id, int64_t base_id, ChunkCodec& codec,
                                        BlobWriter& out) {
  if (IsDelta(plan.full)) {
    return InvalidArgumentError("a full record's codec must be raw, shuffle-zstd or planes-zstd");
  }
  if (!IsDelta(plan.delta)) return InvalidArgumentError("the delta codec must be a delta codec");
  if (!IsDelta(plan.lossless_delta) || plan.lossless_delta == Codec::kQ8Delta) {
    return InvalidArgumentError("the lossless delta codec must be xor-delta or sub-delta");
  }
  if (!(plan.raw_below_saving >= 0 && plan.raw_below_saving < 1)) {
    return InvalidArgumentError(
        fmt::format("raw_below_saving {} is not in [0, 1)", plan.raw_below_saving));
  }
  // No reference: a full version written once (a durable copy written in
  // full), with no next delta to prepare for.
  const bool delta_version = base_id >= 0 && reference != nullptr && !reference->empty();
  HashingWriter w(out);
  std::string header(kMagic);
  Put<uint32_t>(&header, kFormatVersion);
  Put<uint32_t>(&header, 0);  // flags
  SPOT_RETURN_IF_ERROR(w.Append(header));

  WrittenFile f;
  std::map<std::string_view, int> codec_counts;
  std::vector<RecordEntry> entries;
  entries.reserve(c.records().size());
  Container next_reference;
  std::string stored;
  for (size_t i = 0; i < c.records().size(); ++i) {
    Record& r = c.mutable_record(i);
    int base_idx = delta_version ? reference->FindIndex(r.name) : -1;
    if (base_idx >= 0 && !SameLayout(reference->records()[base_idx], r)) base_idx = -1;
    RecordEntry e;
    e.name = r.name;
    e.dtype = r.dtype;
    e.shape = r.shape;
    e.raw_bytes = r.data.size();
    e.codec = base_idx >= 0
                  ? DeltaCodecFor(r, reference->records()[static_cast<size_t>(base_idx)].data, plan)
                  : plan.full;
    // The reference's storage for this record: the base's bytes (updated in
    // place by q8-delta), reused for a full record of the same size.
    Buffer ref_storage;
    if (reference == nullptr) {
      // Nothing to keep: full codecs read no base.
    } else if (base_idx >= 0) {
      ref_storage = reference->ReleaseStorage(static_cast<size_t>(base_idx));
    } else if (int j = reference->FindIndex(r.name);
               j >= 0 && reference->records()[j].data.size() == r.data.size()) {
      ref_storage = reference->ReleaseStorage(static_cast<size_t>(j));
    } else {
      ref_storage.resize(r.data.size());
    }
    for (uint64_t pos = 0; pos < r.data.size(); pos += kChunkBytes) {
      size_t n = static_cast<size_t>(std::min<uint64_t>(kChunkBytes, r.data.size() - pos));
      std::span<const char> raw(r.data.data() + pos, n);
      std::span<char> base =
          reference ? std::span<char>(ref_storage.data() + pos, n) : std::span<char>();
      Status st = codec.Encode(e.codec, r.dtype, raw, base, &stored);
      if (!st.ok()) return st.WithContext("record " + r.name);
      if (StoreRaw(stored.size(), n, plan.raw_below_saving)) {
        // Stored as is: a reader's copy is the decoded bytes, with no decode.
        stored.assign(raw.data(), n);
        if (e.codec == Codec::kQ8Delta) std::memcpy(base.data(), raw.data(), n);
        ++f.raw_chunks;
      }
      e.chunks.push_back({w.offset(), stored.size(), Checksum(stored)});
      SPOT_RETURN_IF_ERROR(w.Append(stored));
    }
    if (reference != nullptr && e.codec != Codec::kQ8Delta && !r.data.empty()) {
      std::memcpy(ref_storage.data(), r.data.data(), r.data.size());
    }
    r.checksum = Checksum(r.data);
    e.raw_checksum = e.codec == Codec::kQ8Delta ? Checksum(ref_storage) : r.checksum;
    if (reference != nullptr) {
      next_reference.AddWithStorage(r.name, r.dtype, r.shape, std::move(ref_storage));
      next_reference.mutable_record(i).checksum = e.raw_checksum;
    }
    ++codec_counts[CodecName(e.codec)];
    if (IsDelta(e.codec)) ++f.delta_records;
    f.payload_bytes += e.raw_bytes;
    entries.push_back(std::move(e));
  }

  std::string index;
  Put<int64_t>(&index, id);
  // A version without delta records depends on no base, whatever was asked.
  Put<int64_t>(&index, f.delta_records > 0 ? base_id : -1);
  Put<uint32_t>(&index, static_cast<uint32_t>(kChunkBytes));
  Put<uint32_t>(&index, static_cast<uint32_t>(entries.size()));
  for (const RecordEntry& e : entries) {
    Put<uint32_t>(&index, static_cast<uint32_t>(e.name.size()));
    index.append(e.name);
    Put<uint8_t>(&index, static_cast<uint8_t>(e.dtype));
    Put<uint8_t>(&index, static_cast<uint8_t>(e.codec));
    Put<uint8_t>(&index, static_cast<uint8_t>(e.shape.size()));
    for (int64_t d : e.shape) Put<int64_t>(&index, d);
    Put<uint64_t>(&index, e.raw_bytes);
    Put<uint64_t>(&index, e.raw_checksum);
    Put<uint32_t>(&index, static_cast<uint32_t>(e.chunks.size()));
    for (const ChunkRef& ch : e.chunks) {
      Put<uint64_t>(&index, ch.offset);
      Put<uint64_t>(&index, ch.stored_bytes);
      Put<uint64_t>(&index, ch.checksum);
    }
  }
  f.index_checksum = IndexChecksum(header, index);
  std::string footer;
  Put<uint64_t>(&footer, w.offset());
  Put<uint64_t>(&footer, index.size());
  Put<uint64_t>(&footer, f.index_checksum);
  footer.append(kFooterMagic);
  SPOT_RETURN_IF_ERROR(w.Append(index));
  SPOT_RETURN_IF_ERROR(w.Append(footer));

  if (reference != nullptr) *reference = std::move(next_reference);
  f.file_bytes = w.offset();
  f.checksum = w.digest();
  f.records = static_cast<int>(entries.size());
  for (const auto& [name, n] : codec_counts) {
    f.codecs += fmt::format("{}{}:{}", f.codecs.empty() ? "" : ",", name, n);
  }
  return f;
}

Result<CheckpointFile> CheckpointFile::Open(const BlobStore& store, const std::string& name) {
  CheckpointFile f;
  f.source_ = store.Describe(name);
  auto fail = [&](const std::string& why) { return DataLossError(f.source_ + ": " + why); };
  auto reader = store.OpenReader(name);
  if (!reader.ok()) {
    if (reader.status().code() == StatusCode::kNotFound) return fail("data file is missing");
    return reader.status();
  }
  f.reader_ = std::move(reader).value();
  f.file_bytes_ = f.reader_->size();
  if (f.file_bytes_ < kHeaderBytes + kFooterBytes) {
    return fail(fmt::format("truncated: {} bytes is smaller than any checkpoint", f.file_bytes_));
  }
  char header[kHeaderBytes], footer[kFooterBytes];
  SPOT_RETURN_IF_ERROR(f.reader_->ReadInto(0, header));
  SPOT_RETURN_IF_ERROR(f.reader_->ReadInto(f.file_bytes_ - kFooterBytes, footer));
  if (std::string_view(header, 8) != kMagic) return fail("not a checkpoint (bad magic)");
  uint32_t version, flags;
  std::memcpy(&version, header + 8, 4);
  std::memcpy(&flags, header + 12, 4);
  if (version < kOldestFormatVersion || version > kFormatVersion) {
    return fail(fmt::format("format version {} is not supported (this build reads {} to {})",
                            version, kOldestFormatVersion, kFormatVersion));
  }
  f.version_ = version;
  if (flags != 0) return fail(fmt::format("unknown flags {:#x}", flags));
  if (std::string_view(footer + 24, 8) != kFooterMagic) {
    return fail("truncated or damaged: footer magic missing");
  }
  uint64_t index_offset, index_bytes, index_sum;
  std::memcpy(&index_offset, footer, 8);
  std::memcpy(&index_bytes, footer + 8, 8);
  std::memcpy(&index_sum, footer + 16, 8);
  if (index_offset < kHeaderBytes || index_bytes > kMaxIndexBytes ||
      index_offset > f.file_bytes_ - kFooterBytes ||
      index_bytes != f.file_bytes_ - kFooterBytes - index_offset) {
    return fail("footer does not locate the index inside the file");
  }
  std::string index(index_bytes, '\0');
  SPOT_RETURN_IF_ERROR(f.reader_->ReadInto(index_offset, std::span<char>(index)));
  if (const uint64_t got = IndexChecksum({header, kHeaderBytes}, index); got != index_sum) {
    return fail(fmt::format("index checksum mismatch: footer says {:016x}, bytes give {:016x}",
                            index_sum, got));
  }
  f.index_checksum_ = index_sum;
  Status st = f.Parse(index);
  if (!st.ok()) return fail(st.message());
  // The chunks must tile [header, index) exactly: no byte is left unchecked.
  uint64_t next = kHeaderBytes;
  for (const RecordEntry& e : f.records_) {
    for (const ChunkRef& c : e.chunks) {
      if (c.offset != next) return fail(fmt::format("record '{}': chunk out of place", e.name));
      next += c.stored_bytes;
    }
  }
  if (next != index_offset) return fail("chunks do not end where the index begins");
  return f;
}

Status CheckpointFile::Parse(std::string_view index) {
  Reader rd(index);
  uint32_t count = 0;
  if (!rd.Get(&id_) || !rd.Get(&base_id_) || !rd.Get(&chunk_bytes_) || !rd.Get(&count)) {
    return DataLossError("index header is malformed");
  }
  if (id_ < 0 || base_id_ < -1 || base_id_ >= id_) {
    return DataLossError(fmt::format("bad version id {} or base {}", id_, base_id_));
  }
  if (chunk_bytes_ == 0 || chunk_bytes_ % (kQ8Block * 8) != 0) {
    return DataLossError(fmt::format("bad chunk size {}", chunk_bytes_));
  }
  // Each entry takes at least kMinEntryBytes: this bounds what reserve() allocates.
  if (count > index.size() / kMinEntryBytes) {
    return DataLossError("record count exceeds the index");
  }
  std::unordered_set<std::string> names;
  records_.reserve(count);
  for (uint32_t i = 0; i < count; ++i) {
    RecordEntry e;
    uint32_t name_len = 0, chunks = 0;
    uint8_t dtype = 0, codec = 0, ndim = 0;
    if (!rd.Get(&name_len) || name_len > kMaxNameBytes || !rd.GetString(name_len, &e.name) ||
        !rd.Get(&dtype) || !rd.Get(&codec) || !rd.Get(&ndim)) {
      return DataLossError(fmt::format("record {}: index entry is malformed", i));
    }
    if (dtype >= kNumDTypes)
      return DataLossError(fmt::format("record '{}': bad dtype {}", e.name, dtype));
    if (codec >= kNumCodecs)
      return DataLossError(fmt::format("record '{}': bad codec {}", e.name, codec));
    if (ndim > kMaxDims)
      return DataLossError(fmt::format("record '{}': {} dimensions", e.name, ndim));
    e.dtype = static_cast<DType>(dtype);
    e.codec = static_cast<Codec>(codec);
    if (IsDelta(e.codec) && base_id_ < 0) {
      return DataLossError(fmt::format("record '{}': delta codec in a full version", e.name));
    }
    if (e.codec == Codec::kQ8Delta && !SupportsQ8(e.dtype)) {
      return DataLossError(fmt::format("record '{}': q8-delta on {}", e.name, DTypeName(e.dtype)));
    }
    e.shape.resize(ndim);
    uint64_t expect = DTypeSize(e.dtype);
    bool overflow = false;
    for (int64_t& d : e.shape) {
      if (!rd.Get(&d) || d < 0) return DataLossError(fmt::format("record '{}': bad shape", e.name));
      overflow |= __builtin_mul_overflow(expect, static_cast<uint64_t>(d), &expect);
    }
    if (!rd.Get(&e.raw_bytes) || !rd.Get(&e.raw_checksum) || !rd.Get(&chunks)) {
      return DataLossError(fmt::format("record '{}': index entry is malformed", e.name));
    }
    if (overflow || expect != e.raw_bytes) {
      return DataLossError(
          fmt::format("record '{}': {} bytes do not match its shape", e.name, e.raw_bytes));
    }
    // (Rounded up without overflowing: raw_bytes may be close to 2^64.)
    if (chunks != e.raw_bytes / chunk_bytes_ + (e.raw_bytes % chunk_bytes_ != 0 ? 1 : 0)) {
      return DataLossError(
          fmt::format("record '{}': {} chunks for {} bytes", e.name, chunks, e.raw_bytes));
    }
    if (chunks > index.size() / 24) return DataLossError("chunk count exceeds the index");
    e.chunks.resize(chunks);
    for (size_t k = 0; k < e.chunks.size(); ++k) {
      ChunkRef& c = e.chunks[k];
      if (!rd.Get(&c.offset) || !rd.Get(&c.stored_bytes) || !rd.Get(&c.checksum)) {
        return DataLossError(fmt::format("record '{}': chunk entry is malformed", e.name));
      }
      if (c.stored_bytes > file_bytes_) {
        return DataLossError(fmt::format("record '{}': chunk larger than the file", e.name));
      }
      // No codec expands a chunk by more than kMaxExpansion, nor stores raw
      // bytes in anything but their own size: this bounds what a reader
      // allocates for a file that lies about its records.
      uint64_t n = std::min<uint64_t>(chunk_bytes_, e.raw_bytes - k * uint64_t{chunk_bytes_});
      if ((e.codec == Codec::kRaw && c.stored_bytes != n) ||
          (version_ >= 3 && c.stored_bytes > n) || n > (c.stored_bytes + 1) * kMaxExpansion) {
        return DataLossError(fmt::format("record '{}': chunk {} size {} cannot hold {} bytes",
                                         e.name, k, c.stored_bytes, n));
      }
    }
    if (!names.insert(e.name).second) {
      return DataLossError(fmt::format("record '{}' appears twice", e.name));
    }
    records_.push_back(std::move(e));
  }
  if (!rd.done()) return DataLossError("index has bytes after its last record");
  return Status::Ok();
}

bool CheckpointFile::StoredRaw(const RecordEntry& e, size_t k) const {
  if (e.codec == Codec::kRaw) return true;
  if (version_ < 3) return false;
  const uint64_t pos = k * uint64_t{chunk_bytes_};
  return e.chunks[k].stored_bytes == std::min<uint64_t>(chunk_bytes_, e.raw_bytes - pos);
}

namespace {
// The n stored bytes at `offset` of a blob: a view of its mapping where the
// reader has one, else read into *buf.
Result<std::string_view> StoredBytes(const BlobReader& reader, uint64_t offset, size_t n,
                                     std::string* buf) {
  const std::string_view map = reader.mapped();
  if (offset <= map.size() && n <= map.size() - offset) return map.substr(offset, n);
  if (buf->size() < n) buf->resize(n);
  SPOT_RETURN_IF_ERROR(reader.ReadInto(offset, std::span<char>(buf->data(), n)));
  return std::string_view(buf->data(), n);
}
}  // namespace

Status CheckpointFile::ReadRecord(size_t i, std::span<char> dst, ChunkCodec& codec) const {
  const RecordEntry& e = records_.at(i);
  auto fail = [&](const std::string& why) {
    return DataLossError(fmt::format("{}: record '{}': {}", source_, e.name, why));
  };
  if (dst.size() != e.raw_bytes) return fail("destination size does not match");
  for (size_t k = 0; k < e.chunks.size(); ++k) {
    const ChunkRef& c = e.chunks[k];
    SPOT_ASSIGN_OR_RETURN(std::string_view stored,
                          StoredBytes(*reader_, c.offset, c.stored_bytes, &chunk_buf_));
    if (Checksum(stored) != c.checksum) {
      return fail(fmt::format("chunk {} checksum mismatch", k));
    }
    uint64_t pos = k * uint64_t{chunk_bytes_};
    size_t n = static_cast<size_t>(std::min<uint64_t>(chunk_bytes_, e.raw_bytes - pos));
    if (StoredRaw(e, k)) {  // Parse checked its size
      std::memcpy(dst.data() + pos, stored.data(), n);
      continue;
    }
    Status st = codec.Decode(e.codec, e.dtype, stored, dst.subspan(pos, n));
    if (!st.ok()) return fail(fmt::format("chunk {}: {}", k, st.message()));
  }
  uint64_t sum = Checksum(std::string_view(dst.data(), dst.size()));
  if (sum != e.raw_checksum) {
    return fail(IsDelta(e.codec) ? "decoded bytes do not match (damaged file or wrong base)"
                                 : "decoded bytes do not match their checksum");
  }
  return Status::Ok();
}

// Maps in the pages of [p, p + n) at once, where the kernel does it faster
// than one page fault at a time (a third less time here), for storage that
// came straight from mmap (AllocateRecordMemory: `record_bytes` of at least
// kPageAllocBytes, so p is page-aligned at every chunk boundary). Only an
// optimization: where the call is not supported the pages fault in as usual.
namespace {
void Prefault(char* p, size_t n, uint64_t record_bytes) {
#ifdef MADV_POPULATE_WRITE
  static const size_t kPage = static_cast<size_t>(sysconf(_SC_PAGESIZE));
  const auto addr = reinterpret_cast<uintptr_t>(p);
  if (record_bytes < kPageAllocBytes || n == 0 || addr % kPage != 0) return;
  (void)madvise(p, (n + kPage - 1) / kPage * kPage, MADV_POPULATE_WRITE);
#endif
}
}  // namespace

// Decodes a chain of files record by record. A lineage is the list of
// versions one record's bytes pass through: its newest entry, then the entry
// each delta is taken against, down to a full entry (or the base Container).
class ChainReader {
 public:
  ChainReader(std::span<const CheckpointFile* const> chain, Container* base,
              const RecordPlacement* place)
      : chain_(chain), base_(base), place_(place) {}

  Result<Container> Run(ChunkCodec& codec, int threads) {
    SPOT_RETURN_IF_ERROR(Resolve());
    // Largest first, so that the last record to finish is a small one.
    std::vector<size_t> order(lineages_.size());
    for (size_t i = 0; i < order.size(); ++i) order[i] = i;
    std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) {
      return lineages_[a].raw_bytes > lineages_[b].raw_bytes;
    });
    std::vector<Status> status(lineages_.size());
    std::atomic<size_t> next{0}, first_failed{kNone};
    auto work = [&](ChunkCodec& c) {
      std::string buf;
      for (size_t t; (t = next.fetch_add(1)) < order.size();) {
        const size_t li = order[t];
        // Lineages after a failed one cannot change which error is returned.
        if (li > first_failed.load()) continue;
        Status st = DecodeGuarded(lineages_[li], c, &buf);
        if (st.ok()) continue;
        status[li] = std::move(st);
        size_t prev = first_failed.load();
        while (li < prev && !first_failed.compare_exchange_weak(prev, li)) {
        }
      }
    };
    RunOnThreads(threads, work, codec);
    if (first_failed.load() != kNone) return status[first_failed.load()];
    Container out;
    for (Lineage& l : lineages_) {
      if (!l.output) continue;
      const RecordEntry& e = Entry(l.steps.back());
      if (l.from_base) {
        out.AddWithStorage(e.name, e.dtype, e.shape, std::move(l.storage));
      } else {
        out.AddShared(e.name, e.dtype, e.shape, std::move(l.fresh));
      }
      out.mutable_record(out.records().size() - 1).checksum = e.raw_checksum;
    }
    return out;
  }

 private:
  static constexpr size_t kNone = std::numeric_limits<size_t>::max();
  struct Step {
    size_t file;   // index in chain_
    size_t entry;  // index in that file's records()
  };
  struct Lineage {
    std::vector<Step> steps;  // oldest first
    Buffer storage;           // the base's bytes when the oldest step is a delta
    SharedMemory fresh;       // otherwise the record's own memory, shareable with a tensor
    bool from_base = false;
    bool output = false;  // a record of the newest version
    uint64_t raw_bytes = 0;
  };

  const RecordEntry& Entry(const Step& s) const { return chain_[s.file]->records_[s.entry]; }

  Status CheckChain() const {
    if (chain_.empty()) return InvalidArgumentError("no checkpoint file to decode");
    if (chain_[0]->base_id_ >= 0 && base_ == nullptr) {
      return FailedPreconditionError(chain_[0]->source_ + ": a delta version needs its base");
    }
    for (size_t j = 1; j < chain_.size(); ++j) {
      if (chain_[j]->base_id_ != chain_[j - 1]->id_) {
        return FailedPreconditionError(fmt::format("{}: a delta against version {}, not {}",
                                                   chain_[j]->source_, chain_[j]->base_id_,
                                                   chain_[j - 1]->id_));
      }
    }
    return Status::Ok();
  }

  // Builds the lineages: the newest file's records first, in order, then the
  // records of older files that no newer record uses (decoded to be checked).
  Status Resolve() {
    SPOT_RETURN_IF_ERROR(CheckChain());
    std::vector<std::vector<char>> used(chain_.size());
    std::vector<std::unordered_map<std::string_view, size_t>> by_name(chain_.size());
    for (size_t j = 0; j < chain_.size(); ++j) {
      used[j].assign(chain_[j]->records_.size(), 0);
      for (size_t i = 0; i < chain_[j]->records_.size(); ++i) {
        by_name[j].emplace(chain_[j]->records_[i].name, i);
      }
    }
    for (size_t end = chain_.size(); end-- > 0;) {
      for (size_t i = 0; i < chain_[end]->records_.size(); ++i) {
        if (used[end][i]) continue;  // part of a newer record's lineage
        Lineage l;
        l.output = end + 1 == chain_.size();
        Step s{end, i};
        for (;;) {
          l.steps.push_back(s);
          const CheckpointFile& f = *chain_[s.file];
          const RecordEntry& e = f.records_[s.entry];
          if (!IsDelta(e.codec)) break;
          auto missing = [&] {
            return DataLossError(fmt::format("{}: record '{}': base version {} has no such record",
                                             f.source_, e.name, f.base_id_));
          };
          if (s.file == 0) {
            int b = base_->FindIndex(e.name);
            if (b < 0 || base_->records()[b].dtype != e.dtype ||
                base_->records()[b].shape != e.shape) {
              return missing();
            }
            l.storage = base_->ReleaseStorage(static_cast<size_t>(b));
            l.from_base = true;
            break;
          }
          auto it = by_name[s.file - 1].find(e.name);
          if (it == by_name[s.file - 1].end()) return missing();
          const RecordEntry& b = chain_[s.file - 1]->records_[it->second];
          if (b.dtype != e.dtype || b.shape != e.shape) return missing();
          used[s.file - 1][it->second] = 1;
          s = {s.file - 1, it->second};
        }
        std::reverse(l.steps.begin(), l.steps.end());
        l.raw_bytes = Entry(l.steps.back()).raw_bytes;
        lineages_.push_back(std::move(l));
      }
    }
    return Status::Ok();
  }

  // Runs work(codec) on the calling thread and work(own codec) on up to
  // threads - 1 more (0: one per core).
  template <typename Fn>
  void RunOnThreads(int threads, Fn& work, ChunkCodec& codec) {
    size_t n = static_cast<size_t>(threads);
    if (threads <= 0) {
      // One per core, each with at least two chunks' worth of records: for a
      // small state, starting a thread (and its codec's scratch) costs more
      // than it saves.
      uint64_t bytes = 0;
      for (const Lineage& l : lineages_) bytes += l.raw_bytes * l.steps.size();
      n = std::min<uint64_t>(std::max(1u, std::thread::hardware_concurrency()),
                             std::max<uint64_t>(1, bytes / (2 * kChunkBytes)));
    }
    n = std::min(n, lineages_.size());
    std::vector<std::jthread> pool;
    for (size_t t = 1; t < n; ++t) {
      try {
        pool.emplace_back([&work] {
          ChunkCodec own;
          work(own);
        });
      } catch (const std::system_error&) {
        break;  // no more threads to be had: the ones running do the rest
      }
    }
    work(codec);
  }

  Status DecodeGuarded(Lineage& l, ChunkCodec& codec, std::string* buf) const {
    try {
      return Decode(l, codec, buf);
    } catch (const std::bad_alloc&) {
      const Step& s = l.steps.back();
      return UnavailableError(fmt::format("{}: record '{}': out of memory decoding {} bytes",
                                          chain_[s.file]->source_, Entry(s).name, l.raw_bytes));
    }
  }

  // Reads, checks and decodes chunk k of step `s` into `dst` (the record's
  // bytes so far; for a delta, the base's).
  Status DecodeChunk(const Step& s, size_t k, std::span<char> dst, ChunkCodec& codec,
                     std::string* buf) const {
    const CheckpointFile& f = *chain_[s.file];
    const RecordEntry& e = Entry(s);
    const ChunkRef& c = e.chunks[k];
    auto fail = [&](const std::string& why) {
      return DataLossError(fmt::format("{}: record '{}': {}", f.source_, e.name, why));
    };
    const uint64_t pos = k * uint64_t{f.chunk_bytes_};
    const size_t n = static_cast<size_t>(std::min<uint64_t>(f.chunk_bytes_, e.raw_bytes - pos));
    std::span<char> out = dst.subspan(pos, n);
    if (f.StoredRaw(e, k)) {
      // Stored as is (Parse checked its size): read straight into place, and
      // hashed once, by the record's checksum the caller takes of the decoded
      // bytes (they are the stored ones; no codec reads them before that).
      return f.reader_->ReadInto(c.offset, out);
    }
    SPOT_ASSIGN_OR_RETURN(std::string_view stored,
                          StoredBytes(*f.reader_, c.offset, c.stored_bytes, buf));
    if (Checksum(stored) != c.checksum) {
      return fail(fmt::format("chunk {} checksum mismatch", k));
    }
    Status st = codec.Decode(e.codec, e.dtype, stored, out);
    if (!st.ok()) return fail(fmt::format("chunk {}: {}", k, st.message()));
    return Status::Ok();
  }

  Status Decode(Lineage& l, ChunkCodec& codec, std::string* buf) const {
    const uint64_t raw = l.raw_bytes;
    const bool fresh = !l.from_base;
    // A fresh record's memory is not initialized: every codec of a full
    // entry writes each byte of its chunk (or fails), and its pages are first
    // touched by this thread chunk by chunk, just before the decode writes them.
    if (fresh && l.output && place_ != nullptr) {
      l.fresh = (*place_)(Entry(l.steps.back()));
      if (l.fresh.owner == nullptr) {
        l.fresh = {};
      } else if (l.fresh.bytes.size() != raw) {
        return InternalError(fmt::format("record '{}': placed in {} bytes, {} needed",
                                         Entry(l.steps.back()).name, l.fresh.bytes.size(), raw));
      }
    }
    if (fresh && l.fresh.owner == nullptr) {
      l.fresh = AllocateSharedRecordMemory(static_cast<size_t>(raw));
    }
    const std::span<char> dst =
        fresh ? l.fresh.bytes : std::span<char>(l.storage.data(), l.storage.size());
    if (dst.size() != raw) {  // a delta's base of another size: Resolve matched shapes
      return InternalError(fmt::format("record '{}': a base of {} bytes, {} expected",
                                       Entry(l.steps.back()).name, dst.size(), raw));
    }
    std::vector<std::unique_ptr<XXH3_state_t, decltype(&XXH3_freeState)>> sums;
    for (size_t s = 0; s < l.steps.size(); ++s) {
      sums.emplace_back(XXH3_createState(), &XXH3_freeState);
      if (!sums.back()) throw std::bad_alloc();
      XXH3_64bits_reset(sums.back().get());
    }
    uint32_t chunk_bytes = chain_[l.steps[0].file]->chunk_bytes_;
    bool same_chunks = true;
    for (const Step& s : l.steps) same_chunks &= chain_[s.file]->chunk_bytes_ == chunk_bytes;
    auto one = [&](size_t s, size_t k) -> Status {
      SPOT_RETURN_IF_ERROR(DecodeChunk(l.steps[s], k, dst, codec, buf));
      const uint64_t pos = k * uint64_t{chain_[l.steps[s].file]->chunk_bytes_};
      const size_t n =
          static_cast<size_t>(std::min<uint64_t>(chain_[l.steps[s].file]->chunk_bytes_, raw - pos));
      XXH3_64bits_update(sums[s].get(), dst.data() + pos, n);
      return Status::Ok();
    };
    if (same_chunks) {
      // Each chunk through every version while it is in cache.
      const size_t chunks = Entry(l.steps[0]).chunks.size();
      for (size_t k = 0; k < chunks; ++k) {
        if (fresh) {
          const uint64_t pos = k * uint64_t{chunk_bytes};
          Prefault(dst.data() + pos, std::min<uint64_t>(chunk_bytes, raw - pos), raw);
        }
        for (size_t s = 0; s < l.steps.size(); ++s) SPOT_RETURN_IF_ERROR(one(s, k));
      }
    } else {
      for (size_t s = 0; s < l.steps.size(); ++s) {
        for (size_t k = 0; k < Entry(l.steps[s]).chunks.size(); ++k) {
          SPOT_RETURN_IF_ERROR(one(s, k));
        }
      }
    }
    for (size_t s = 0; s < l.steps.size(); ++s) {
      const RecordEntry& e = Entry(l.steps[s]);
      if (XXH3_64bits_digest(sums[s].get()) != e.raw_checksum) {
        return DataLossError(
            fmt::format("{}: record '{}': {}", chain_[l.steps[s].file]->source_, e.name,
                        IsDelta(e.codec) ? "decoded bytes do not match (damaged file or wrong base)"
                                         : "decoded bytes do not match their checksum"));
      }
    }
    return Status::Ok();
  }

  std::span<const CheckpointFile* const> chain_;
  Container* base_;
  const RecordPlacement* place_;
  std::vector<Lineage> lineages_;
};

Result<Container> CheckpointFile::ReadAll(Container* base, ChunkCodec& codec, int threads,
                                          const RecordPlacement* place) const {
  const CheckpointFile* self[] = {this};
  return ReadChain(self, base, codec, threads, place);
}

Result<Container> CheckpointFile::ReadChain(std::span<const CheckpointFile* const> chain,
                                            Container* base, ChunkCodec& codec, int threads,
                                            const RecordPlacement* place) {
  return ChainReader(chain, base, place).Run(codec, threads);
}

}  // namespace spot::ckpt
