#pragma once
// The train and eval splits `data:` describes, from any of the readers.

#include <cstdint>
#include <optional>

#include "ddp/data/data_config.h"
#include "ddp/data/dataset.h"

namespace ddp {

/// The training split and, unless data.eval_split is none, the eval split.
struct DatasetSplits {
  Dataset train;
  std::optional<Dataset> eval;
};

/// Loads the splits: IDX (through the node's cache), synthetic (`synthetic_classes` classes), NPY
/// (features read from the file on demand) or CSV, with data.eval_fraction carved out by a seeded
/// permutation. Checks that features and labels agree in count and that float labels are not NaN.
/// Throws FileError naming the file, or ConfigError naming the key.
DatasetSplits load_dataset_splits(const DataConfig& config, int64_t synthetic_classes);

}  // namespace ddp
