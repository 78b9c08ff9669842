// Fuzzes the checkpoint file reader (ckpt/format.h CheckpointFile::Open,
// ReadAll): header, footer, index and every chunk codec's decoder.
//
// Every byte of a file is covered by a checksum, so a mutated file almost
// never gets past the index's. Each input is therefore read twice: as is,
// and after the harness has re-sealed it (recomputed every chunk checksum the
// index lists and the index checksum in the footer), which lets mutations of
// the index and of chunk bytes reach the parser and the decoders. Deltas
// decode against SampleState(1) (ckpt_samples.h), the state the seeds'
// delta versions were written against.
#include <cstdint>
#include <cstring>
#include <string>
#include <string_view>

#include "ckpt/blob_store.h"
#include "ckpt/codec.h"
#include "ckpt/container.h"
#include "ckpt/format.h"
#include "ckpt_samples.h"
#include "fuzz_support.h"

namespace {

using namespace spot::ckpt;

// The harness allocates at most this much for a delta's base record.
constexpr uint64_t kMaxBaseRecordBytes = uint64_t{64} << 20;

template <typename T>
bool Get(std::string_view b, size_t* pos, T* v) {
  if (b.size() < *pos || b.size() - *pos < sizeof(T)) return false;
  std::memcpy(v, b.data() + *pos, sizeof(T));
  *pos += sizeof(T);
  return true;
}

template <typename T>
void Set(std::string& b, size_t pos, T v) {
  std::memcpy(b.data() + pos, &v, sizeof(T));
}

// Rewrites the chunk checksums the index lists (where a chunk lies inside the
// file) and the index checksum, following docs/checkpoint-format.md as far
// as the index can be walked. False when there is no footer to seal.
bool Reseal(std::string& file) {
  if (file.size() < kHeaderBytes + kFooterBytes) return false;
  const size_t footer = file.size() - kFooterBytes;
  uint64_t index_offset, index_bytes;
  std::memcpy(&index_offset, file.data() + footer, 8);
  std::memcpy(&index_bytes, file.data() + footer + 8, 8);
  if (index_offset > footer || index_bytes != footer - index_offset) return false;
  std::string_view index(file.data() + index_offset, index_bytes);
  size_t pos = 8 + 8 + 4;  // id, base id, chunk size
  uint32_t count = 0;
  bool ok = Get(index, &pos, &count);
  for (uint32_t i = 0; ok && i < count; ++i) {
    uint32_t name_len = 0, chunks = 0;
    uint8_t ndim = 0;
    ok = Get(index, &pos, &name_len) && (pos += name_len + 2) <= index.size() &&
         Get(index, &pos, &ndim) && (pos += 8u * ndim + 16) <= index.size() &&
         Get(index, &pos, &chunks);
    for (uint32_t k = 0; ok && k < chunks; ++k) {
      uint64_t offset = 0, stored = 0;
      ok = Get(index, &pos, &offset) && Get(index, &pos, &stored) && pos + 8 <= index.size();
      if (ok && offset <= file.size() && stored <= file.size() - offset) {
        Set(file, index_offset + pos, Checksum(std::string_view(file).substr(offset, stored)));
      }
      pos += 8;
    }
  }
  Set(file, footer + 16,
      IndexChecksum(std::string_view(file).substr(0, kHeaderBytes),
                    std::string_view(file).substr(index_offset, index_bytes)));
  return true;
}

// SampleState(1)'s record of the same name and layout, else zeros.
Container BaseFor(const CheckpointFile& f) {
  static const Container sample = spot::fuzz::SampleState(1);
  Container base;
  for (const RecordEntry& e : f.records()) {
    if (!IsDelta(e.codec) || e.raw_bytes > kMaxBaseRecordBytes) continue;
    std::span<char> dst = base.AddUninitialized(e.name, e.dtype, e.shape);
    const Record* r = sample.Find(e.name);
    if (r != nullptr && r->dtype == e.dtype && r->shape == e.shape) {
      std::memcpy(dst.data(), r->data.data(), dst.size());
    } else {
      std::memset(dst.data(), 0, dst.size());
    }
  }
  return base;
}

void Read(const std::string& bytes) {
  MemoryBlobStore store;
  store.Set("ckpt-1.bin", bytes);
  auto f = CheckpointFile::Open(store, "ckpt-1.bin");
  if (!f.ok()) {
    FUZZ_CHECK(f.status().code() == spot::StatusCode::kDataLoss, f.status().ToString());
    return;
  }
  static ChunkCodec codec;
  Container base = BaseFor(*f);
  auto c = f->ReadAll(f->base_id() >= 0 ? &base : nullptr, codec);
  if (!c.ok()) {
    FUZZ_CHECK(c.status().code() == spot::StatusCode::kDataLoss, c.status().ToString());
    return;
  }
  FUZZ_CHECK(c->records().size() == f->records().size(), "ReadAll lost records");
  FUZZ_CHECK(c->VerifyRecords().empty(), "decoded records fail their checksums");
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string bytes = spot::fuzz::AsString(data, size);
  Read(bytes);
  if (Reseal(bytes) && bytes != std::string_view(reinterpret_cast<const char*>(data), size)) {
    Read(bytes);
  }
  return 0;
}
