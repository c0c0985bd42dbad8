#pragma once

#include <cstdint>
#include <string>

namespace ddp {

class ConfigSchema;

/// `dist.pipeline`, `dist.data_replicate`, `dist.data_shard`, `dist.tensor`: the device mesh's sizes,
/// whose product is the world size.
struct MeshConfig {
  int64_t pipeline = 1;        ///< pipeline stages
  int64_t data_replicate = 0;  ///< 0: what the others leave of the world
  int64_t data_shard = 0;      ///< ranks that split one replica's state; 0: 1, or with dist.shard the ranks of a node
  int64_t tensor = 1;          ///< ranks that split each layer (tensor parallelism); 1: none
  std::string tensor_plan;  ///< tensor parallelism: PATH=STYLE, ...; empty: the model's built-in plan
  bool sequence_parallel = false;  ///< tensor parallelism: split the activations between its regions along the sequence
  std::string shard = "none";  ///< none | optimizer (ZeRO-1) | gradients | parameters: what data_shard splits
  bool shard_overlap = false;  ///< parameters: a backward's gathers and reduce-scatters overlap its compute
  int64_t microbatches = 0;    ///< pipeline: microbatches a replica's share of a step is cut into; 0: 2P or P
  std::string schedule = "1f1b";  ///< pipeline: gpipe | 1f1b
  std::string pipeline_split;  ///< pipeline: the layers that begin stages 1.., comma-separated; empty: balanced
};

/// Declares the `MeshConfig` keys (in the `dist:` section), bound to `config`.
void declare_config(ConfigSchema& schema, MeshConfig& config);

}  // namespace ddp
