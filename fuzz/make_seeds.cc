// Writes the binary seed inputs of fuzz/corpus/ with the project's own
// writers, so that they are real files of the current formats:
//   ckpt_file/      checkpoint files: full versions with each full codec,
//                   delta versions with each delta codec
//   ckpt_manifest/  the manifests of a store's versions 1 and 2, NUL-separated
//   tensorboard/    event files written by EventWriter (raw mode), and their
//                   records in the harness's framed mode
// Usage: make_seeds <fuzz/corpus directory>. Run by hand when a format changes.
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>

#include "ckpt/store.h"
#include "ckpt_samples.h"
#include "core/file_io.h"
#include "fuzz_support.h"
#include "monitor/tensorboard.h"

namespace {

using namespace spot::ckpt;
namespace fs = std::filesystem;

void Write(const fs::path& path, const std::string& bytes) {
  fs::create_directories(path.parent_path());
  std::ofstream(path, std::ios::binary) << bytes;
  std::printf("%s (%zu bytes)\n", path.c_str(), bytes.size());
}

void CheckpointSeeds(const fs::path& out) {
  struct {
    const char* name;
    int id;
    Codec full, delta;
  } files[] = {
      {"full-raw", 1, Codec::kRaw, Codec::kSubDelta},
      {"full-shuffle-zstd", 1, Codec::kShuffleZstd, Codec::kSubDelta},
      {"full-planes-zstd", 1, Codec::kPlanesZstd, Codec::kSubDelta},
      {"delta-sub", 2, Codec::kPlanesZstd, Codec::kSubDelta},
      {"delta-xor", 2, Codec::kPlanesZstd, Codec::kXorDelta},
      {"delta-q8", 2, Codec::kPlanesZstd, Codec::kQ8Delta},
  };
  for (const auto& f : files) {
    CodecPlan plan{.full = f.full, .delta = f.delta, .q8_optimizer_state = true};
    Write(out / "ckpt_file" / f.name, spot::fuzz::SampleCheckpointFile(f.id, plan));
  }
  const std::string dir = spot::fuzz::FreshScratchSubdir("store");
  spot::fuzz::WriteSampleStore(dir);
  std::string manifests;
  for (int id = 1; id <= 2; ++id) {
    if (id > 1) manifests += '\0';
    manifests += spot::ReadFile(dir + "/" + CheckpointStore::ManifestFileName(id)).value();
  }
  Write(out / "ckpt_manifest" / "store-1-2", manifests);
}

// ckpt_codec_fuzzer inputs: a round trip of f32 and f16 values for every
// codec, and each codec's encoding of them to decode.
void CodecSeeds(const fs::path& out) {
  Container state = spot::fuzz::SampleState(2);
  ChunkCodec codec;
  for (const char* name : {"model/fc.weight", "model/fc.bias"}) {
    const Record& r = *state.Find(name);
    for (int c = 0; c < kNumCodecs; ++c) {
      const std::string tag = std::string(CodecName(static_cast<Codec>(c))) + "-" +
                              std::string(DTypeName(r.dtype));
      std::string head = {static_cast<char>(1), static_cast<char>(c), static_cast<char>(r.dtype)};
      Write(out / "ckpt_codec" / ("roundtrip-" + tag), head + std::string(r.data));
      // The decode mode's base is the stored bytes repeated: encode against that.
      std::string base(r.data.rbegin(), r.data.rend());
      std::string stored;
      if (!codec.Encode(static_cast<Codec>(c), r.dtype, r.data, base, &stored).ok()) continue;
      const size_t elems = r.data.size() / DTypeSize(r.dtype);
      head[0] = 0;
      head += static_cast<char>(elems & 0xFF);
      head += static_cast<char>(elems >> 8);
      Write(out / "ckpt_codec" / ("decode-" + tag), head + stored);
    }
  }
}

// An event file's records, in tensorboard_fuzzer's framed mode (mode byte,
// then a uint16 length before each payload).
std::string Framed(const std::string& file, uint8_t mode) {
  std::string out(1, static_cast<char>(mode));
  for (size_t off = 0; off + 12 <= file.size();) {
    uint64_t len = 0;
    std::memcpy(&len, file.data() + off, 8);
    out += static_cast<char>(len & 0xFF);
    out += static_cast<char>((len >> 8) & 0xFF);
    out += file.substr(off + 12, len);
    off += 12 + len + 4;
  }
  return out;
}

void TensorBoardSeeds(const fs::path& out) {
  const std::string run = spot::fuzz::FreshScratchSubdir("run");
  {
    auto w = spot::monitor::EventWriter::Open(run);
    if (!w.ok()) std::abort();
    (void)(*w)->AddScalars(1, {{"train/loss", 2.5}, {"train/lr", 0.01}}, 1700000000.5);
    (void)(*w)->AddScalar("test/accuracy", 2, 0.875, 1700000060.0);
    (void)(*w)->AddScalar("train/loss", -3, 1e300, 1700000120.0);
  }
  for (const auto& e : fs::directory_iterator(run)) {
    const std::string file = spot::ReadFile(e.path().string()).value();
    Write(out / "tensorboard" / "raw", std::string(1, '\0') + file);
    Write(out / "tensorboard" / "framed", Framed(file, 1));
    Write(out / "tensorboard" / "framed-partial-tail", Framed(file, 1 | 2 | 4));
  }
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: %s <fuzz/corpus directory>\n", argv[0]);
    return 2;
  }
  CheckpointSeeds(argv[1]);
  CodecSeeds(argv[1]);
  TensorBoardSeeds(argv[1]);
  return 0;
}
