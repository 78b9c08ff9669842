// Fuzzes the TensorBoard event file reader (monitor/tensorboard.h
// ReadEventFile, ReadRunScalars): record framing, both CRCs, and the
// hand-written protobuf decoding of Event, Summary and Value.
//
// Input: byte 0 selects the mode. Even: the rest is the file as is. Odd: the
// rest is a list of records, each a little-endian uint16 length and that many
// payload bytes (cut short at the end), which the harness frames with correct
// lengths and CRCs, so that mutations reach the protobuf decoder instead of
// dying at a CRC. Bit 1: allow a partial tail; bit 2 (framed): append a
// record cut short, as a writer still appending leaves.
#include <cmath>
#include <cstdint>
#include <cstring>
#include <string>
#include <string_view>
#include <tuple>
#include <algorithm>

#include "fuzz_support.h"
#include "monitor/tensorboard.h"

namespace {

void PutLe(std::string& out, uint64_t v, int bytes) {
  for (int i = 0; i < bytes; ++i) out += static_cast<char>((v >> (8 * i)) & 0xFF);
}

std::string Frame(std::string_view payload) {
  std::string rec;
  PutLe(rec, payload.size(), 8);
  PutLe(rec, spot::monitor::MaskedCrc32c(rec), 4);
  rec += payload;
  PutLe(rec, spot::monitor::MaskedCrc32c(payload), 4);
  return rec;
}

// The framed file and its number of records.
std::pair<std::string, int64_t> FrameAll(std::string_view in, bool cut_tail) {
  std::string file;
  int64_t records = 0;
  while (in.size() >= 2) {
    size_t n = static_cast<uint8_t>(in[0]) | static_cast<size_t>(static_cast<uint8_t>(in[1])) << 8;
    in.remove_prefix(2);
    n = std::min(n, in.size());
    file += Frame(in.substr(0, n));
    in.remove_prefix(n);
    ++records;
  }
  if (cut_tail) {
    std::string last = Frame("\x10\x05");  // an Event with step 5
    file += last.substr(0, last.size() - 3);
  }
  return {file, records};
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 1) return 0;
  const uint8_t mode = data[0];
  const bool framed = mode & 1, partial = mode & 2, cut_tail = framed && (mode & 4);
  std::string_view rest(reinterpret_cast<const char*>(data + 1), size - 1);
  int64_t records = -1;
  std::string file;
  if (framed) {
    std::tie(file, records) = FrameAll(rest, cut_tail);
  } else {
    file = std::string(rest);
  }
  const std::string run = spot::fuzz::FreshScratchSubdir("run");
  const std::string path = run + "/events.out.tfevents.1.fuzz";
  spot::fuzz::WriteScratchFile("run/events.out.tfevents.1.fuzz", file);
  auto events = spot::monitor::ReadEventFile(path, partial);
  if (!events.ok()) {
    FUZZ_CHECK(events.status().code() == spot::StatusCode::kDataLoss, events.status().ToString());
  } else if (framed) {
    FUZZ_CHECK(events->records == records, "records read differ from records framed");
  }
  auto scalars = spot::monitor::ReadRunScalars(run);
  if (scalars.ok()) {
    for (size_t i = 1; i < scalars->size(); ++i) {
      const auto& a = (*scalars)[i - 1];
      const auto& b = (*scalars)[i];
      const double wa = std::isnan(a.wall_time) ? -INFINITY : a.wall_time;
      const double wb = std::isnan(b.wall_time) ? -INFINITY : b.wall_time;
      FUZZ_CHECK(wa < wb || (wa == wb && a.step <= b.step), "scalars not ordered by (time, step)");
    }
  }
  return 0;
}
