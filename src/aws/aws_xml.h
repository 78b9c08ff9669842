// Reading AWS's XML answers (S3's REST and EC2's Query API both answer in
// XML) with libxml2: no network access, no error output, any namespace.
// Thread-safe.
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace spot::aws {

// The text of the first element named `name` (any namespace) below the root
// of XML `doc`, searching depth-first; "" when absent or unparsable.
std::string XmlText(std::string_view doc, std::string_view name);
// The texts of every `leaf` inside each element named `parent`, in document
// order (e.g. ("Contents", "Key") of a ListObjectsV2 result).
std::vector<std::string> XmlTexts(std::string_view doc, std::string_view parent,
                                  std::string_view leaf);

}  // namespace spot::aws
