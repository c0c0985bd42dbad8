#pragma once
// The train and eval splits `data:` describes, from the format data.dataset names (dataset_format.h).

#include <cstdint>
#include <functional>
#include <optional>
#include <string>

#include "ddp/data/data_config.h"
#include "ddp/data/dataset.h"

namespace ddp {

/// The training split and, unless data.eval_split is none, the eval split.
struct DatasetSplits {
  Dataset train;
  std::optional<Dataset> eval;
};

/// Loads the splits through the registered format data.dataset names (idx through the node's cache,
/// synthetic with `synthetic_classes` classes, npy, csv); data.eval_split train makes the training
/// split the eval split. Throws FileError naming the file, or ConfigError naming the key (a graph
/// has no sample splits: its task reads it).
DatasetSplits load_dataset_splits(const DataConfig& config, int64_t synthetic_classes);

/// One file's samples: its path and, where the format keeps labels apart, the labels file's.
using FileLoader = std::function<Dataset(const std::string& path, const std::string& labels)>;

/// The splits of a format read from files (npy, csv): data.path (data.labels) for training, and for
/// eval data.eval_path (data.eval_labels) or data.eval_fraction carved out of the training file by
/// a seeded permutation. FileError when the two files' samples differ in shape, or (`check_finite`)
/// when a feature is NaN or infinite.
DatasetSplits load_file_splits(const DataConfig& config, const FileLoader& load, bool check_finite = true);

}  // namespace ddp
