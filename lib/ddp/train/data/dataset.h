#pragma once
// An in-memory image classification dataset: the whole split as two tensors, so a batch is one gather.

#include <torch/types.h>

#include <cstdint>
#include <string>

namespace ddp {

/// Images and labels of one split, held in memory as raw pixels (normalised only when batched).
struct Dataset {
  torch::Tensor images;  ///< uint8 [N, H, W]
  torch::Tensor labels;  ///< int64 [N]
  std::string source;    ///< where the samples came from, for logs and errors

  /// Number of samples (0 for an empty, default-constructed dataset).
  int64_t size() const { return labels.defined() ? labels.size(0) : 0; }
};

}  // namespace ddp
