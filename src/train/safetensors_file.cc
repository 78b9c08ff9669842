#include "train/safetensors_file.h"

#include <fmt/format.h>

#include <cstring>
#include <nlohmann/json.hpp>

#include "core/file_io.h"
#include "core/strict_json.h"

namespace spot::train {
namespace {

using nlohmann::json;

// safetensors' dtype names, as NumPy's.
std::string FromSafetensorsDType(const std::string& t) {
  static const std::map<std::string, std::string> kTypes = {
      {"F32", "f4"}, {"F64", "f8"}, {"U8", "u1"},  {"I8", "i1"}, {"BOOL", "b1"},
      {"U16", "u2"}, {"I16", "i2"}, {"I32", "i4"}, {"I64", "i8"}};
  auto it = kTypes.find(t);
  return it == kTypes.end() ? "" : it->second;
}

}  // namespace

Result<std::map<std::string, HostArray>> ReadSafetensors(const std::string& path,
                                                         const std::vector<std::string>& names) {
  SPOT_ASSIGN_OR_RETURN(std::string file, ReadFile(path));
  uint64_t header_len = 0;
  if (file.size() < 8) return InvalidArgumentError(path + ": not a safetensors file (too short)");
  std::memcpy(&header_len, file.data(), 8);  // little-endian, as the hosts we run on
  if (header_len > file.size() - 8) {
    return InvalidArgumentError(
        fmt::format("{}: not a safetensors file (header of {} bytes in a file of {})", path,
                    header_len, file.size()));
  }
  // Strict: a tensor named twice in the header is an error, not "the last wins".
  auto parsed = ParseStrictJson(std::string_view(file).substr(8, header_len), path);
  if (!parsed.ok()) {
    return InvalidArgumentError(
        fmt::format("{} (in the safetensors header)", parsed.status().message()));
  }
  const json header = std::move(parsed).value();
  if (!header.is_object()) {
    return InvalidArgumentError(path +
                                ": not a safetensors file (its header is not a JSON object)");
  }
  const uint64_t data_start = 8 + header_len;
  const uint64_t data_size = file.size() - data_start;
  std::vector<std::string> wanted = names;
  if (wanted.empty()) {
    for (const auto& [k, v] : header.items()) {
      if (k != "__metadata__") wanted.push_back(k);
    }
  }
  std::map<std::string, HostArray> out;
  for (const std::string& name : wanted) {
    if (!header.contains(name)) {
      std::string present;
      for (const auto& [k, v] : header.items()) {
        if (k != "__metadata__") present += (present.empty() ? "" : ", ") + k;
      }
      return InvalidArgumentError(
          fmt::format("{}: no tensor {} (the file holds: {})", path, name, present));
    }
    const json& t = header[name];
    const std::string where = path + ": " + name;
    HostArray a;
    if (!t.is_object() || !t.contains("dtype") || !t["dtype"].is_string() || !t.contains("shape") ||
        !t["shape"].is_array() || !t.contains("data_offsets") || !t["data_offsets"].is_array() ||
        t["data_offsets"].size() != 2) {
      return InvalidArgumentError(where + ": needs dtype, shape and data_offsets [begin, end]");
    }
    a.dtype = FromSafetensorsDType(t["dtype"].get<std::string>());
    if (a.dtype.empty()) {
      return InvalidArgumentError(
          fmt::format("{}: dtype {} is not supported", where, t["dtype"].get<std::string>()));
    }
    for (const json& d : t["shape"]) {
      if (!d.is_number_unsigned()) return InvalidArgumentError(where + ": shape holds a non-size");
      a.shape.push_back(d.get<int64_t>());
    }
    const json& off = t["data_offsets"];
    if (!off[0].is_number_unsigned() || !off[1].is_number_unsigned()) {
      return InvalidArgumentError(where + ": data_offsets must be two sizes");
    }
    const uint64_t begin = off[0].get<uint64_t>(), end = off[1].get<uint64_t>();
    const uint64_t want =
        static_cast<uint64_t>(a.count()) * static_cast<uint64_t>(DTypeBytes(a.dtype));
    if (begin > end || end > data_size || end - begin != want) {
      return InvalidArgumentError(fmt::format(
          "{}: data_offsets [{}, {}] do not hold its {} bytes within the {} bytes of data", where,
          begin, end, want, data_size));
    }
    a.data = file.substr(data_start + begin, end - begin);
    out[name] = std::move(a);
  }
  return out;
}

}  // namespace spot::train
