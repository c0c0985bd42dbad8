#include "ddp/parallel/mesh_config.h"

#include "ddp/common/limits.h"
#include "ddp/common/error.h"
#include "ddp/config/config_schema.h"
#include "ddp/parallel/tensor_plan.h"

namespace ddp {

void declare_config(ConfigSchema& schema, MeshConfig& config) {
  schema.add("dist.pipeline", &config.pipeline,
             "device mesh: pipeline stages (each rank holds one stage's layers); 1: none")
      .min(1)
      .max(kMaxRanks);
  schema.add("dist.data_replicate", &config.data_replicate,
             "device mesh: model replicas whose gradients are averaged (DDP); 0: the world size divided by "
             "dist.pipeline, dist.data_shard and dist.tensor")
      .min(0)
      .max(kMaxRanks);
  schema
      .add("dist.data_shard", &config.data_shard,
           "device mesh: ranks that split one replica's state (dist.shard says which); 0: 1 without dist.shard, "
           "with it the ranks of a node (shard within nodes, replicate across them, as PyTorch's HSDP), or every rank "
           "where nodes have unequal numbers of ranks (a warning says so)")
      .min(0)
      .max(kMaxRanks);
  schema
      .add("dist.tensor", &config.tensor,
           "device mesh: ranks that split each transformer layer between them (Megatron-style tensor "
           "parallelism: attention heads and MLP columns, the vocabulary of the embedding and head), neighbouring "
           "ranks, within a node where dist.tensor divides its ranks (a warning says when a group spans "
           "nodes); 1: none. Note [Tensor parallelism]")
      .min(1)
      .max(kMaxRanks);
  schema.add("dist.tensor_plan", &config.tensor_plan,
             "with dist.tensor: how your model's layers split, as comma-separated PATH=STYLE: a submodule's path "
             "(* for a layer's index) and colwise (a Linear's output features: q, k, v, an MLP's first), rowwise "
             "(its input features: attention's output projection, an MLP's second; an Embedding's vocabulary) or "
             "replicate, as in layers.*.attn.q=colwise,layers.*.attn.o=rowwise; empty: the model's built-in plan "
             "(gpt, llama). Note [Tensor parallelism]");
  schema.rule("dist.tensor_plan", [&config]() -> std::string {
    if (config.tensor_plan.empty()) return "";
    if (config.tensor == 1) return "splits layers over a tensor group: set dist.tensor above 1";
    try {
      parse_tensor_plan(config.tensor_plan);
    } catch (const ConfigError& e) {
      const std::string text = e.what(), prefix = "dist.tensor_plan: ";
      return text.rfind(prefix, 0) == 0 ? text.substr(prefix.size()) : text;
    }
    return "";
  });
  schema.add("dist.sequence_parallel", &config.sequence_parallel,
             "with dist.tensor: also split the activations between the tensor-parallel layers (LayerNorms, "
             "dropout, residuals) along the sequence, each rank keeping 1/dist.tensor of the positions; each "
             "all-reduce becomes a reduce-scatter and an all-gather of the same bytes (Megatron's sequence "
             "parallelism)");
  schema.add("dist.shard", &config.shard,
             "what the ranks of a data_shard group split: none; optimizer (ZeRO-1: each rank keeps and steps the "
             "optimizer state of its share of the parameters, then sends them, updated, to the others); gradients "
             "(ZeRO-2: also reduce-scatters the gradients, keeping its shard of them); parameters (ZeRO-3, FSDP: "
             "also keeps only its shard of the parameters, gathering each unit's whole for its forward and backward)")
      .choices({"none", "optimizer", "gradients", "parameters"});
  schema.add("dist.shard_overlap", &config.shard_overlap,
             "dist.shard parameters: gather the unit before while a unit's backward runs, and reduce-scatter a "
             "unit's gradients during the next one's (FSDP's BACKWARD_PRE): faster where communication takes "
             "time, holding about two more units at once; false: a backward holds one unit gathered and its "
             "gradients, and communicates between units");
  schema.add("dist.microbatches", &config.microbatches,
             "pipeline: the microbatches that each replica's share of a step is cut into, which flow through "
             "the stages one behind another (the idle share of a step is (P-1)/(M+P-1)); the share is what its "
             "P ranks would train under data parallelism (dist.pipeline × train.batch_size × "
             "train.grad_accum_steps), or with train.global_batch_size its part of that; 0: twice dist.pipeline, "
             "or dist.pipeline where twice does not divide the share")
      .min(0)
      .max(2000);  // the heartbeat has 11 bits for a microbatch (HeartbeatBeat)
  schema.add("dist.schedule", &config.schedule,
             "pipeline: the order of each stage's forwards and backwards: gpipe (every forward, then every "
             "backward: activations of all microbatches held at once) or 1f1b (one forward, one backward: at most "
             "dist.pipeline microbatches held; the same idle share)")
      .choices({"gpipe", "1f1b"});
  schema.add("dist.pipeline_split", &config.pipeline_split,
             "pipeline: the layers that begin stages 1, 2, ..., comma-separated (transformer.h.4 for a GPT, "
             "layers.2 for the MLP, a submodule's path for a TorchScript module that chains them: 3, layers.2); empty: cut where the stages "
             "hold about equal parameters");
  schema.rule("dist.shard_overlap", [&config]() -> std::string {
    return config.shard_overlap && config.shard != "parameters"
               ? "applies to dist.shard: parameters only (this run has dist.shard: " + config.shard + ")"
               : "";
  });
  // Notices, not errors: one config run at dist.pipeline 1 beside its pipelined runs is how they
  // are compared.
  const MeshConfig defaults;
  auto without_pipeline = [&config](bool set) -> std::string {
    return set && config.pipeline == 1 ? "does nothing without a pipeline (dist.pipeline is 1)" : "";
  };
  schema.notice("dist.microbatches",
                [=, &config] { return without_pipeline(config.microbatches != defaults.microbatches); });
  schema.notice("dist.schedule", [=, &config] { return without_pipeline(config.schedule != defaults.schedule); });
  schema.notice("dist.pipeline_split", [=, &config] { return without_pipeline(!config.pipeline_split.empty()); });
  schema.rule("dist.data_shard", [&config]() -> std::string {
    return config.data_shard > 1 && config.shard == "none" ? "splits nothing with dist.shard: none; set dist.shard" : "";
  });
}

}  // namespace ddp
