#pragma once
// A supervised dataset: labels in memory, features in memory or in a file read on demand.

#include <torch/types.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "ddp/data/sample_file.h"

namespace ddp {

/// Features and labels of one split, as stored (converted and normalised only when batched).
struct Dataset {
  torch::Tensor features;  ///< [N, ...] of any dtype in memory; undefined when `feature_file` holds them
  torch::Tensor labels;    ///< [N]: int64 class indices, or float targets ([N] or [N, ...])
  std::string source;      ///< where the samples came from, for logs and errors
  std::shared_ptr<const SampleFile> feature_file;  ///< the features, read on demand (dataset cache, NPY)
  torch::Tensor file_rows;  ///< int64 [N]: which of `feature_file`'s samples these are; undefined: all, in order
  torch::Tensor
      source_rows;  ///< int64 [N]: which of `source`'s samples these are (a carved split); undefined: all, in order

  /// The index in `source` of sample `i` of this dataset, for messages that name a sample.
  int64_t source_row(int64_t i) const { return source_rows.defined() ? source_rows[i].item<int64_t>() : i; }

  /// Number of samples (0 for an empty, default-constructed dataset).
  int64_t size() const { return labels.defined() ? labels.size(0) : 0; }

  /// The shape of one sample's features, e.g. {1, 28, 28} for IDX images.
  std::vector<int64_t> sample_shape() const {
    if (feature_file) return feature_file->sample_shape();
    auto sizes = features.sizes().vec();
    return {sizes.begin() + 1, sizes.end()};
  }

  /// The features' element type as stored.
  torch::ScalarType feature_dtype() const {
    return feature_file ? feature_file->dtype() : features.scalar_type();
  }

  /// Features `indices` (int64 [n]) as stored, [n, sample_shape()...], from memory or from the file.
  torch::Tensor select(const torch::Tensor& indices) const;

  /// The samples `rows` (int64 [n]), in that order, as a dataset of their own. File-backed features
  /// stay in the file.
  Dataset subset(const torch::Tensor& rows) const;
};

}  // namespace ddp
