#include "ddp/data/batch.h"

#include <algorithm>
#include <stdexcept>
#include <string>

namespace ddp {

Batch gather_batch(const Dataset& data, const torch::Tensor& indices, const Normalizer& normalizer) {
  if (indices.dim() != 1) {
    throw std::invalid_argument("gather_batch: indices must be 1-D, got " + std::to_string(indices.dim()) + "-D");
  }
  // One gather per tensor, then whole-batch arithmetic: a per-sample loop costs more than the step.
  Batch batch;
  batch.inputs = {normalizer.apply(data.select(indices))};
  batch.targets = data.labels.index_select(0, indices);
  return batch;
}

Batch Batch::to(const torch::Device& device) const {
  Batch moved;
  for (const auto& input : inputs) moved.inputs.push_back(input.to(device, /*non_blocking=*/true));
  moved.targets = targets.to(device, /*non_blocking=*/true);
  moved.sampled_edges = sampled_edges;
  moved.tokens = tokens;
  return moved;
}

Batch Batch::pinned() const {
  Batch pinned;
  for (const auto& input : inputs) pinned.inputs.push_back(input.pin_memory());
  pinned.targets = targets.pin_memory();
  pinned.sampled_edges = sampled_edges;
  pinned.tokens = tokens;
  return pinned;
}

std::pair<int64_t, int64_t> eval_shard(int64_t n, int64_t world_size, int64_t rank) {
  if (n < 0) throw std::invalid_argument("eval_shard: n must be >= 0, got " + std::to_string(n));
  if (world_size < 1) {
    throw std::invalid_argument("eval_shard: world_size must be >= 1, got " + std::to_string(world_size));
  }
  if (rank < 0 || rank >= world_size) {
    throw std::invalid_argument("eval_shard: rank must be in [0, " + std::to_string(world_size - 1) + "], got " +
                                std::to_string(rank));
  }
  // The first n % world_size ranks take one extra sample.
  const int64_t base = n / world_size;
  const int64_t extra = n % world_size;
  const int64_t begin = rank * base + std::min(rank, extra);
  return {begin, begin + base + (rank < extra ? 1 : 0)};
}

}  // namespace ddp
