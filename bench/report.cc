#include "report.h"

#include <fmt/format.h>

#include <algorithm>
#include <cassert>
#include <chrono>
#include <cstdio>

namespace spot::bench {

double Median(std::vector<double> v) {
  assert(!v.empty());
  std::sort(v.begin(), v.end());
  size_t mid = v.size() / 2;
  return v.size() % 2 == 1 ? v[mid] : (v[mid - 1] + v[mid]) / 2;
}

std::string FormatList(const std::vector<double>& v, int decimals) {
  std::string out = "[";
  for (size_t i = 0; i < v.size(); ++i) {
    out += fmt::format("{}{:.{}f}", i == 0 ? "" : ", ", v[i], decimals);
  }
  return out + "]";
}

std::string Table::ToMarkdown() const {
  std::vector<size_t> width(header_.size(), 3);
  for (size_t c = 0; c < header_.size(); ++c) width[c] = std::max(width[c], header_[c].size());
  for (const auto& row : rows_) {
    for (size_t c = 0; c < row.size(); ++c) width[c] = std::max(width[c], row[c].size());
  }
  auto line = [&](const std::vector<std::string>& cells) {
    std::string s = "|";
    for (size_t c = 0; c < cells.size(); ++c) s += fmt::format(" {:<{}} |", cells[c], width[c]);
    return s + "\n";
  };
  std::string out = line(header_);
  out += "|";
  for (size_t w : width) out += std::string(w + 2, '-') + "|";
  out += "\n";
  for (const auto& row : rows_) out += line(row);
  return out;
}

void Progress(std::string_view message) {
  static const auto start = std::chrono::steady_clock::now();
  double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  fmt::print(stderr, "[spot_bench +{:.1f}s] {}\n", s, message);
  std::fflush(stderr);
}

}  // namespace spot::bench
