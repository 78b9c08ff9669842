// Comma-separated flag values ("up,hazard-up", "1,6,24"), shared by the subcommands.
#pragma once

#include <sstream>
#include <string>
#include <vector>

namespace spot::cli {

// The non-empty items of a comma-separated list, in order.
inline std::vector<std::string> SplitNames(const std::string& s) {
  std::vector<std::string> out;
  std::stringstream in(s);
  for (std::string n; std::getline(in, n, ',');) {
    if (!n.empty()) out.push_back(n);
  }
  return out;
}

}  // namespace spot::cli
