// Small pieces every spot_bench workload uses to report: the median of
// repeated measurements, a Markdown table, and progress lines on stderr.
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace spot::bench {

// Median of `v` (the mean of the middle two for an even count). REQUIRES: !v.empty().
double Median(std::vector<double> v);

// "[1,203, 1,187, 1,215]": the values rounded, for the raw-numbers lines.
std::string FormatList(const std::vector<double>& v, int decimals = 0);

// A Markdown table, printed with its columns padded so it also reads as text.
class Table {
 public:
  explicit Table(std::vector<std::string> header) : header_(std::move(header)) {}
  // REQUIRES: cells.size() == header.size().
  void AddRow(std::vector<std::string> cells) { rows_.push_back(std::move(cells)); }
  std::string ToMarkdown() const;

 private:
  std::vector<std::string> header_;
  std::vector<std::vector<std::string>> rows_;
};

// Writes "[spot_bench +12.3s] message" to stderr (the time since the first call).
void Progress(std::string_view message);

}  // namespace spot::bench
