// A small RFC 4180 CSV reader: comma-separated fields, optional double quotes
// ("" inside quotes is one quote, quoted fields may hold commas and newlines),
// LF or CRLF line ends, a header row naming the columns. Blank lines are
// skipped. Every row keeps the 1-based line it starts on, for error messages.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"

namespace spot::market {

struct CsvRow {
  int line = 0;                     // 1-based line of the row's first character
  std::vector<std::string> fields;  // same count as the header
};

class CsvTable {
 public:
  // Parses `text` (the contents of `file`, which only names it in messages).
  // InvalidArgument for an empty file, an unterminated quote, a stray quote, or
  // a row whose field count differs from the header's ("f.csv:7: 4 fields, header has 5").
  static Result<CsvTable> Parse(std::string_view text, const std::string& file);
  // Reads and parses a file: NotFound when it is missing.
  static Result<CsvTable> Read(const std::string& path);

  const std::string& file() const { return file_; }
  const std::vector<std::string>& header() const { return header_; }
  const std::vector<CsvRow>& rows() const { return rows_; }

  // Index of the first column named any of `names` (in that order), if any.
  std::optional<size_t> Column(std::initializer_list<std::string_view> names) const;
  // "file:line: column: reason", the house format for a bad field.
  Status FieldError(const CsvRow& row, size_t column, std::string_view reason) const;

 private:
  std::string file_;
  std::vector<std::string> header_;
  std::vector<CsvRow> rows_;
};

}  // namespace spot::market
