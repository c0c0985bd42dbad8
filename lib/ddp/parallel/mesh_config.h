#pragma once

#include <cstdint>

namespace ddp {

class ConfigSchema;

/// `dist.pipeline`, `dist.data_replicate`, `dist.data_shard`: the device mesh's sizes, whose product
/// is the world size.
struct MeshConfig {
  int64_t pipeline = 1;        ///< pipeline stages
  int64_t data_replicate = 0;  ///< 0: what the others leave of the world
  int64_t data_shard = 1;      ///< ranks that split one replica's state
};

/// Declares the `MeshConfig` keys (in the `dist:` section), bound to `config`.
void declare_config(ConfigSchema& schema, MeshConfig& config);

}  // namespace ddp
