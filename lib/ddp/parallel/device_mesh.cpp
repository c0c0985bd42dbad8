#include "ddp/parallel/device_mesh.h"

#include <algorithm>

#include "ddp/common/error.h"

namespace ddp {

const char* mesh_dim_name(MeshDim dim) {
  switch (dim) {
    case MeshDim::kPipeline: return "pipeline";
    case MeshDim::kDataReplicate: return "data_replicate";
    case MeshDim::kDataShard: return "data_shard";
    case MeshDim::kTensor: return "tensor";
  }
  return "?";
}

namespace {

// dist.data_shard 0: no sharding, 1; sharding, what data_replicate leaves, or else the ranks of a
// node (shard within nodes, replicate across them: PyTorch's HSDP), or else every replica.
int64_t shard_size(const MeshConfig& config, int world_size, int local_world_size) {
  if (config.data_shard > 0) return config.data_shard;
  if (config.shard == "none") return 1;
  const int64_t others = config.pipeline * config.tensor * std::max<int64_t>(1, config.data_replicate);
  if (config.data_replicate > 0) return world_size % others == 0 ? world_size / others : 1;
  const int64_t stage_slices = config.pipeline * config.tensor;
  if (local_world_size > 0 && world_size % local_world_size == 0 && local_world_size % stage_slices == 0)
    return local_world_size / stage_slices;
  return world_size % stage_slices == 0 ? world_size / stage_slices : 1;
}

}  // namespace

DeviceMesh DeviceMesh::from_config(const MeshConfig& config, int world_size, int local_world_size) {
  const int64_t data_shard = shard_size(config, world_size, local_world_size);
  const int64_t fixed = config.pipeline * data_shard * config.tensor;
  const bool tensor = config.tensor > 1;
  std::string sizes = "dist.pipeline " + std::to_string(config.pipeline) + " × dist.data_shard " +
                      std::to_string(data_shard) + (tensor ? " × dist.tensor " + std::to_string(config.tensor) : "");
  const std::string keys = tensor ? ", dist.tensor" : "";
  if (config.data_replicate == 0) {
    if (world_size % fixed != 0)
      throw ConfigError("dist.pipeline, dist.data_shard" + keys + ": " + sizes + " = " + std::to_string(fixed) +
                        " does not divide the world size " + std::to_string(world_size) +
                        "; choose sizes whose product divides it");
    return DeviceMesh({static_cast<int>(config.pipeline), static_cast<int>(world_size / fixed),
                       static_cast<int>(data_shard), static_cast<int>(config.tensor)});
  }
  const int64_t product = fixed * config.data_replicate;
  if (product != world_size)
    throw ConfigError("dist.pipeline, dist.data_replicate, dist.data_shard" + keys + ": " + sizes +
                      " × dist.data_replicate " + std::to_string(config.data_replicate) + " = " +
                      std::to_string(product) + " ranks, but the world size is " + std::to_string(world_size) +
                      "; the sizes must multiply to it (dist.data_replicate: 0 takes what the others leave)");
  return DeviceMesh({static_cast<int>(config.pipeline), static_cast<int>(config.data_replicate),
                     static_cast<int>(data_shard), static_cast<int>(config.tensor)});
}

int DeviceMesh::world_size() const { return sizes_[0] * sizes_[1] * sizes_[2] * sizes_[3]; }

int DeviceMesh::stride(MeshDim dim) const {
  int stride = 1;
  for (std::size_t d = index(dim) + 1; d < sizes_.size(); ++d) stride *= sizes_[d];
  return stride;
}

int DeviceMesh::coordinate(int rank, MeshDim dim) const { return rank / stride(dim) % size(dim); }

std::vector<int> DeviceMesh::group_ranks(int rank, MeshDim dim) const {
  const int first = rank - coordinate(rank, dim) * stride(dim);
  std::vector<int> ranks;
  for (int c = 0; c < size(dim); ++c) ranks.push_back(first + c * stride(dim));
  return ranks;
}

std::vector<int> DeviceMesh::data_parallel_ranks(int rank) const {
  const int block = stride(MeshDim::kPipeline), slices = size(MeshDim::kTensor);
  std::vector<int> ranks;
  for (int r = rank / block * block; r < (rank / block + 1) * block; ++r)
    if (r % slices == rank % slices) ranks.push_back(r);
  return ranks;
}

std::string DeviceMesh::describe() const {
  std::string text;
  for (MeshDim dim : kMeshDims)
    if (dim != MeshDim::kTensor || size(dim) > 1)
      text += (text.empty() ? "" : " × ") + std::string(mesh_dim_name(dim)) + " " + std::to_string(size(dim));
  return text;
}

}  // namespace ddp
