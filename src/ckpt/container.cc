#include "ckpt/container.h"

#include <xxhash.h>

#include <cstring>
#include <unordered_set>

#include <fmt/format.h>

namespace spot::ckpt {
namespace {

constexpr size_t kFooterBytes = 8 + 8;  // checksum + footer magic
constexpr size_t kHeaderBytes = 8 + 4 + 4 + 8;

size_t AlignUp(size_t n) { return (n + kAlignment - 1) / kAlignment * kAlignment; }

template <typename T>
void Put(std::string* out, T v) {
  char b[sizeof(T)];
  std::memcpy(b, &v, sizeof(T));  // the format is little-endian, as is every target here
  out->append(b, sizeof(T));
}

// Bounds-checked little-endian reader over the file bytes.
class Reader {
 public:
  Reader(std::string_view bytes, size_t pos, size_t end) : b_(bytes), pos_(pos), end_(end) {}
  template <typename T>
  bool Get(T* v) {
    if (end_ - pos_ < sizeof(T)) return false;
    std::memcpy(v, b_.data() + pos_, sizeof(T));
    pos_ += sizeof(T);
    return true;
  }
  bool GetString(size_t n, std::string* s) {
    if (end_ - pos_ < n) return false;
    s->assign(b_.data() + pos_, n);
    pos_ += n;
    return true;
  }
  size_t pos() const { return pos_; }

 private:
  std::string_view b_;
  size_t pos_, end_;
};

}  // namespace

size_t DTypeSize(DType t) {
  switch (t) {
    case DType::kU8: case DType::kI8: case DType::kBool: return 1;
    case DType::kI16: case DType::kF16: case DType::kBF16: return 2;
    case DType::kI32: case DType::kF32: return 4;
    case DType::kI64: case DType::kF64: return 8;
  }
  return 0;
}

std::string_view DTypeName(DType t) {
  static constexpr std::string_view kNames[kNumDTypes] = {"u8",   "i8",  "i16", "i32", "i64",
                                                          "f16",  "bf16", "f32", "f64", "bool"};
  auto i = static_cast<size_t>(t);
  return i < kNumDTypes ? kNames[i] : "invalid";
}

int64_t Record::numel() const {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

std::span<char> Container::AddUninitialized(std::string name, DType dtype,
                                            std::vector<int64_t> shape) {
  Record r{std::move(name), dtype, std::move(shape), {}, 0};
  std::string& storage = owned_.emplace_back(
      static_cast<size_t>(r.numel()) * DTypeSize(dtype), '\0');
  r.data = storage;
  records_.push_back(std::move(r));
  return {storage.data(), storage.size()};
}

void Container::AddBytes(std::string name, std::string_view bytes) {
  std::span<char> dst =
      AddUninitialized(std::move(name), DType::kU8, {static_cast<int64_t>(bytes.size())});
  if (!bytes.empty()) std::memcpy(dst.data(), bytes.data(), bytes.size());
}

const Record* Container::Find(std::string_view name) const {
  for (const Record& r : records_) {
    if (r.name == name) return &r;
  }
  return nullptr;
}

uint64_t Container::payload_bytes() const {
  uint64_t n = 0;
  for (const Record& r : records_) n += r.data.size();
  return n;
}

std::string Container::VerifyRecords() const {
  std::string bad;
  for (const Record& r : records_) {
    if (XXH3_64bits(r.data.data(), r.data.size()) != r.checksum) {
      bad += (bad.empty() ? "" : ", ") + r.name;
    }
  }
  return bad;
}

uint64_t Container::StoredChecksum(std::string_view bytes) {
  uint64_t v = 0;
  if (bytes.size() >= kFooterBytes) std::memcpy(&v, bytes.data() + bytes.size() - kFooterBytes, 8);
  return v;
}

uint64_t Container::Checksum(std::string_view bytes) {
  return XXH3_64bits(bytes.data(), bytes.size());
}

std::vector<std::string_view> Container::Encode(std::string* scratch, uint64_t* file_checksum) {
  // Index first, so data offsets are known: header + index, padded to alignment.
  size_t index_bytes = 0;
  for (const Record& r : records_) {
    index_bytes += 4 + r.name.size() + 1 + 1 + 8 * r.shape.size() + 8 + 8 + 8;
  }
  size_t offset = AlignUp(kHeaderBytes + index_bytes);
  std::string& s = *scratch;
  s.clear();
  s.append(kMagic);
  Put<uint32_t>(&s, kFormatVersion);
  Put<uint32_t>(&s, static_cast<uint32_t>(records_.size()));
  Put<uint64_t>(&s, index_bytes);
  std::vector<size_t> offsets;
  for (Record& r : records_) {
    r.checksum = XXH3_64bits(r.data.data(), r.data.size());
    Put<uint32_t>(&s, static_cast<uint32_t>(r.name.size()));
    s.append(r.name);
    Put<uint8_t>(&s, static_cast<uint8_t>(r.dtype));
    Put<uint8_t>(&s, static_cast<uint8_t>(r.shape.size()));
    for (int64_t d : r.shape) Put<int64_t>(&s, d);
    Put<uint64_t>(&s, offset);
    Put<uint64_t>(&s, r.data.size());
    Put<uint64_t>(&s, r.checksum);
    offsets.push_back(offset);
    offset = AlignUp(offset + r.data.size());
  }
  size_t header_end = s.size();
  s.resize(AlignUp(header_end), '\0');
  // Padding after each record lives in scratch too (zeros), then the footer.
  size_t zeros_at = s.size();
  s.append(kAlignment, '\0');
  size_t footer_at = s.size();
  s.append(kFooterBytes, '\0');

  std::vector<std::string_view> pieces;
  std::string_view sv(s);
  pieces.push_back(sv.substr(0, zeros_at));
  size_t pos = zeros_at;
  for (const Record& r : records_) {
    pieces.push_back(r.data);
    pos += r.data.size();
    size_t pad = AlignUp(pos) - pos;
    if (pad) pieces.push_back(sv.substr(zeros_at, pad));
    pos += pad;
  }
  XXH3_state_t* st = XXH3_createState();
  XXH3_64bits_reset(st);
  for (std::string_view p : pieces) XXH3_64bits_update(st, p.data(), p.size());
  uint64_t sum = XXH3_64bits_digest(st);
  XXH3_freeState(st);
  std::memcpy(s.data() + footer_at, &sum, 8);
  std::memcpy(s.data() + footer_at + 8, kFooterMagic.data(), 8);
  pieces.push_back(std::string_view(s).substr(footer_at, kFooterBytes));
  *file_checksum = sum;
  return pieces;
}

Result<Container> Container::Decode(std::string bytes, const std::string& source) {
  auto fail = [&](const std::string& why) { return DataLossError(source + ": " + why); };
  if (bytes.size() < kHeaderBytes + kFooterBytes) {
    return fail(fmt::format("truncated: {} bytes is smaller than any checkpoint", bytes.size()));
  }
  if (std::string_view(bytes).substr(0, 8) != kMagic) return fail("not a checkpoint (bad magic)");
  size_t body = bytes.size() - kFooterBytes;
  if (std::string_view(bytes).substr(body + 8, 8) != kFooterMagic) {
    return fail("truncated or damaged: footer magic missing");
  }
  uint64_t stored;
  std::memcpy(&stored, bytes.data() + body, 8);
  uint64_t actual = XXH3_64bits(bytes.data(), body);
  if (stored != actual) {
    return fail(fmt::format("checksum mismatch: file says {:016x}, bytes give {:016x}", stored,
                            actual));
  }
  Container c;
  c.file_buffer_ = std::make_unique<std::string>(std::move(bytes));
  std::string_view buf(*c.file_buffer_);  // records are views into this buffer
  Reader rd(buf, 8, body);
  uint32_t version = 0, count = 0;
  uint64_t index_bytes = 0;
  rd.Get(&version);
  rd.Get(&count);
  rd.Get(&index_bytes);
  if (version != kFormatVersion) {
    return fail(fmt::format("format version {} is not supported (this build reads {})", version,
                            kFormatVersion));
  }
  std::unordered_set<std::string> names;
  for (uint32_t i = 0; i < count; ++i) {
    Record r;
    uint32_t name_len = 0;
    uint8_t dtype = 0, ndim = 0;
    uint64_t off = 0, size = 0;
    if (!rd.Get(&name_len) || name_len > 4096 || !rd.GetString(name_len, &r.name) ||
        !rd.Get(&dtype) || !rd.Get(&ndim)) {
      return fail(fmt::format("record {}: index entry is malformed", i));
    }
    if (dtype >= kNumDTypes) return fail(fmt::format("record '{}': bad dtype {}", r.name, dtype));
    r.dtype = static_cast<DType>(dtype);
    r.shape.resize(ndim);
    for (int64_t& d : r.shape) {
      if (!rd.Get(&d) || d < 0) return fail(fmt::format("record '{}': bad shape", r.name));
    }
    if (!rd.Get(&off) || !rd.Get(&size) || !rd.Get(&r.checksum)) {
      return fail(fmt::format("record '{}': index entry is malformed", r.name));
    }
    uint64_t expect = DTypeSize(r.dtype);
    bool overflow = false;
    for (int64_t d : r.shape) {
      overflow |= __builtin_mul_overflow(expect, static_cast<uint64_t>(d), &expect);
    }
    if (overflow || expect != size) {
      return fail(fmt::format("record '{}': {} bytes do not match its shape", r.name, size));
    }
    if (off > body || size > body - off) {
      return fail(fmt::format("record '{}': data lies outside the file", r.name));
    }
    r.data = buf.substr(off, size);
    if (!names.insert(r.name).second) {
      return fail(fmt::format("record '{}' appears twice", r.name));
    }
    c.records_.push_back(std::move(r));
  }
  if (rd.pos() != kHeaderBytes + index_bytes) return fail("index size does not match its header");
  return c;
}

}  // namespace spot::ckpt
