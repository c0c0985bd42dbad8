#pragma once
// The ranks laid out as a grid of named dimensions (torch's DeviceMesh, torchtitan's order:
// pipeline outermost, then data_replicate, data_shard, and tensor innermost, so that a tensor group,
// which talks in every layer, is neighbouring ranks on one node), so that each parallel strategy
// talks to the ranks along its own dimension only.

#include <array>
#include <string>
#include <vector>

#include "ddp/parallel/mesh_config.h"

namespace ddp {

/// A dimension of the mesh.
enum class MeshDim { kPipeline, kDataReplicate, kDataShard, kTensor };

/// Every dimension, outermost first.
inline constexpr std::array<MeshDim, 4> kMeshDims{MeshDim::kPipeline, MeshDim::kDataReplicate, MeshDim::kDataShard,
                                                  MeshDim::kTensor};

/// "pipeline", "data_replicate", "data_shard", "tensor": as the config keys spell them.
const char* mesh_dim_name(MeshDim dim);

/// Sizes per dimension; rank = (((pipeline × R) + data_replicate) × S + data_shard) × T + tensor
/// (row-major), so the innermost dimension's groups are neighbouring ranks (on one node, under
/// ddprun's numbering).
class DeviceMesh {
 public:
  /// The mesh `config` describes for `world_size` ranks, `local_world_size` of them per node (0:
  /// unknown), which is what dist.data_shard 0 shards over when dist.shard is on. Throws ConfigError
  /// naming the keys when the sizes do not multiply to the world size.
  static DeviceMesh from_config(const MeshConfig& config, int world_size, int local_world_size = 0);

  /// Size along `dim`.
  int size(MeshDim dim) const { return sizes_[index(dim)]; }
  int world_size() const;
  /// `rank`'s coordinate along `dim`.
  int coordinate(int rank, MeshDim dim) const;
  /// The ranks that share all of `rank`'s coordinates but the one along `dim`, ascending: its group
  /// along `dim` (`rank` is among them).
  std::vector<int> group_ranks(int rank, MeshDim dim) const;
  /// The ranks that hold the same pipeline stage and tensor slice as `rank`, ascending: its
  /// data-parallel replicas and shards, which split the samples.
  std::vector<int> data_parallel_ranks(int rank) const;
  /// "pipeline 2 × data_replicate 2 × data_shard 1" (and " × tensor 2" where the tensor is split).
  std::string describe() const;

 private:
  explicit DeviceMesh(std::array<int, 4> sizes) : sizes_(sizes) {}
  static std::size_t index(MeshDim dim) { return static_cast<std::size_t>(dim); }
  int stride(MeshDim dim) const;

  std::array<int, 4> sizes_;
};

}  // namespace ddp
