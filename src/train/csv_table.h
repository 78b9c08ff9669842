// Tables in CSV files (RFC 4180: quoted fields, a header row), parsed with
// libcsv: a class column of integer labels and numeric feature columns, for
// `dataset: {name: csv}` (DIR/train.csv, DIR/test.csv). LibTorch-free.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/status.h"

namespace spot::train {

struct CsvTable {
  std::vector<std::string> features;  // the feature columns' names, in file order
  std::vector<float> values;          // rows x features, row-major
  std::vector<int64_t> labels;        // one per row, >= 0
  int64_t rows() const { return static_cast<int64_t>(labels.size()); }
};

// Reads `path`: its header names the columns; `label` is the class column,
// every other column a number. With `expect_features` (the train table's),
// the columns must be the same, in the same order. InvalidArgument naming the
// file, its line and column: malformed CSV, a row of another width, a field
// that is no number (or no integer >= 0 for the label), no label column, no
// rows.
// The feature columns of `path`'s header (the label's left out), without
// parsing its rows. InvalidArgument as ReadCsvTable for the header.
Result<std::vector<std::string>> ReadCsvFeatures(const std::string& path, const std::string& label);

Result<CsvTable> ReadCsvTable(const std::string& path, const std::string& label,
                              const std::vector<std::string>* expect_features = nullptr);

}  // namespace spot::train
