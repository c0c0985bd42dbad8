#pragma once
// How stored features become model inputs: converted to float32, then shifted and scaled.

#include <torch/types.h>

#include "ddp/data/data_config.h"
#include "ddp/data/dataset.h"

namespace ddp {

/// (x / divisor - mean) / std, with scalar or per-feature (broadcast over a sample) mean and std.
struct Normalizer {
  double divisor = 1;                        ///< 255 for fixed normalisation of uint8 pixels
  double mean = 0, std = 1;                  ///< used when the tensors are undefined
  torch::Tensor mean_per_feature, std_per_feature;  ///< float32 [sample_shape...]
  bool as_stored = false;  ///< inputs are the stored features unchanged (criteo: counts and hashes in float64)
  std::string kind = "none";  ///< normalization_kind: fixed, global, per_feature, none or as_stored

  /// Float32 model inputs from stored features [n, sample_shape...] of any dtype (or, as_stored, those).
  torch::Tensor apply(const torch::Tensor& stored) const;
};

/// The normalisation `data.normalize` asks for. global and per_feature statistics come from
/// `train`'s features (the same on every rank: they read the same file); a feature with no spread
/// is only shifted.
Normalizer make_normalizer(const DataConfig& config, const Dataset& train);

/// normalization.json: what a trained model takes, for whoever feeds it raw features (Python with
/// model_scripted.pt): the kind, and divide_by, mean and std of (x / divide_by - mean) / std, each
/// per-feature statistic a flat list in the sample's shape (`shape`).
std::string normalization_json(const Normalizer& normalizer);

}  // namespace ddp
