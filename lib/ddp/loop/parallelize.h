#pragma once
// The model made parallel from outside, as the plan's mesh says (Note [Passes] in parallelize.cpp):
// what the loop trains with, whatever the strategies.

#include <torch/torch.h>

#include <memory>
#include <string>
#include <vector>

#include "ddp/checkpoint/checkpoint_format.h"
#include "ddp/comm/gradient_sync.h"
#include "ddp/common/value_slots.h"
#include "ddp/loop/step_runner.h"
#include "ddp/loop/train_config.h"
#include "ddp/model/model_registry.h"
#include "ddp/parallel/parallel_plan.h"
#include "ddp/parallel/sharded_blocks.h"
#include "ddp/parallel/table_updates.h"
#include "ddp/task/task.h"

namespace ddp {

/// This rank's part of the parallel model.
struct ParallelModel {
  ParallelModel() = default;
  ParallelModel(const ParallelModel&) = delete;
  ParallelModel& operator=(const ParallelModel&) = delete;
  ~ParallelModel();  // takes its block runner out of the model first

  std::vector<torch::Tensor> parameters;        ///< this rank's, each once (ParallelPlan::prepare_model)
  std::unique_ptr<StepRunner> step;             ///< how this rank computes a step and an evaluation
  std::unique_ptr<GradientSync> gradient_sync;  ///< what averages the gradients of `parameters`
  int part = -1;       ///< the part of the model this rank runs, told with each heartbeat (-1: all of it)
  std::string layout;  ///< the layout, described for checkpoint manifests

  std::unique_ptr<ShardedBlocks> blocks;  ///< runs the model's blocks inside a pass's hooks, if one does
  Model* runs_blocks = nullptr;           ///< the model `blocks` is installed in
  /// Embedding tables updated row by row, apart from the optimizer (Note [Row updates]), if any.
  std::unique_ptr<TableUpdates> tables;
  Model* looks_up = nullptr;              ///< the model `tables` is installed in as its lookup
};

/// Whether a pass makes each rank's rows of the model's embedding tables (Note [Sharded tables]), so
/// that the model is built with them deferred (ModelContext::defer_tables).
bool pass_makes_tables(const TrainConfig& config);

/// Whether a pass keeps part of the model on each rank (dist.shard parameters, pipeline stages,
/// tensor parallelism), so that the model is built with its parameters deferred and each rank gives
/// values only to those it keeps (ModelContext::defer_parameters, Note [Deferred initialisation]).
bool pass_builds_parameters(const TrainConfig& config);

/// The parameters the optimizer steps: the plan's (ParallelPlan::optimizer_parameters) but the
/// tables' that `parallel.tables` updates itself.
std::vector<torch::Tensor> optimizer_parameters(const ParallelModel& parallel, ParallelPlan& plan);

/// Applies the passes to `task`'s model in their fixed order and returns what the loop needs;
/// `side_values` travel with the gradient sync (their participants reserved theirs already). Every
/// rank calls it, after the batch share (config.train's batch_size and grad_accum_steps are final).
std::unique_ptr<ParallelModel> parallelize(Task& task, ParallelPlan& plan, const TrainConfig& config,
                                           ValueSlots& side_values);

/// What this rank saves of a checkpoint and restores: its pieces, and who writes them; one file
/// (checkpoint.format whole, or auto where the plan splits no state) or a shard per writer.
CheckpointLayout checkpoint_layout(const ParallelModel& parallel, const ParallelPlan& plan, const torch::nn::Module& model,
                              const std::string& format);

}  // namespace ddp
