#include "train/csv_table.h"

#include <csv.h>
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdint>
#include <utility>

#include "core/file_io.h"

namespace spot::train {
namespace {

// Collects libcsv's callbacks: fields of the current row, then the row.
struct Rows {
  std::vector<std::vector<std::string>> rows;
  std::vector<std::string> current;
  static void Field(void* s, size_t n, void* self) {
    static_cast<Rows*>(self)->current.emplace_back(static_cast<const char*>(s), n);
  }
  static void End(int, void* self) {
    auto* r = static_cast<Rows*>(self);
    r->rows.push_back(std::move(r->current));
    r->current.clear();
  }
};

// The records of `path`, or only its first `max_rows` (parsed in chunks, so
// reading a header does not parse the table).
Result<std::vector<std::vector<std::string>>> ParseCsv(const std::string& path,
                                                       size_t max_rows = SIZE_MAX) {
  SPOT_ASSIGN_OR_RETURN(std::string text, ReadFile(path));
  csv_parser p;
  if (csv_init(&p, CSV_STRICT | CSV_STRICT_FINI) != 0) return InternalError("csv_init failed");
  Rows rows;
  constexpr size_t kChunk = 64 << 10;
  size_t done = 0;
  while (done < text.size() && rows.rows.size() < max_rows) {
    const size_t n = std::min(kChunk, text.size() - done);
    const size_t parsed = csv_parse(&p, text.data() + done, n, Rows::Field, Rows::End, &rows);
    done += parsed;
    if (parsed != n) break;
  }
  const bool ok = rows.rows.size() >= max_rows ||
                  (done == text.size() && csv_fini(&p, Rows::Field, Rows::End, &rows) == 0);
  const std::string why = ok ? "" : csv_strerror(csv_error(&p));
  csv_free(&p);
  if (!ok) {
    const auto line =
        1 + std::count(text.begin(), text.begin() + std::min(done, text.size()), '\n');
    return InvalidArgumentError(fmt::format("{}:{}: not valid CSV: {}", path, line, why));
  }
  if (rows.rows.size() > max_rows) rows.rows.resize(max_rows);
  return rows.rows;
}

// The header's feature columns and the label's index in it.
Result<std::pair<std::vector<std::string>, size_t>> Columns(const std::string& path,
                                                            const std::vector<std::string>& header,
                                                            const std::string& label) {
  auto label_at = std::find(header.begin(), header.end(), label);
  if (label_at == header.end()) {
    return InvalidArgumentError(fmt::format("{}:1: no column {} (dataset.label) among {}", path,
                                            label, fmt::join(header, ", ")));
  }
  std::vector<std::string> features;
  for (const std::string& name : header) {
    if (&name != &*label_at) features.push_back(name);
  }
  return std::pair{std::move(features), static_cast<size_t>(label_at - header.begin())};
}

template <typename T>
bool ParseWhole(const std::string& s, T* out) {
  const char* b = s.data();
  const char* e = b + s.size();
  while (b < e && *b == ' ') ++b;
  while (e > b && e[-1] == ' ') --e;
  auto r = std::from_chars(b, e, *out);
  return r.ec == std::errc() && r.ptr == e && b != e;
}

}  // namespace

Result<std::vector<std::string>> ReadCsvFeatures(const std::string& path,
                                                 const std::string& label) {
  SPOT_ASSIGN_OR_RETURN(auto rows, ParseCsv(path, 1));
  if (rows.empty()) return InvalidArgumentError(path + ": empty (a header row, then data)");
  SPOT_ASSIGN_OR_RETURN(auto columns, Columns(path, rows[0], label));
  return std::move(columns.first);
}

Result<CsvTable> ReadCsvTable(const std::string& path, const std::string& label,
                              const std::vector<std::string>* expect_features) {
  SPOT_ASSIGN_OR_RETURN(auto rows, ParseCsv(path));
  if (rows.empty()) return InvalidArgumentError(path + ": empty (a header row, then data)");
  const std::vector<std::string>& header = rows[0];
  SPOT_ASSIGN_OR_RETURN(auto columns, Columns(path, header, label));
  const size_t label_col = columns.second;
  CsvTable t;
  t.features = std::move(columns.first);
  if (expect_features && *expect_features != t.features) {
    return InvalidArgumentError(fmt::format("{}:1: feature columns {} differ from train.csv's {}",
                                            path, fmt::join(t.features, ", "),
                                            fmt::join(*expect_features, ", ")));
  }
  for (size_t r = 1; r < rows.size(); ++r) {
    const auto& row = rows[r];
    if (row.size() != header.size()) {
      return InvalidArgumentError(fmt::format("{}:{}: {} fields; the header has {}", path, r + 1,
                                              row.size(), header.size()));
    }
    for (size_t c = 0; c < row.size(); ++c) {
      if (c == label_col) {
        int64_t y = -1;
        if (!ParseWhole(row[c], &y) || y < 0) {
          return InvalidArgumentError(fmt::format(
              "{}:{}: {} is \"{}\"; class labels are integers >= 0", path, r + 1, label, row[c]));
        }
        t.labels.push_back(y);
        continue;
      }
      float v = 0;
      if (!ParseWhole(row[c], &v) || !std::isfinite(v)) {
        return InvalidArgumentError(fmt::format("{}:{}: {} is \"{}\", not a finite number", path,
                                                r + 1, header[c], row[c]));
      }
      t.values.push_back(v);
    }
  }
  if (t.rows() == 0) return InvalidArgumentError(path + ": a header but no rows");
  if (t.features.empty()) return InvalidArgumentError(path + ": no feature columns");
  return t;
}

}  // namespace spot::train
