#pragma once
// Turning sample indices into a model-ready batch, and splitting the eval set across ranks.

#include "ddp/train/data/dataset.h"

#include <torch/types.h>

#include <cstdint>
#include <utility>

namespace ddp {

/// One step's inputs and targets.
struct Batch {
  torch::Tensor inputs;   ///< float [B, 1, H, W], normalised
  torch::Tensor targets;  ///< int64 [B]
};

/// Gathers `indices` (int64 [B]) from `data` with one index_select per tensor and normalises the
/// pixels: (x / 255 - mean) / std.
Batch gather_batch(const Dataset& data, const torch::Tensor& indices, double mean, double std);

/// This rank's contiguous slice [begin, end) of an eval set of `n` samples. Slices are disjoint,
/// unpadded and cover everything, so sums all-reduced over ranks equal the single-process sums.
std::pair<int64_t, int64_t> eval_shard(int64_t n, int64_t world_size, int64_t rank);

}  // namespace ddp
