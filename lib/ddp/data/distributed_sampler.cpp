#include "ddp/data/distributed_sampler.h"

#include <ATen/CPUGeneratorImpl.h>

#include <stdexcept>
#include <string>

namespace ddp {

DistributedSampler::DistributedSampler(int64_t dataset_size, int64_t num_replicas, int64_t rank,
                                       const SamplerConfig& config)
    : dataset_size_(dataset_size), num_replicas_(num_replicas), rank_(rank), config_(config) {
  if (dataset_size < 1) {
    throw std::invalid_argument("DistributedSampler: the dataset is empty (size " + std::to_string(dataset_size) + ")");
  }
  if (num_replicas < 1) {
    throw std::invalid_argument("DistributedSampler: num_replicas must be >= 1, got " + std::to_string(num_replicas));
  }
  if (rank < 0 || rank >= num_replicas) {
    throw std::invalid_argument("DistributedSampler: rank must be in [0, " + std::to_string(num_replicas - 1) +
                                "], got " + std::to_string(rank));
  }
  // PyTorch: ceil((N - R) / R) when dropping a ragged tail, else ceil(N / R). For N < R the first is
  // ceil of a value in (-1, 0), i.e. 0: every rank gets nothing.
  if (config_.split == "chunk") {
    num_samples_ = dataset_size / num_replicas;
  } else if (config_.drop_last && dataset_size % num_replicas != 0) {
    num_samples_ = dataset_size < num_replicas ? 0 : (dataset_size - num_replicas + num_replicas - 1) / num_replicas;
  } else {
    num_samples_ = (dataset_size + num_replicas - 1) / num_replicas;
  }
}

torch::Tensor DistributedSampler::indices() const {
  if (config_.split == "chunk") {
    // PyG's example: a fixed contiguous chunk per rank, which its loader shuffles each epoch.
    auto chunk = torch::arange(rank_ * num_samples_, (rank_ + 1) * num_samples_, torch::kLong);
    if (!config_.shuffle) return chunk;
    at::Generator gen = at::make_generator<at::CPUGeneratorImpl>(static_cast<uint64_t>(config_.seed + epoch_));
    return chunk.index_select(0, torch::randperm(num_samples_, gen, torch::kLong));
  }
  torch::Tensor order;
  if (config_.shuffle) {
    // Python's Generator.manual_seed reinterprets a negative seed as uint64; so does this cast.
    at::Generator gen = at::make_generator<at::CPUGeneratorImpl>(static_cast<uint64_t>(config_.seed + epoch_));
    order = torch::randperm(dataset_size_, gen, torch::kLong);
  } else {
    order = torch::arange(dataset_size_, torch::kLong);
  }
  const int64_t total = total_size();
  if (total > dataset_size_) {
    // Pad by cycling from the start: indices[:pad], or whole copies when pad exceeds N.
    const int64_t pad = total - dataset_size_;
    const int64_t copies = (pad + dataset_size_ - 1) / dataset_size_;
    order = torch::cat({order, order.repeat({copies}).narrow(0, 0, pad)});
  } else {
    order = order.narrow(0, 0, total);
  }
  return order.slice(0, rank_, total, num_replicas_).contiguous();
}

}  // namespace ddp
