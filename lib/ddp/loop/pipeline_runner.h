#pragma once
// One pipeline stage's part of each step: its layers' forwards and backwards for the step's
// microbatches in the schedule's order, activations received from the stage before and sent to
// the one after, their gradients the other way (Note [Pipeline schedules] in ddp/parallel).

#include <torch/torch.h>

#include <chrono>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "ddp/comm/point_to_point.h"
#include "ddp/comm/process_group.h"
#include "ddp/data/batch.h"
#include "ddp/loop/stage_shapes.h"
#include "ddp/model/model_block.h"
#include "ddp/parallel/pipeline_schedule.h"
#include "ddp/record/metrics_log.h"
#include "ddp/task/task.h"

namespace ddp {

/// What a stage measured over its steps (all but the first) since the last report().
struct PipelineTiming {
  double step_ms = 0;     ///< from its first action to its last, summed over steps
  double compute_ms = 0;  ///< in forwards and backwards, without waiting for the neighbours
  int64_t steps = 0;
  int64_t peak_activation_bytes = 0;  ///< the most the step's activations held at once, on its device
  /// The share of the step it waited: 1 - compute / step.
  double bubble() const { return step_ms > 0 ? 1.0 - compute_ms / step_ms : 0.0; }
};

/// Rank 0: the stages' layers ([bounds[s], bounds[s+1]) of `names`) and the parameters each holds
/// (`used`, of `whole`), in the log, with the mesh and the ideal bubble at `microbatches` a step.
void describe_stages(const std::string& mesh, const std::vector<std::string>& names, const std::vector<int>& bounds,
                     const std::vector<std::vector<torch::Tensor>>& used, const std::vector<torch::Tensor>& whole,
                     int64_t microbatches, const std::string& schedule);

/// This rank's stage.
class PipelineRunner {
 public:
  /// `layers`: this stage's, in order; `pipeline`: the stage's group along the pipeline (its rank
  /// the stage), which must outlive this; `schedule`: gpipe or 1f1b; `timeout`: the longest wait
  /// for a neighbour before the step fails, naming it.
  PipelineRunner(std::vector<ModelBlock> layers, Task& task, const Communicator& pipeline, std::string schedule,
                 std::chrono::milliseconds timeout, bool mixed_precision);

  /// One training step over `microbatches`: every forward and backward, gradients accumulated in
  /// the parameters as micro-steps would (each loss divided by their count). `before_last_backward`
  /// runs just before this stage's last backward (the gradient sync starts in it); `after_action`
  /// after each forward and backward, with its microbatch (a heartbeat). Returns the microbatches'
  /// losses times their samples, summed, as float64, on the last stage; an undefined tensor elsewhere.
  torch::Tensor train(const std::vector<Batch>& microbatches, const std::function<void()>& before_last_backward,
                      const std::function<void(int)>& after_action);

  /// This stage's blocks, in order.
  const std::vector<ModelBlock>& blocks() const { return layers_; }
  /// From now on the blocks run through `runner` (a pass's, Note [Blocks]), which must outlive this.
  void set_block_runner(BlockRunner* runner) { runner_ = runner; }

  /// Evaluation: the forward of `batch` through every stage; the last stage returns the task's
  /// metric sums, the others an undefined tensor.
  torch::Tensor evaluate(const Batch& batch);

  /// Every stage's timing (averaged over its `replicas`, the ranks that run it), which `world`'s ranks
  /// all send: rank 0 logs each stage's bubble and activation memory and returns them as a metrics
  /// record; the others return an empty one. Starts a new measurement.
  MetricsRecord report(const Communicator& world, int replicas);

  bool first() const { return pipeline_.rank == 0; }
  bool last() const { return pipeline_.rank + 1 == pipeline_.world_size; }

 private:
  torch::Tensor run_layers(torch::Tensor x);
  /// The activations (or gradients) for microbatch `microbatch` from stage `from`, of `shape` when
  /// known, else with a header that says it.
  torch::Tensor receive(int from, int tag, int microbatch, const char* what,
                        const std::optional<StageShapes::Shape>& shape);
  /// The activations of a microbatch of input shape `key` from the stage before, through `received`.
  torch::Tensor receive_activations(int microbatch, const std::vector<int64_t>& key, StageShapes& received);
  /// Sends microbatch `microbatch`'s activations, of input shape `key`, to the next stage, with a
  /// header while `key` is new to `sent` (Note [Shapes between stages]).
  PendingSend send_activations(const torch::Tensor& output, int microbatch, const std::vector<int64_t>& key,
                               StageShapes& sent);

  std::vector<ModelBlock> layers_;
  BlockRunner* runner_ = nullptr;
  Task& task_;
  const Communicator& pipeline_;
  std::string schedule_;
  std::chrono::milliseconds timeout_;
  bool mixed_precision_;
  PipelineTiming timing_;
  int microbatches_ = 0;  // in the steps measured
  double waited_ms_ = 0;  // in this step's receives
  int64_t steps_run_ = 0;
  StageShapes received_, sent_;  // the links to the stage before and the stage after
  StageShapes eval_received_, eval_sent_;  // the same in evaluation, whose batches are steps of their own
};

}  // namespace ddp
