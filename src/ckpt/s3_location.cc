#include "ckpt/s3_location.h"

#include <fmt/format.h>

#include <algorithm>
#include <cctype>

namespace spot::ckpt {
namespace {

constexpr std::string_view kScheme = "s3://";

bool ValidBucket(std::string_view b) {
  if (b.size() < 3 || b.size() > 63) return false;
  auto ok = [](char c) {
    return std::islower(static_cast<unsigned char>(c)) ||
           std::isdigit(static_cast<unsigned char>(c)) || c == '.' || c == '-';
  };
  return std::all_of(b.begin(), b.end(), ok) &&
         std::isalnum(static_cast<unsigned char>(b.front())) &&
         std::isalnum(static_cast<unsigned char>(b.back()));
}

}  // namespace

bool IsS3Location(std::string_view location) { return location.starts_with(kScheme); }

std::string S3Location::Key(std::string_view name) const {
  return prefix.empty() ? std::string(name) : prefix + "/" + std::string(name);
}

std::string S3Location::Url(std::string_view name) const {
  std::string url = std::string(kScheme) + bucket;
  if (!prefix.empty()) url += "/" + prefix;
  if (!name.empty()) url += "/" + std::string(name);
  return url;
}

Result<S3Location> ParseS3Location(std::string_view location) {
  auto bad = [&](std::string_view why) {
    return InvalidArgumentError(fmt::format("'{}' is not an S3 location: {}", location, why));
  };
  if (!IsS3Location(location)) return bad("want s3://bucket/prefix");
  std::string_view rest = location.substr(kScheme.size());
  const size_t slash = rest.find('/');
  S3Location loc;
  loc.bucket = std::string(rest.substr(0, slash));
  if (!ValidBucket(loc.bucket)) {
    return bad("the bucket name must be 3-63 characters of a-z, 0-9, '.' and '-'");
  }
  std::string_view prefix = slash == std::string_view::npos ? "" : rest.substr(slash + 1);
  while (prefix.ends_with('/')) prefix.remove_suffix(1);
  if (prefix.starts_with('/') || prefix.find("//") != std::string_view::npos) {
    return bad("empty path segment in the prefix");
  }
  loc.prefix = std::string(prefix);
  return loc;
}

}  // namespace spot::ckpt
