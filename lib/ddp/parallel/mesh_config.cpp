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
             "device mesh: ranks that split one replica's parameters, gradients and optimizer state (ZeRO/FSDP); 1: none")
      .min(1)
      .max(kMaxRanks);
  // The mesh and its groups exist for any sizes (ParallelPlan); the strategies along these two
  // dimensions do not yet, and a run must not silently train as if they did.
  schema.rule("dist.pipeline", [&config]() -> std::string {
    return config.pipeline != 1 ? "pipeline stages are not built yet; use 1" : "";
  });
  schema.rule("dist.data_shard", [&config]() -> std::string {
    return config.data_shard != 1 ? "sharded data parallelism is not built yet; use 1" : "";
  });
}

}  // namespace ddp
