#pragma once
// Tables in CSV: a header row naming the columns, then one sample per line, every cell a number.

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

/// Reads `path`, taking `label_column` (a header name) as the labels. Throws FileError naming the
/// file, and for a bad cell its line and column: a missing label column (with the nearest header
/// name), a row with too few or too many cells, an empty or non-numeric or non-finite cell, no rows.
CsvTable read_csv(const std::string& path, const std::string& label_column);

}  // namespace ddp
