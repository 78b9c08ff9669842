// Base64 (RFC 4648, standard alphabet, padded). Written by hand: etcd's JSON
// gateway and WebDriver's screenshots need it, and it is too small for a
// dependency.
#pragma once

#include <optional>
#include <string>
#include <string_view>

namespace spot {

std::string Base64Encode(std::string_view in);
// nullopt when `in` is not padded base64 (a length that is not a multiple of
// 4, a character outside the alphabet, padding before the end).
std::optional<std::string> Base64Decode(std::string_view in);

}  // namespace spot
