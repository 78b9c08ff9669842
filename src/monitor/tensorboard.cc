#include "monitor/tensorboard.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <bit>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <limits>

#include "core/clock.h"
#include "core/file_io.h"

namespace spot::monitor {
namespace {

namespace fs = std::filesystem;

constexpr std::string_view kFileVersion = "brain.Event:2";
constexpr size_t kHeaderBytes = 12;  // uint64 length + uint32 masked CRC
constexpr size_t kFooterBytes = 4;   // uint32 masked CRC of the data

// ---- CRC32C ----

// No Debian package ships a C/C++ CRC32C library, so this is the classic
// byte-at-a-time table over the reflected Castagnoli polynomial. Event records
// are small (a few hundred bytes per step); speed does not matter here.
constexpr std::array<uint32_t, 256> MakeCrc32cTable() {
  std::array<uint32_t, 256> table{};
  for (uint32_t i = 0; i < 256; ++i) {
    uint32_t c = i;
    for (int k = 0; k < 8; ++k) c = (c & 1) ? (c >> 1) ^ 0x82F63B78u : c >> 1;
    table[i] = c;
  }
  return table;
}
constexpr std::array<uint32_t, 256> kCrc32cTable = MakeCrc32cTable();

// ---- protobuf wire format, by hand ----

enum WireType : uint32_t { kVarint = 0, kFixed64 = 1, kLengthDelimited = 2, kFixed32 = 5 };

void PutVarint(std::string& out, uint64_t v) {
  while (v >= 0x80) {
    out += static_cast<char>((v & 0x7F) | 0x80);
    v >>= 7;
  }
  out += static_cast<char>(v);
}

void PutFixed(std::string& out, uint64_t v, int bytes) {
  for (int i = 0; i < bytes; ++i) out += static_cast<char>((v >> (8 * i)) & 0xFF);
}

uint64_t GetFixed(std::string_view in, int bytes) {
  uint64_t v = 0;
  for (int i = 0; i < bytes; ++i) v |= uint64_t{static_cast<unsigned char>(in[i])} << (8 * i);
  return v;
}

void PutKey(std::string& out, uint32_t field, WireType wire) { PutVarint(out, field << 3 | wire); }

void PutBytes(std::string& out, uint32_t field, std::string_view bytes) {
  PutKey(out, field, kLengthDelimited);
  PutVarint(out, bytes.size());
  out += bytes;
}

// tensorflow.Event: wall_time = 1 (double), step = 2 (int64), file_version = 3
// (string), summary = 5 (Summary). Summary: value = 1 (repeated Value).
// Summary.Value: tag = 1 (string), simple_value = 2 (float).
std::string EncodeEvent(double wall_time, std::optional<int64_t> step,
                        std::string_view file_version, std::string_view summary) {
  std::string out;
  PutKey(out, 1, kFixed64);
  PutFixed(out, std::bit_cast<uint64_t>(wall_time), 8);
  if (step) {
    PutKey(out, 2, kVarint);
    PutVarint(out, static_cast<uint64_t>(*step));  // negative: ten bytes, as protobuf does
  }
  if (!file_version.empty()) PutBytes(out, 3, file_version);
  if (!summary.empty()) PutBytes(out, 5, summary);
  return out;
}

// A double as the float TensorBoard stores, without the undefined behaviour
// of converting a value beyond float's range.
float ToFloat(double v) {
  if (std::isnan(v)) return std::numeric_limits<float>::quiet_NaN();
  if (std::fabs(v) > std::numeric_limits<float>::max()) {
    return v > 0 ? std::numeric_limits<float>::infinity() : -std::numeric_limits<float>::infinity();
  }
  return static_cast<float>(v);
}

std::string FrameRecord(std::string_view data) {
  std::string rec;
  rec.reserve(kHeaderBytes + data.size() + kFooterBytes);
  PutFixed(rec, data.size(), 8);
  PutFixed(rec, MaskedCrc32c(rec), 4);
  rec += data;
  PutFixed(rec, MaskedCrc32c(data), 4);
  return rec;
}

std::string HostName() {
  char host[256] = {};
  if (::gethostname(host, sizeof(host) - 1) != 0 || host[0] == '\0') return "localhost";
  std::string out(host);
  std::replace(out.begin(), out.end(), '/', '_');
  return out;
}

// ---- reading ----

// Walks the fields of one protobuf message.
class ProtoReader {
 public:
  explicit ProtoReader(std::string_view data) : d_(data) {}
  bool done() const { return pos_ == d_.size(); }

  Status Varint(uint64_t& v) {
    v = 0;
    for (int shift = 0; shift < 64; shift += 7) {
      if (pos_ == d_.size()) return Error("truncated varint");
      auto b = static_cast<unsigned char>(d_[pos_++]);
      v |= uint64_t{b & 0x7Fu} << shift;
      if ((b & 0x80) == 0) return Status::Ok();
    }
    return Error("varint longer than 10 bytes");
  }
  Status Key(uint32_t& field, uint32_t& wire) {
    uint64_t key = 0;
    SPOT_RETURN_IF_ERROR(Varint(key));
    field = static_cast<uint32_t>(key >> 3);
    wire = static_cast<uint32_t>(key & 7);
    if (field == 0 || key >> 32 != 0) return Error(fmt::format("bad field key {}", key));
    return Status::Ok();
  }
  Status Fixed(int bytes, uint64_t& v) {
    if (d_.size() - pos_ < static_cast<size_t>(bytes)) return Error("truncated fixed-size field");
    v = GetFixed(d_.substr(pos_), bytes);
    pos_ += static_cast<size_t>(bytes);
    return Status::Ok();
  }
  Status Bytes(std::string_view& out) {
    uint64_t n = 0;
    SPOT_RETURN_IF_ERROR(Varint(n));
    if (n > d_.size() - pos_) return Error(fmt::format("length {} runs past the message", n));
    out = d_.substr(pos_, n);
    pos_ += n;
    return Status::Ok();
  }
  Status Skip(uint32_t wire) {
    uint64_t v = 0;
    std::string_view b;
    switch (wire) {
      case kVarint:
        return Varint(v);
      case kFixed64:
        return Fixed(8, v);
      case kLengthDelimited:
        return Bytes(b);
      case kFixed32:
        return Fixed(4, v);
      default:
        return Error(fmt::format("unsupported wire type {}", wire));
    }
  }

 private:
  Status Error(std::string what) const {
    return DataLossError(fmt::format("{} at message byte {}", what, pos_));
  }
  std::string_view d_;
  size_t pos_ = 0;
};

// Appends the Value to `out` when it holds a simple_value.
Status DecodeValue(std::string_view data, std::vector<std::pair<std::string, float>>& out) {
  ProtoReader r(data);
  std::string_view tag;
  std::optional<float> value;
  while (!r.done()) {
    uint32_t field = 0, wire = 0;
    SPOT_RETURN_IF_ERROR(r.Key(field, wire));
    uint64_t bits = 0;
    if (field == 1 && wire == kLengthDelimited) {
      SPOT_RETURN_IF_ERROR(r.Bytes(tag));
    } else if (field == 2 && wire == kFixed32) {
      SPOT_RETURN_IF_ERROR(r.Fixed(4, bits));
      value = std::bit_cast<float>(static_cast<uint32_t>(bits));
    } else {
      SPOT_RETURN_IF_ERROR(r.Skip(wire));
    }
  }
  if (value) out.emplace_back(std::string(tag), *value);
  return Status::Ok();
}

Status DecodeSummary(std::string_view data, std::vector<std::pair<std::string, float>>& out) {
  ProtoReader r(data);
  while (!r.done()) {
    uint32_t field = 0, wire = 0;
    SPOT_RETURN_IF_ERROR(r.Key(field, wire));
    if (field == 1 && wire == kLengthDelimited) {
      std::string_view value;
      SPOT_RETURN_IF_ERROR(r.Bytes(value));
      SPOT_RETURN_IF_ERROR(DecodeValue(value, out));
    } else {
      SPOT_RETURN_IF_ERROR(r.Skip(wire));
    }
  }
  return Status::Ok();
}

Status DecodeEvent(std::string_view data, EventFile& file) {
  ProtoReader r(data);
  double wall_time = 0;
  int64_t step = 0;
  std::vector<std::pair<std::string, float>> values;
  while (!r.done()) {
    uint32_t field = 0, wire = 0;
    SPOT_RETURN_IF_ERROR(r.Key(field, wire));
    uint64_t v = 0;
    std::string_view bytes;
    if (field == 1 && wire == kFixed64) {
      SPOT_RETURN_IF_ERROR(r.Fixed(8, v));
      wall_time = std::bit_cast<double>(v);
    } else if (field == 2 && wire == kVarint) {
      SPOT_RETURN_IF_ERROR(r.Varint(v));
      step = static_cast<int64_t>(v);
    } else if (field == 3 && wire == kLengthDelimited) {
      SPOT_RETURN_IF_ERROR(r.Bytes(bytes));
      if (file.file_version.empty()) file.file_version = std::string(bytes);
    } else if (field == 5 && wire == kLengthDelimited) {
      SPOT_RETURN_IF_ERROR(r.Bytes(bytes));
      SPOT_RETURN_IF_ERROR(DecodeSummary(bytes, values));
    } else {
      SPOT_RETURN_IF_ERROR(r.Skip(wire));
    }
  }
  for (auto& [tag, value] : values) {
    file.scalars.push_back(ScalarPoint{wall_time, step, std::move(tag), value});
  }
  return Status::Ok();
}

}  // namespace

uint32_t Crc32c(std::string_view data) {
  uint32_t c = 0xFFFFFFFFu;
  for (char ch : data) c = kCrc32cTable[(c ^ static_cast<unsigned char>(ch)) & 0xFF] ^ (c >> 8);
  return c ^ 0xFFFFFFFFu;
}

uint32_t MaskedCrc32c(std::string_view data) {
  uint32_t c = Crc32c(data);
  return ((c >> 15) | (c << 17)) + 0xa282ead8u;
}

// ---- EventWriter ----

Result<std::unique_ptr<EventWriter>> EventWriter::Open(const std::string& run_dir) {
  SPOT_RETURN_IF_ERROR(CreateDirectories(run_dir));
  static std::atomic<uint64_t> counter{0};
  const std::string host = HostName();
  const int64_t now = static_cast<int64_t>(std::time(nullptr));
  for (int attempt = 0; attempt < 1000; ++attempt) {
    std::string path = (fs::path(run_dir) / fmt::format("events.out.tfevents.{}.{}.{}.{}", now,
                                                        host, ::getpid(), counter++))
                           .string();
    // O_EXCL: a name some other writer took (another host with our host name
    // and pid on a shared disk) is skipped, never shared.
    int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
    if (fd < 0 && errno == EEXIST) continue;
    if (fd < 0) {
      return UnavailableError(
          fmt::format("creating events file {}: {}", path, std::strerror(errno)));
    }
    std::FILE* file = ::fdopen(fd, "wb");
    if (file == nullptr) {
      Status s =
          UnavailableError(fmt::format("opening events file {}: {}", path, std::strerror(errno)));
      ::close(fd);
      return s;
    }
    std::unique_ptr<EventWriter> writer(new EventWriter(std::move(path), file));
    SPOT_RETURN_IF_ERROR(
        writer->WriteEvent(EncodeEvent(RealClock()->NowUnixS(), std::nullopt, kFileVersion, {})));
    SPOT_RETURN_IF_ERROR(writer->Flush());
    return writer;
  }
  return UnavailableError(fmt::format("no free events file name in {}", run_dir));
}

EventWriter::~EventWriter() {
  if (file_ != nullptr) std::fclose(file_);
}

Status EventWriter::WriteEvent(std::string_view event) {
  if (!error_.ok()) return error_;
  std::string rec = FrameRecord(event);
  if (std::fwrite(rec.data(), 1, rec.size(), file_) != rec.size()) {
    error_ =
        UnavailableError(fmt::format("writing events file {}: {}", path_, std::strerror(errno)));
  }
  return error_;
}

Status EventWriter::Flush() {
  if (!error_.ok()) return error_;
  if (std::fflush(file_) != 0) {
    error_ =
        UnavailableError(fmt::format("writing events file {}: {}", path_, std::strerror(errno)));
  }
  return error_;
}

Status EventWriter::AddScalars(int64_t step,
                               const std::vector<std::pair<std::string, double>>& scalars,
                               std::optional<double> wall_time_unix_s) {
  std::string summary;
  for (const auto& [tag, value] : scalars) {
    if (tag.empty()) return InvalidArgumentError(fmt::format("events file {}: empty tag", path_));
    std::string v;
    PutBytes(v, 1, tag);
    PutKey(v, 2, kFixed32);
    PutFixed(v, std::bit_cast<uint32_t>(ToFloat(value)), 4);
    PutBytes(summary, 1, v);
  }
  double wall = wall_time_unix_s ? *wall_time_unix_s : RealClock()->NowUnixS();
  SPOT_RETURN_IF_ERROR(WriteEvent(EncodeEvent(wall, step, {}, summary)));
  return Flush();
}

Status EventWriter::AddScalar(std::string_view tag, int64_t step, double value,
                              std::optional<double> wall_time_unix_s) {
  return AddScalars(step, {{std::string(tag), value}}, wall_time_unix_s);
}

// ---- reading ----

Result<EventFile> ReadEventFile(const std::string& path, bool allow_partial_tail) {
  SPOT_ASSIGN_OR_RETURN(std::string data, ReadFile(path));
  EventFile out;
  size_t off = 0;
  auto damaged = [&](std::string_view what) {
    return DataLossError(fmt::format("events file {}: record at byte {}: {}", path, off, what));
  };
  while (off < data.size()) {
    const size_t left = data.size() - off;
    if (left < kHeaderBytes) {
      if (allow_partial_tail) break;
      return damaged(fmt::format("truncated header ({} of {} bytes)", left, kHeaderBytes));
    }
    std::string_view header(data.data() + off, 8);
    const uint64_t length = GetFixed(header, 8);
    if (GetFixed(std::string_view(data).substr(off + 8), 4) != MaskedCrc32c(header)) {
      return damaged("length CRC mismatch");
    }
    const size_t room = left - kHeaderBytes;
    if (room < kFooterBytes || length > room - kFooterBytes) {
      if (allow_partial_tail) break;
      return damaged(
          fmt::format("truncated: {} data bytes and a CRC announced, {} bytes left", length, room));
    }
    std::string_view payload(data.data() + off + kHeaderBytes, length);
    if (GetFixed(std::string_view(data).substr(off + kHeaderBytes + length), 4) !=
        MaskedCrc32c(payload)) {
      return damaged("data CRC mismatch");
    }
    if (Status s = DecodeEvent(payload, out); !s.ok()) {
      return damaged("bad Event protobuf: " + s.message());
    }
    ++out.records;
    off += kHeaderBytes + length + kFooterBytes;
  }
  return out;
}

Result<std::vector<ScalarPoint>> ReadRunScalars(const std::string& run_dir) {
  std::error_code ec;
  fs::directory_iterator it(run_dir, ec);
  if (ec == std::errc::no_such_file_or_directory) {
    return NotFoundError(fmt::format("run directory {} does not exist", run_dir));
  }
  if (ec) return UnavailableError(fmt::format("listing {}: {}", run_dir, ec.message()));
  std::vector<std::string> files;
  for (; it != fs::directory_iterator(); it.increment(ec)) {
    std::error_code type_ec;  // an entry removed meanwhile is skipped
    if (it->path().filename().string().find("tfevents") != std::string::npos &&
        it->is_regular_file(type_ec)) {
      files.push_back(it->path().string());
    }
  }
  if (ec) return UnavailableError(fmt::format("listing {}: {}", run_dir, ec.message()));
  std::sort(files.begin(), files.end());
  std::vector<ScalarPoint> out;
  for (const std::string& f : files) {
    SPOT_ASSIGN_OR_RETURN(EventFile file, ReadEventFile(f, /*allow_partial_tail=*/true));
    for (ScalarPoint& p : file.scalars) out.push_back(std::move(p));
  }
  // A NaN wall time sorts first, so that the order stays a strict weak one.
  auto key = [](const ScalarPoint& p) {
    return std::pair(
        std::isnan(p.wall_time) ? -std::numeric_limits<double>::infinity() : p.wall_time, p.step);
  };
  std::stable_sort(out.begin(), out.end(),
                   [&](const ScalarPoint& a, const ScalarPoint& b) { return key(a) < key(b); });
  return out;
}

}  // namespace spot::monitor
