// Fuzzes the chunk codecs of checkpoint format v2 (ckpt/codec.h ChunkCodec).
//
// Input: byte 0 the mode (even: decode, odd: round trip), byte 1 the codec,
// byte 2 the dtype, then the bytes.
//   decode: bytes 3-4 the chunk's element count (little-endian); the rest is
//     the stored chunk, decoded over a destination that holds a base (the
//     element count's worth of the stored bytes, repeated) for delta codecs.
//   round trip: the rest (whole elements) is the raw chunk; its base is the
//     same bytes reversed. Encode, then Decode over the base, must give back
//     the raw bytes (lossless codecs) or exactly what Encode left in its copy
//     of the base (q8-delta: the reader's reconstruction, codec.h).
#include <algorithm>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "ckpt/codec.h"
#include "ckpt/container.h"
#include "fuzz_support.h"

namespace {

using namespace spot::ckpt;

std::vector<char> BaseOf(std::string_view pattern, size_t bytes) {
  std::vector<char> base(bytes, 0);
  if (!pattern.empty()) {
    for (size_t i = 0; i < bytes; ++i) base[i] = pattern[i % pattern.size()];
  }
  return base;
}

void DecodeOnly(ChunkCodec& codec, Codec c, DType t, std::string_view in) {
  if (in.size() < 2) return;
  const size_t elems = static_cast<uint8_t>(in[0]) | static_cast<size_t>(static_cast<uint8_t>(in[1])) << 8;
  std::string_view stored = in.substr(2);
  std::vector<char> dst = BaseOf(stored, elems * DTypeSize(t));
  spot::Status s = codec.Decode(c, t, stored, dst);
  FUZZ_CHECK(s.ok() || s.code() == spot::StatusCode::kDataLoss, s.ToString());
}

void RoundTrip(ChunkCodec& codec, Codec c, DType t, std::string_view in) {
  const size_t es = DTypeSize(t);
  std::string_view raw = in.substr(0, in.size() / es * es);
  std::vector<char> base(raw.rbegin(), raw.rend());
  std::vector<char> encoder_base = base;
  std::string stored;
  spot::Status s = codec.Encode(c, t, raw, encoder_base, &stored);
  if (!s.ok()) {
    FUZZ_CHECK(s.code() == spot::StatusCode::kInvalidArgument, s.ToString());
    return;
  }
  std::vector<char> dst = base;
  s = codec.Decode(c, t, stored, dst);
  FUZZ_CHECK(s.ok(), "decoding what Encode wrote: " + s.ToString());
  const std::string_view want = c == Codec::kQ8Delta
                                    ? std::string_view(encoder_base.data(), encoder_base.size())
                                    : raw;
  FUZZ_CHECK(std::string_view(dst.data(), dst.size()) == want,
             std::string("round trip changed the bytes, codec ") + std::string(CodecName(c)) +
                 ", dtype " + std::string(DTypeName(t)));
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 3) return 0;
  static ChunkCodec codec;
  const Codec c = static_cast<Codec>(data[1] % kNumCodecs);
  const DType t = static_cast<DType>(data[2] % kNumDTypes);
  std::string_view rest(reinterpret_cast<const char*>(data + 3), size - 3);
  if (data[0] % 2 == 0) {
    DecodeOnly(codec, c, t, rest);
  } else {
    RoundTrip(codec, c, t, rest);
  }
  return 0;
}
