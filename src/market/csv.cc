#include "market/csv.h"

#include <filesystem>

#include "core/file_io.h"

namespace spot::market {
namespace {

std::string BaseName(const std::string& path) {
  return std::filesystem::path(path).filename().string();
}

// Splits CSV text into records; each record carries the line it starts on.
class Scanner {
 public:
  Scanner(std::string_view text, std::string file) : text_(text), file_(std::move(file)) {}

  // Reads the next record into *row; false at the end of the text.
  Result<bool> Next(CsvRow* row) {
    while (pos_ < text_.size() && IsLineEnd(text_[pos_])) SkipLineEnd();
    if (pos_ >= text_.size()) return false;
    row->line = line_;
    row->fields.clear();
    while (true) {
      SPOT_ASSIGN_OR_RETURN(std::string field, Field());
      row->fields.push_back(std::move(field));
      if (pos_ >= text_.size()) return true;
      if (IsLineEnd(text_[pos_])) {
        SkipLineEnd();
        return true;
      }
      ++pos_;  // the comma
    }
  }

 private:
  static bool IsLineEnd(char c) { return c == '\n' || c == '\r'; }
  void SkipLineEnd() {
    if (text_[pos_] == '\r' && pos_ + 1 < text_.size() && text_[pos_ + 1] == '\n') ++pos_;
    ++pos_;
    ++line_;
  }
  Status Error(std::string_view reason) const {
    return InvalidArgumentError(file_ + ":" + std::to_string(line_) + ": " + std::string(reason));
  }

  Result<std::string> Field() {
    if (pos_ < text_.size() && text_[pos_] == '"') return Quoted();
    std::string out;
    while (pos_ < text_.size() && text_[pos_] != ',' && !IsLineEnd(text_[pos_])) {
      if (text_[pos_] == '"') return Error("quote inside an unquoted field");
      out.push_back(text_[pos_++]);
    }
    return out;
  }

  Result<std::string> Quoted() {
    const int start_line = line_;
    std::string out;
    ++pos_;
    while (true) {
      if (pos_ >= text_.size()) {
        line_ = start_line;
        return Error("unterminated quoted field");
      }
      char c = text_[pos_++];
      if (c == '"') {
        if (pos_ < text_.size() && text_[pos_] == '"') {
          out.push_back('"');
          ++pos_;
          continue;
        }
        break;
      }
      if (c == '\n') ++line_;
      out.push_back(c);
    }
    if (pos_ < text_.size() && text_[pos_] != ',' && !IsLineEnd(text_[pos_])) {
      return Error("text after a closing quote");
    }
    return out;
  }

  std::string_view text_;
  std::string file_;
  size_t pos_ = 0;
  int line_ = 1;
};

}  // namespace

Result<CsvTable> CsvTable::Parse(std::string_view text, const std::string& file) {
  CsvTable table;
  table.file_ = file;
  if (text.starts_with("\xEF\xBB\xBF")) text.remove_prefix(3);  // a UTF-8 byte-order mark
  Scanner scanner(text, file);
  CsvRow header;
  SPOT_ASSIGN_OR_RETURN(bool any, scanner.Next(&header));
  if (!any) return InvalidArgumentError(file + ": empty file, expected a header row");
  table.header_ = std::move(header.fields);
  CsvRow row;
  while (true) {
    SPOT_ASSIGN_OR_RETURN(bool more, scanner.Next(&row));
    if (!more) break;
    if (row.fields.size() != table.header_.size()) {
      return InvalidArgumentError(file + ":" + std::to_string(row.line) + ": " +
                                  std::to_string(row.fields.size()) + " fields, header has " +
                                  std::to_string(table.header_.size()));
    }
    table.rows_.push_back(row);
  }
  return table;
}

Result<CsvTable> CsvTable::Read(const std::string& path) {
  SPOT_ASSIGN_OR_RETURN(std::string text, ReadFile(path));
  return Parse(text, BaseName(path));
}

std::optional<size_t> CsvTable::Column(std::initializer_list<std::string_view> names) const {
  for (std::string_view name : names) {
    for (size_t i = 0; i < header_.size(); ++i) {
      if (header_[i] == name) return i;
    }
  }
  return std::nullopt;
}

Status CsvTable::FieldError(const CsvRow& row, size_t column, std::string_view reason) const {
  return InvalidArgumentError(file_ + ":" + std::to_string(row.line) + ": " + header_[column] +
                              ": " + std::string(reason));
}

}  // namespace spot::market
