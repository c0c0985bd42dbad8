#pragma once
// Turning sample indices into a model-ready batch, and splitting the eval set across ranks.

#include "ddp/data/dataset.h"
#include "ddp/data/normalizer.h"

#include <torch/types.h>

#include <cstdint>
#include <functional>
#include <utility>
#include <vector>

namespace ddp {

/// One step's tensors, whatever the task: the model's inputs and what its output is compared with.
struct Batch {
  std::vector<torch::Tensor> inputs;  ///< the model's arguments, in order
  torch::Tensor targets;              ///< one row per sample
  int64_t sampled_edges = 0;          ///< graphs: the edges of the batch's sampled blocks
  int64_t tokens = 0;                 ///< language models: the positions predicted (B × T)

  /// Samples in the batch.
  int64_t size() const { return targets.size(0); }
  /// Every tensor on `device`; the copies do not block where the memory is pinned.
  Batch to(const torch::Device& device) const;
  /// Every tensor in page-locked memory, for copies to a GPU that do not block.
  Batch pinned() const;
};

/// Makes the batch of the samples `indices` (int64 [B]). The prefetcher calls it from several
/// threads at once.
using BatchMaker = std::function<Batch(const torch::Tensor& indices)>;

/// A supervised batch: gathers `indices` (int64 [B]) from `data` with one gather per tensor and
/// normalises the features. inputs = {float32 [B, sample_shape...]}, targets = the labels' rows.
Batch gather_batch(const Dataset& data, const torch::Tensor& indices, const Normalizer& normalizer);

/// This rank's contiguous slice [begin, end) of an eval set of `n` samples. Slices are disjoint,
/// unpadded and cover everything, so sums all-reduced over ranks equal the single-process sums.
std::pair<int64_t, int64_t> eval_shard(int64_t n, int64_t world_size, int64_t rank);

}  // namespace ddp
