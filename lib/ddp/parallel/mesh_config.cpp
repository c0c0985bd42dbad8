#include "ddp/parallel/mesh_config.h"

#include "ddp/common/limits.h"
#include "ddp/config/config_schema.h"

namespace ddp {

void declare_config(ConfigSchema& schema, MeshConfig& config) {
  schema.add("dist.pipeline", &config.pipeline,
             "device mesh: pipeline stages (each rank holds one stage's layers); 1: none")
      .min(1)
      .max(kMaxRanks);
  schema.add("dist.data_replicate", &config.data_replicate,
             "device mesh: model replicas whose gradients are averaged (DDP); 0: the world size divided by "
             "dist.pipeline and dist.data_shard")
      .min(0)
      .max(kMaxRanks);
  schema.add("dist.data_shard", &config.data_shard,
             "device mesh: ranks that split one replica's state (dist.shard says which); 0: 1 without dist.shard, "
             "with it the ranks of a node (shard within nodes, replicate across them, as PyTorch's HSDP)")
      .min(0)
      .max(kMaxRanks);
  schema.add("dist.shard", &config.shard,
             "what the ranks of a data_shard group split: none; optimizer (ZeRO-1: each rank keeps and steps the "
             "optimizer state of its share of the parameters, then sends them, updated, to the others); gradients "
             "(ZeRO-2: also reduce-scatters the gradients, keeping its shard of them); parameters (ZeRO-3, FSDP: "
             "also keeps only its shard of the parameters, gathering each unit's whole for its forward and backward)")
      .choices({"none", "optimizer", "gradients", "parameters"});
  // The mesh and its groups exist for any sizes (ParallelPlan); the strategies along these two
  // dimensions do not yet, and a run must not silently train as if they did.
  schema.rule("dist.pipeline", [&config]() -> std::string {
    return config.pipeline != 1 ? "pipeline stages are not built yet; use 1" : "";
  });
  schema.rule("dist.data_shard", [&config]() -> std::string {
    return config.data_shard > 1 && config.shard == "none" ? "splits nothing with dist.shard: none; set dist.shard" : "";
  });
}

}  // namespace ddp
