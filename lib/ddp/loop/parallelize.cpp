#include "ddp/loop/parallelize.h"

#include <spdlog/spdlog.h>

#include <map>
#include <optional>
#include <set>

#include "ddp/common/error.h"
#include "ddp/loop/activation_checkpointing.h"
#include "ddp/loop/autocast_scope.h"
#include "ddp/loop/pipeline_step.h"
#include "ddp/loop/plain_step.h"
#include "ddp/loop/tensor_plan_probe.h"
#include "ddp/model/deferred_init.h"
#include "ddp/parallel/pipeline_split.h"
#include "ddp/parallel/replicated_tables.h"
#include "ddp/parallel/sharded_tables.h"
#include "ddp/parallel/tensor_parallel.h"
#include "ddp/parallel/tensor_shards.h"

namespace ddp {

// Note [Passes]
// A model is plain (Note [Blocks]); each strategy is applied to it from outside, in this order,
// as torchtitan's parallelize does:
//   0. activation checkpointing (model.activation_checkpointing): the blocks it names run again in
//      backward (Note [Activation checkpointing]); the passes below take them as any others;
//   1. pipeline split (dist.pipeline): the blocks are cut into stages; this rank keeps its stage's
//      (StageParameters frees the rest) and runs them in the schedule's order (PipelineStep);
//   2. tensor parallelism (dist.tensor): the layers the model family's plan names keep this rank's
//      slice of their parameters and run through Megatron's regions (Note [Tensor parallelism]);
//      a head split by vocabulary gives the task its loss-parallel cross-entropy; with
//      dist.sequence_parallel the first block's output is split along the sequence;
//   3. sharding (dist.shard): parameters runs each of the blocks this rank runs inside the
//      engine's gathers (ShardedBlocks); optimizer and gradients need no hook in the model;
//   4. the gradient sync over the data-parallel group the plan gives (bucketed all-reduce, or the
//      sharded engine's reduce-scatter);
//   5. embedding tables (model.embedding_sharding, optim.embeddings): spread over the data-parallel
//      ranks and looked up by all-to-all (ShardedTables, Note [Sharded tables]), kept out of the
//      plan's parameters; or replicated and updated row by row from their synced gradients
//      (ReplicatedTables). Either steps its rows after the optimizer (Note [Row updates]).
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

// optim.embeddings as it applies: "" (dense), sgd or rowwise_adagrad.
std::string row_method(const TrainConfig& config) {
  if (config.optim.embeddings == "auto") return config.model.embedding_sharding == "replicate" ? "" : "rowwise_adagrad";
  return config.optim.embeddings == "dense" ? "" : config.optim.embeddings;
}

// The model's embedding tables and their names, for pass 5; ConfigError if it has none.
std::vector<EmbeddingTable> tables_of(Task& task, const TrainConfig& config, std::vector<std::string>& names) {
  auto* model = dynamic_cast<Model*>(&task.model());
  std::vector<EmbeddingTable> tables = model ? model->embedding_tables() : std::vector<EmbeddingTable>{};
  if (tables.empty())
    throw ConfigError((config.model.embedding_sharding != "replicate"
                           ? "model.embedding_sharding " + config.model.embedding_sharding
                           : "optim.embeddings " + config.optim.embeddings) +
                      ": model.name " + config.model.name + " has no embedding tables (dlrm has)");
  std::map<const c10::TensorImpl*, std::string> by_impl;
  for (const auto& item : task.model().named_parameters()) by_impl.emplace(item.value().unsafeGetTensorImpl(), item.key());
  for (const auto& t : tables) names.push_back(by_impl.at(t.weight.unsafeGetTensorImpl()));
  return tables;
}

// `blocks` without the parameters in `apart`: sharded tables, which pass 5 keeps out of the plan
// (Note [Sharded tables]), so that no block engine gathers or shards them.
std::vector<ModelBlock> without(std::vector<ModelBlock> blocks, const std::vector<torch::Tensor>& apart) {
  std::set<const c10::TensorImpl*> skipped;
  for (const auto& t : apart) skipped.insert(t.unsafeGetTensorImpl());
  for (auto& block : blocks)
    std::erase_if(block.parameters, [&](const torch::Tensor& p) { return skipped.count(p.unsafeGetTensorImpl()) > 0; });
  return blocks;
}

}  // namespace

ParallelModel::~ParallelModel() {
  if (runs_blocks) runs_blocks->set_block_runner(nullptr);
  if (looks_up) looks_up->set_table_lookup(nullptr);
}

bool pass_makes_tables(const TrainConfig& config) { return config.model.embedding_sharding != "replicate"; }

bool pass_builds_parameters(const TrainConfig& config) {
  // Where a pass keeps part of the model: sharded parameters, a stage's layers, a layer's slice. A
  // model moved to a GPU moves what waits without values (Model::to), on any device.
  return config.mesh.shard == "parameters" || config.mesh.pipeline > 1 || config.mesh.tensor > 1;
}

std::vector<torch::Tensor> optimizer_parameters(const ParallelModel& parallel, ParallelPlan& plan) {
  std::vector<torch::Tensor> stepped = plan.optimizer_parameters(parallel.parameters);
  if (!parallel.tables) return stepped;
  std::set<const c10::TensorImpl*> apart;
  for (const auto& t : parallel.tables->updated()) apart.insert(t.unsafeGetTensorImpl());
  std::erase_if(stepped, [&](const torch::Tensor& p) { return apart.count(p.unsafeGetTensorImpl()) > 0; });
  return stepped;
}

std::unique_ptr<ParallelModel> parallelize(Task& task, ParallelPlan& plan, const TrainConfig& config,
                                           ValueSlots& side_values) {
  auto parallel = std::make_unique<ParallelModel>();
  const std::string rows = row_method(config);
  const bool sharded_tables = pass_makes_tables(config);
  std::vector<std::string> table_names;
  std::vector<EmbeddingTable> tables = rows.empty() ? std::vector<EmbeddingTable>{} : tables_of(task, config, table_names);
  std::vector<torch::Tensor> weights;
  for (const auto& t : tables) weights.push_back(t.weight);
  parallel->parameters = plan.prepare_model(task.model(), sharded_tables ? weights : std::vector<torch::Tensor>{});
  if (const auto* model = dynamic_cast<const Model*>(&task.model()))  // a graph task's is a plain module
    plan.watch_buffers_read_in_training(model->buffers_read_in_training());
  // A deferred build's parameters get their values from the pass that keeps them: the tensor pass
  // its slices, the sharding engine unit by unit (under stage 3 each rank its share alone), the
  // all-reduce the rest (a stage's own) whole (Note [Deferred initialisation]).
  auto* built = dynamic_cast<Model*>(&task.model());
  DeferredInit* deferred = built ? built->deferred_init() : nullptr;
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

  if (plan.group(MeshDim::kTensor).world_size > 1) {  // pass 2
    SequenceParallel sequence;
    sequence.on = config.mesh.sequence_parallel;
    if (sequence.on)  // the first block's output is split along the sequence
      sequence.before_split = blocks_of(task.model(), "dist.sequence_parallel: model.name " + config.model.name +
                                                          " has no first block to split the sequence after",
                                        "or use dist.sequence_parallel: false")
                                  .front()
                                  .parameters;
    // A module whose weights are all here can be run whole first (Note [Probing a tensor plan]).
    std::optional<TensorPlanProbe> probe;
    if (!deferred && !stage && !sequence.on) probe.emplace(task);
    plan.split_tensors(task.model(), tensor_plan(config.model, config.mesh), parallel->parameters,
                       sequence, deferred);
    const TensorShards& shards = *plan.tensor_shards();
    if (probe) {
      const double difference = probe->check(shards);
      use_tf32(config.train.tf32);  // the probe ran in full float32 (Note [Probing a tensor plan])
      if (plan.world().rank == 0)
        spdlog::info("dist.tensor_plan: the split module's output for the first training sample is the whole "
                     "module's (relative difference {:.2g})", difference);
    }
    if (sequence.on)
      dynamic_cast<Model&>(task.model()).wrap_blocks([&shards](std::size_t index, ModelBlock& block) {
        if (index != 0) return;
        block.forward = [forward = block.forward, &shards](torch::Tensor x) { return shards.split_sequence(forward(x)); };
      });
    auto loss = [&shards](const torch::Tensor& logits, const torch::Tensor& targets, double label_smoothing) {
      return vocab_parallel_cross_entropy(logits, targets, shards.output_first(), shards.group(), label_smoothing);
    };
    if (shards.splits_output() && !task.take_token_loss(loss))
      throw ConfigError("dist.tensor: train.task " + config.task.task +
                        " takes no loss-parallel cross-entropy for the logits the plan splits by vocabulary");
    if (plan.world().rank == 0) spdlog::info("{}", shards.describe());
  }

  std::vector<std::vector<torch::Tensor>> units;
  if (config.mesh.shard == "parameters") {
    std::vector<torch::Tensor> tied;  // a weight tied across stages stays in the root (Note [Sharded stages])
    if (const StageParameters* kept = plan.stage_parameters())
      for (std::size_t k : kept->tied()) tied.push_back(kept->mine()[k]);
    // The stage's tied weight lives in the root unit, freed after a microbatch's backward used it,
    // and nothing gathers it again for a checkpointed block run again in the next one's backward.
    if (!tied.empty() && config.model.activation_checkpointing != "none")
      throw ConfigError("model.activation_checkpointing " + config.model.activation_checkpointing +
                        " with dist.pipeline and dist.shard parameters cannot run a model whose embedding and head "
                        "share a weight across stages (model.name " + config.model.name +
                        "): use dist.shard gradients or optimizer with the stages, or model.activation_checkpointing "
                        "none (an untied llama, model.tie_embeddings false, takes all three)");
    parallel->blocks = std::make_unique<ShardedBlocks>(
        without(stage ? stage->blocks()
                      : blocks_of(task.model(), "dist.shard: model.name " + config.model.name +
                                                    " cannot be split into blocks",
                                  "or use dist.shard: gradients (parameters gathers each block's parameters as it runs)"),
                sharded_tables ? weights : std::vector<torch::Tensor>{}),
        tied);
    units = parallel->blocks->units();
  }

  parallel->gradient_sync = plan.make_gradient_sync(parallel->parameters, &side_values, units, deferred);
  if (deferred) deferred->materialize_all();  // what no pass kept, if anything (a frozen parameter)
  if (parallel->blocks) {
    parallel->blocks->attach(*plan.parameter_shards());
    if (stage) {
      stage->set_block_runner(parallel->blocks.get());
    } else {
      parallel->runs_blocks = &dynamic_cast<Model&>(task.model());
      parallel->runs_blocks->set_block_runner(parallel->blocks.get());
    }
  }
  if (sharded_tables) {  // pass 5
    auto sharded = std::make_unique<ShardedTables>(tables, table_names, config.model.embedding_sharding,
                                                   plan.data_parallel(), rows, config.optim.eps);
    if (plan.world().rank == 0) spdlog::info("{}", sharded->describe());
    parallel->looks_up = &dynamic_cast<Model&>(task.model());
    parallel->looks_up->set_table_lookup(sharded.get());
    parallel->layout += ", model.embedding_sharding " + config.model.embedding_sharding;
    parallel->tables = std::move(sharded);
  } else if (!rows.empty()) {
    parallel->tables = std::make_unique<ReplicatedTables>(weights, table_names, rows, config.optim.eps);
  }
  const bool counts_samples = plan.group(MeshDim::kTensor).rank == 0;
  auto collectives = [&plan] { return plan.collectives_started(); };
  if (stage)
    parallel->step = std::make_unique<PipelineStep>(std::move(stage), task, plan.data_parallel(), plan.world(),
                                                    collectives, counts_samples);
  else
    parallel->step =
        std::make_unique<PlainStep>(task, plan.data_parallel(), plan.world(), config.train.precision == "bf16",
                                    collectives,
                                    plan.forward_gathers() || (parallel->tables && parallel->tables->forward_communicates()),
                                    counts_samples);
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
  layout.ranges = plan.owned_ranges(&layout.first_written);
  // One shard per stage, data shard and tensor slice: replica 0 of each writes it.
  const Communicator& shard_group = plan.group(MeshDim::kDataShard);
  const Communicator& tensor_group = plan.group(MeshDim::kTensor);
  layout.shard = (plan.stage() * shard_group.world_size + shard_group.rank) * tensor_group.world_size + tensor_group.rank;
  layout.shards = plan.stages() * shard_group.world_size * tensor_group.world_size;
  layout.data_parallel_size = plan.data_parallel().world_size;
  layout.writes = plan.writes_shard();
  layout.mesh = parallel.layout;
  if (parallel.tables) {  // pass 5's tables and row state: more whole tensors, this rank's runs of them
    const std::size_t first = layout.names.size();
    for (const TableEntry& entry : parallel.tables->entries()) {
      layout.names.push_back(entry.name);
      layout.shapes.push_back(entry.shape);
      layout.parameters.push_back(torch::Tensor());
    }
    if (parallel.tables->splits_state()) {  // every rank writes its rows, and the dense pieces the plan gives it
      const Communicator& replicas = plan.data_parallel();
      if (!layout.writes) layout.first_written = layout.ranges.size();
      layout.shard = replicas.rank;
      layout.shards = replicas.world_size;
      layout.writes = true;
    }
    for (const TablePiece& piece : parallel.tables->pieces())
      layout.ranges.push_back({first + piece.entry, piece.begin, piece.value, piece.value, {}});
  }
  const bool splits = plan.splits_state() || (parallel.tables && parallel.tables->splits_state());
  layout.single_file = format == "whole" || (format == "auto" && !splits);
  return layout;
}

}  // namespace ddp
