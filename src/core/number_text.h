// What text counts as a number where users write one (job files, component
// parameters): one owner for the rule, so a YAML field and a `policy:`
// parameter read "010" or "0x10" the same way (they refuse both).
//
//   integer: [+-]digits, in int64 range, no leading zero ("010" is 8 to
//            YAML 1.1 and 10 to YAML 1.2: ambiguous)
//   number:  [+-]digits[.digits][e[+-]digits] (or .digits), finite, the
//            same rule for its integer part; no hex, inf or nan
//
// Both return the value, or InvalidArgument whose message is the reason
// alone ("expected an integer (got '1.5')"): the caller adds file and field.
#pragma once

#include <cstdint>
#include <string_view>

#include "core/status.h"

namespace spot {

Result<int64_t> ParseInteger(std::string_view text);
Result<double> ParseNumber(std::string_view text);

}  // namespace spot
