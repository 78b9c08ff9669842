#include "train/numpy_file.h"

#include <fmt/format.h>
#include <zip.h>

#include <cctype>
#include <charconv>
#include <cstring>
#include <map>
#include <memory>
#include <optional>

#include "core/file_io.h"

namespace spot::train {
namespace {

constexpr std::string_view kMagic = "\x93NUMPY";

// The value after `'key':` in the header dict, up to the next top-level ',' or '}'.
std::optional<std::string_view> DictValue(std::string_view header, std::string_view key) {
  for (const char quote : {'\'', '"'}) {
    const std::string k = fmt::format("{}{}{}", quote, key, quote);
    size_t at = header.find(k);
    if (at == std::string_view::npos) continue;
    at = header.find(':', at + k.size());
    if (at == std::string_view::npos) return std::nullopt;
    size_t end = at + 1;
    int depth = 0;
    for (; end < header.size(); ++end) {
      const char c = header[end];
      if (c == '(' || c == '[') ++depth;
      if (c == ')' || c == ']') --depth;
      if (depth == 0 && (c == ',' || c == '}')) break;
    }
    std::string_view v = header.substr(at + 1, end - at - 1);
    while (!v.empty() && std::isspace(static_cast<unsigned char>(v.front()))) v.remove_prefix(1);
    while (!v.empty() && std::isspace(static_cast<unsigned char>(v.back()))) v.remove_suffix(1);
    return v;
  }
  return std::nullopt;
}

Result<std::vector<int64_t>> ParseShape(std::string_view v, const std::string& where) {
  auto bad = [&] { return InvalidArgumentError(fmt::format("{}: bad shape {}", where, v)); };
  if (v.size() < 2 || v.front() != '(' || v.back() != ')') return bad();
  v = v.substr(1, v.size() - 2);
  std::vector<int64_t> shape;
  while (!v.empty()) {
    while (!v.empty() && (v.front() == ' ' || v.front() == ',')) v.remove_prefix(1);
    if (v.empty()) break;
    int64_t d = 0;
    auto [p, ec] = std::from_chars(v.data(), v.data() + v.size(), d);
    if (ec != std::errc() || d < 0) return bad();
    shape.push_back(d);
    v.remove_prefix(static_cast<size_t>(p - v.data()));
    if (!v.empty() && v.front() == 'L') v.remove_prefix(1);  // Python 2 longs
  }
  return shape;
}

}  // namespace

int DTypeBytes(const std::string& dtype) {
  static const std::map<std::string, int, std::less<>> kSizes = {{"f4", 4}, {"f8", 8}, {"u1", 1},
                                                                 {"i1", 1}, {"b1", 1}, {"u2", 2},
                                                                 {"i2", 2}, {"i4", 4}, {"i8", 8}};
  auto it = kSizes.find(dtype);
  return it == kSizes.end() ? 0 : it->second;
}

Result<HostArray> ParseNpy(std::string_view bytes, const std::string& where) {
  if (bytes.size() < 10 || bytes.substr(0, kMagic.size()) != kMagic) {
    return InvalidArgumentError(where + ": not a NumPy .npy array (no \\x93NUMPY magic)");
  }
  const auto major = static_cast<unsigned char>(bytes[6]);
  size_t header_len = 0, offset = 0;
  if (major == 1) {
    header_len = static_cast<unsigned char>(bytes[8]) | static_cast<unsigned char>(bytes[9]) << 8;
    offset = 10;
  } else if (major == 2 || major == 3) {
    if (bytes.size() < 12) return InvalidArgumentError(where + ": truncated .npy header");
    for (int i = 3; i >= 0; --i)
      header_len = header_len << 8 | static_cast<unsigned char>(bytes[8 + i]);
    offset = 12;
  } else {
    return InvalidArgumentError(
        fmt::format("{}: .npy format version {} is not supported", where, major));
  }
  if (bytes.size() < offset + header_len) {
    return InvalidArgumentError(where + ": truncated .npy header");
  }
  const std::string_view header = bytes.substr(offset, header_len);
  auto descr = DictValue(header, "descr");
  auto fortran = DictValue(header, "fortran_order");
  auto shape_text = DictValue(header, "shape");
  if (!descr || !fortran || !shape_text) {
    return InvalidArgumentError(
        fmt::format("{}: .npy header {} lacks descr, fortran_order or shape", where, header));
  }
  if (*fortran != "False") {
    return InvalidArgumentError(
        where + ": Fortran-ordered arrays are not supported (np.ascontiguousarray first)");
  }
  std::string_view d = *descr;
  if (d.size() < 4 || (d.front() != '\'' && d.front() != '"')) {
    return InvalidArgumentError(fmt::format("{}: dtype {} is not supported", where, d));
  }
  d = d.substr(1, d.size() - 2);
  const char order = d[0];
  std::string_view kind = d.substr(1);
  if (order == '>' && DTypeBytes(std::string(kind)) > 1) {
    return InvalidArgumentError(fmt::format("{}: big-endian dtype {} is not supported", where, d));
  }
  if ((order != '<' && order != '|' && order != '=' && order != '>') ||
      DTypeBytes(std::string(kind)) == 0) {
    return InvalidArgumentError(fmt::format(
        "{}: dtype {} is not supported (float32/64, int8/16/32/64, uint8/16, bool)", where, d));
  }
  HostArray a;
  a.dtype = std::string(kind);
  SPOT_ASSIGN_OR_RETURN(a.shape, ParseShape(*shape_text, where));
  const size_t want = static_cast<size_t>(a.count()) * static_cast<size_t>(DTypeBytes(a.dtype));
  const size_t have = bytes.size() - offset - header_len;
  if (have != want) {
    return InvalidArgumentError(
        fmt::format("{}: shape {} of {} needs {} bytes of data, the file has {}", where,
                    *shape_text, d, want, have));
  }
  a.data = std::string(bytes.substr(offset + header_len));
  return a;
}

Result<std::map<std::string, HostArray>> ReadNpz(const std::string& path,
                                                 const std::vector<std::string>& names) {
  SPOT_ASSIGN_OR_RETURN(std::string file, ReadFile(path));
  zip_error_t error;
  zip_error_init(&error);
  zip_source_t* src = zip_source_buffer_create(file.data(), file.size(), 0, &error);
  zip_t* archive = src ? zip_open_from_source(src, ZIP_RDONLY, &error) : nullptr;
  if (!archive) {
    std::string why = zip_error_strerror(&error);
    if (src) zip_source_free(src);
    zip_error_fini(&error);
    return InvalidArgumentError(fmt::format("{}: not a NumPy .npz archive: {}", path, why));
  }
  std::unique_ptr<zip_t, decltype(&zip_discard)> closer(archive, &zip_discard);
  zip_error_fini(&error);
  std::map<std::string, HostArray> out;
  for (const std::string& name : names) {
    const std::string entry = name + ".npy";
    zip_stat_t st;
    zip_stat_init(&st);
    if (zip_stat(archive, entry.c_str(), 0, &st) != 0) {
      std::string present;
      for (zip_int64_t i = 0; i < zip_get_num_entries(archive, 0); ++i) {
        present += (present.empty() ? "" : ", ") + std::string(zip_get_name(archive, i, 0));
      }
      return InvalidArgumentError(
          fmt::format("{}: no array {} (the archive holds: {})", path, name, present));
    }
    std::string bytes(static_cast<size_t>(st.size), '\0');
    zip_file_t* f = zip_fopen(archive, entry.c_str(), 0);
    const zip_int64_t got = f ? zip_fread(f, bytes.data(), bytes.size()) : -1;
    const std::string why = f ? zip_strerror(archive) : zip_strerror(archive);
    if (f) zip_fclose(f);
    if (got != static_cast<zip_int64_t>(bytes.size())) {
      return InvalidArgumentError(fmt::format("{}: array {} is damaged: {}", path, name, why));
    }
    SPOT_ASSIGN_OR_RETURN(out[name], ParseNpy(bytes, path + ": " + name));
  }
  return out;
}

}  // namespace spot::train
