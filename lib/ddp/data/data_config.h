#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace ddp {

class ConfigSchema;

/// `data:` where samples come from and how they are normalised.
struct DataConfig {
  std::string dataset = "idx";  ///< a registered format: idx (MNIST-format files) | synthetic | npy | csv | graph | tokens
  std::string path = "/usr/share/datasets/fashion-mnist";  ///< idx: directory; npy: features file; csv: table
  std::string labels;       ///< npy: the labels file of `path`
  std::string eval_path;    ///< npy, csv: the test split (features file or table)
  std::string eval_labels;  ///< npy: the labels file of `eval_path`
  double eval_fraction = 0;  ///< npy, csv: test split carved out of `path` instead (seeded by split_seed)
  int64_t split_seed = 0;
  std::string token_dtype;  ///< tokens: uint16 | uint32 for headerless files (nanoGPT's train.bin); "" = from the header
  std::string label_column = "label";  ///< csv: the header name of the labels
  std::string normalize = "auto";  ///< auto | fixed | global | per_feature | none
  double mean = 0.2860;  ///< fixed normalisation: (x - mean) / std, x = pixel/255 for uint8 features
  double std = 0.3530;
  std::string eval_split = "test";  ///< test | train | val (graph) | none
  int64_t synthetic_train_samples = 4096;
  int64_t synthetic_test_samples = 1024;
  int64_t synthetic_seed = 1234;  ///< the synthetic samples (train and test share class prototypes)
  std::string cache_dir;  ///< decoded-dataset cache shared by a node's workers; "" = $XDG_CACHE_HOME/ddprun, "none" = off
  int64_t workers = 1;   ///< background threads assembling batches
  int64_t prefetch = 2;  ///< batches assembled ahead of the step
};

/// `sampler:` DistributedSampler's arguments.
struct SamplerConfig {
  bool shuffle = true;
  int64_t seed = 0;
  bool drop_last = false;
  std::vector<int64_t> fanouts = {25, 10};  ///< graph: neighbours per node at each hop from the seeds; -1: all
  std::string split = "distributed";        ///< distributed | chunk
};

/// Declares the `DataConfig` keys, bound to `config`, with their defaults, docs and ranges.
void declare_config(ConfigSchema& schema, DataConfig& config);
/// Declares the `SamplerConfig` keys, bound to `config`, with their defaults, docs and ranges.
void declare_config(ConfigSchema& schema, SamplerConfig& config);

/// Every registered dataset format, sorted (defined by the registry in dataset_format.cpp, so the
/// config's choices follow it).
std::vector<std::string> dataset_format_names();

/// Where ddp-tokenize leaves the tokenizer of token shards at `data_path` (a file or a glob):
/// tokenizer.model beside them.
std::string tokenizer_beside(const std::string& data_path);

/// What data.normalize resolves to for `config`'s data: none, fixed, global or per_feature (auto:
/// fixed for IDX and synthetic images, global otherwise); "as_stored" for criteo.
std::string normalization_kind(const DataConfig& config);

}  // namespace ddp
