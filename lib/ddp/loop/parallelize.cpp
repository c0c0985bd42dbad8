#include "ddp/loop/parallelize.h"

#include <spdlog/spdlog.h>

#include <map>

#include "ddp/common/error.h"
#include "ddp/loop/activation_checkpointing.h"
#include "ddp/loop/pipeline_step.h"
#include "ddp/loop/plain_step.h"
#include "ddp/parallel/pipeline_split.h"

namespace ddp {

// Note [Passes]
// A model is plain (Note [Blocks]); each strategy is applied to it from outside, in this order,
// as torchtitan's parallelize does:
//   0. activation checkpointing (model.activation_checkpointing): the blocks it names run again in
//      backward (Note [Activation checkpointing]); the passes below take them as any others;
//   1. pipeline split (dist.pipeline): the blocks are cut into stages; this rank keeps its stage's
//      (StageParameters frees the rest) and runs them in the schedule's order (PipelineStep);
//   2. sharding (dist.shard): parameters runs each of the blocks this rank runs inside the
//      engine's gathers (ShardedBlocks); optimizer and gradients need no hook in the model;
//   3. the gradient sync over the data-parallel group the plan gives (bucketed all-reduce, or the
//      sharded engine's reduce-scatter).
// Each pass sees only what the one before left: sharding wraps the stage's blocks, not the
// model's. The loop then sees a StepRunner, a GradientSync and the plan, and names no strategy.

namespace {

// The model's blocks (Note [Blocks]); without them, ConfigError: `cannot`, why, then `fix`.
std::vector<ModelBlock> blocks_of(torch::nn::Module& module, const std::string& cannot, const std::string& fix) {
  auto* model = dynamic_cast<Model*>(&module);
  std::vector<ModelBlock> blocks;
  if (model) blocks = model->blocks();
  if (blocks.empty())
    throw ConfigError(cannot + ": " + (model ? model->why_no_blocks() : "it is not a sequence of layers") + ", " + fix);
  return blocks;
}

// Pass 1: cuts the model's blocks into stages; this rank keeps its stage's. Returns its runner,
// and the blocks that begin stages 1.. in `cuts`.
std::unique_ptr<PipelineRunner> split_into_stages(Task& task, ParallelPlan& plan, const TrainConfig& config,
                                                  const std::vector<torch::Tensor>& parameters, std::string& cuts) {
  std::vector<ModelBlock> layers =
      blocks_of(task.model(), "dist.pipeline: model.name " + config.model.name + " cannot be split into stages",
                "or use dist.pipeline: 1");
  std::vector<std::string> names;
  std::vector<int64_t> sizes;
  for (const auto& layer : layers) {
    names.push_back(layer.name);
    int64_t elements = 0;
    for (const auto& p : layer.parameters) elements += p.numel();
    sizes.push_back(elements);
  }
  const int stages = plan.stages();
  std::vector<int> bounds = split_pipeline(names, sizes, stages, config.mesh.pipeline_split);
  std::vector<std::vector<torch::Tensor>> used(static_cast<std::size_t>(stages)), buffers(used.size());
  for (int s = 0; s < stages; ++s)
    for (int i = bounds[s]; i < bounds[s + 1]; ++i) {
      for (const auto& p : layers[i].parameters) used[s].push_back(p);
      for (const auto& b : layers[i].buffers) buffers[s].push_back(b);
    }
  for (int s = 1; s < stages; ++s) cuts += (s > 1 ? "," : "") + names[bounds[s]];
  if (plan.world().rank == 0)
    describe_stages(plan.mesh().describe(), names, bounds, used, parameters, config.train.grad_accum_steps,
                    config.mesh.schedule);
  plan.split_stages(parameters, used, buffers);
  const int stage = plan.stage();
  std::vector<ModelBlock> mine(layers.begin() + bounds[stage], layers.begin() + bounds[stage + 1]);
  auto timeout = std::chrono::milliseconds(static_cast<int64_t>(config.dist.timeout_s * 1000));
  return std::make_unique<PipelineRunner>(std::move(mine), task, plan.group(MeshDim::kPipeline), config.mesh.schedule,
                                          timeout, config.train.precision == "bf16");
}

}  // namespace

ParallelModel::~ParallelModel() {
  if (runs_blocks) runs_blocks->set_block_runner(nullptr);
}

std::unique_ptr<ParallelModel> parallelize(Task& task, ParallelPlan& plan, const TrainConfig& config,
                                           ValueSlots& side_values) {
  auto parallel = std::make_unique<ParallelModel>();
  parallel->parameters = plan.prepare_model(task.model());
  parallel->layout = plan.mesh().describe() + ", dist.shard " + config.mesh.shard;
  if (config.model.activation_checkpointing != "none") {  // pass 0
    auto blocks = blocks_of(task.model(), "model.activation_checkpointing: model.name " + config.model.name +
                                              " cannot be checkpointed block by block",
                            "or use model.activation_checkpointing: none");
    auto names = checkpoint_activations(dynamic_cast<Model&>(task.model()), config.model.activation_checkpointing);
    if (plan.world().rank == 0)
      spdlog::info("model.activation_checkpointing {}: {} of {} blocks run again in backward ({} .. {})",
                   config.model.activation_checkpointing, names.size(), blocks.size(), names.front(), names.back());
  }

  std::unique_ptr<PipelineRunner> stage;
  if (plan.stages() > 1) {
    std::string cuts;
    stage = split_into_stages(task, plan, config, parallel->parameters, cuts);
    parallel->part = plan.stage();
    parallel->layout += ", dist.pipeline_split " + cuts;
  }

  std::vector<std::vector<torch::Tensor>> units;
  if (config.mesh.shard == "parameters") {
    std::vector<torch::Tensor> tied;  // a weight tied across stages stays in the root (Note [Sharded stages])
    if (const StageParameters* kept = plan.stage_parameters())
      for (std::size_t k : kept->tied()) tied.push_back(kept->mine()[k]);
    parallel->blocks = std::make_unique<ShardedBlocks>(
        stage ? stage->blocks()
              : blocks_of(task.model(), "dist.shard: model.name " + config.model.name + " cannot be split into blocks",
                          "or use dist.shard: gradients (parameters gathers each block's parameters as it runs)"),
        tied);
    units = parallel->blocks->units();
  }

  parallel->gradient_sync = plan.make_gradient_sync(parallel->parameters, &side_values, units);
  if (parallel->blocks) {
    parallel->blocks->attach(*plan.parameter_shards());
    if (stage) {
      stage->set_block_runner(parallel->blocks.get());
    } else {
      parallel->runs_blocks = &dynamic_cast<Model&>(task.model());
      parallel->runs_blocks->set_block_runner(parallel->blocks.get());
    }
  }
  if (stage)
    parallel->step = std::make_unique<PipelineStep>(std::move(stage), task, plan.data_parallel(), plan.world());
  else
    parallel->step = std::make_unique<PlainStep>(task, plan.data_parallel(), config.train.precision == "bf16");
  return parallel;
}

CheckpointLayout checkpoint_layout(const ParallelModel& parallel, const ParallelPlan& plan, const torch::nn::Module& model,
                              const std::string& format) {
  CheckpointLayout layout;
  std::map<const c10::TensorImpl*, std::string> names;  // a tied weight: its first name, as in the list
  for (const auto& item : model.named_parameters()) names.emplace(item.value().unsafeGetTensorImpl(), item.key());
  for (const auto& p : parallel.parameters) layout.names.push_back(names.at(p.unsafeGetTensorImpl()));
  layout.parameters = parallel.parameters;
  layout.shapes = plan.whole_shapes(parallel.parameters);
  layout.ranges = plan.owned_ranges();
  // One shard per stage and data shard: replica 0 of each writes it.
  const Communicator& shard_group = plan.group(MeshDim::kDataShard);
  layout.shard = plan.stage() * shard_group.world_size + shard_group.rank;
  layout.shards = plan.stages() * shard_group.world_size;
  layout.data_parallel_size = plan.data_parallel().world_size;
  layout.writes = plan.writes_shard();
  layout.mesh = parallel.layout;
  layout.single_file = format == "whole" || (format == "auto" && !plan.splits_state());
  return layout;
}

}  // namespace ddp
