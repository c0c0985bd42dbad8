#pragma once
// Dataset formats chosen by `data.dataset`. Each format's .cpp registers itself; see Note
// [Registries] in ddp/common/registry.h for why dataset_format.cpp names them.

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "ddp/common/registry.h"
#include "ddp/data/data_config.h"
#include "ddp/data/dataset_splits.h"

namespace ddp {

/// What a format holds: independent samples, the nodes of one graph, or token streams. A task trains on one kind.
enum class DatasetKind { kSamples, kGraph, kTokens };

/// The train and eval splits of a samples format, as `data:` describes them; `synthetic_classes`
/// is the class count a generated dataset draws. Throws FileError naming the file, or ConfigError.
using SplitsLoader = std::function<DatasetSplits(const DataConfig& config, int64_t synthetic_classes)>;

/// One `data.dataset` value.
struct DatasetFormat {
  DatasetKind kind = DatasetKind::kSamples;
  SplitsLoader load_splits;  ///< samples formats; a graph or tokens are read by the task that trains on them
};

/// Name → format; each format's register function adds itself here.
using DatasetFormats = Registry<DatasetFormat>;

/// The format `name` names; ConfigError naming data.dataset and the nearest name when none does.
const DatasetFormat& find_dataset_format(const std::string& name);

}  // namespace ddp
