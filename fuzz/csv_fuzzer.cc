// Fuzzes the RFC 4180 reader under every market CSV (market/csv.h) and the
// strict field parsers the loaders apply to its fields (market/field_parse.h).
#include <cmath>
#include <cstdint>
#include <string>

#include "fuzz_support.h"
#include "market/csv.h"
#include "market/field_parse.h"

namespace {

using spot::market::CsvRow;
using spot::market::CsvTable;

void ParseFields(const CsvRow& row) {
  for (const std::string& f : row.fields) {
    auto d = spot::market::ParseDouble(f);
    FUZZ_CHECK(!d || std::isfinite(*d), "ParseDouble gave a non-finite number for '" + f + "'");
    (void)spot::market::ParseInt64(f);
    auto t = spot::market::ParseUtcTime(f);
    FUZZ_CHECK(!t || std::isfinite(*t), "ParseUtcTime gave a non-finite time for '" + f + "'");
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text = spot::fuzz::AsString(data, size);
  auto t = CsvTable::Parse(text, "fuzz.csv");
  if (!t.ok()) {
    FUZZ_CHECK(t.status().code() == spot::StatusCode::kInvalidArgument, t.status().ToString());
    return 0;
  }
  const size_t columns = t->header().size();
  FUZZ_CHECK(columns >= 1, "a table without a header column");
  int last_line = 0;
  for (const CsvRow& row : t->rows()) {
    FUZZ_CHECK(row.fields.size() == columns, "row field count differs from the header's");
    FUZZ_CHECK(row.line > last_line, "row lines are not increasing");
    last_line = row.line;
    ParseFields(row);
  }
  (void)t->Column({"availability_zone", "zone", "region"});
  if (!t->rows().empty()) (void)t->FieldError(t->rows().front(), columns - 1, "checked");
  return 0;
}
