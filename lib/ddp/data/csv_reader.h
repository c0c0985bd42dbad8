#pragma once
// Tables in CSV: a header row naming the columns, then one sample per line, every cell a number.
// Cells are read as RFC 4180 writes them (csv_line.h): quoted cells may hold commas and "".

#include <torch/types.h>

#include <string>
#include <vector>

namespace ddp {

/// A CSV file split into the label column and the feature columns.
struct CsvTable {
  torch::Tensor features;                  ///< float32 [N, F], the other columns in file order
  torch::Tensor labels;                    ///< float64 [N], the label column
  std::vector<std::string> feature_names;  ///< header names of the feature columns
};

/// Reads `path`, taking `label_column` (a header name) as the labels; a UTF-8 byte-order mark
/// before the header is skipped. Throws FileError naming the file, and for a bad cell its line and
/// column: a missing label column (with the nearest header name), a column name given twice (both
/// positions), a row with too few or too many cells, a line too long for its header (before it is
/// split), a quoted cell not closed on its line, an empty or non-numeric or non-finite cell, no rows.
CsvTable read_csv(const std::string& path, const std::string& label_column);

}  // namespace ddp
