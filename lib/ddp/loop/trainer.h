#pragma once
// The loop: the schedule of steps, evaluation, checkpoints and signals, for any task (ddp/task) and
// any parallel plan (ddp/parallel). What is trained, on what, with which loss, is the task's
// business; how the model is spread over the ranks, the plan's; what is shown and kept, the recorder's.

#include <torch/torch.h>

#include <functional>
#include <memory>

#include "ddp/checkpoint/checkpointer.h"
#include "ddp/checkpoint/checkpoint_format.h"
#include "ddp/checkpoint/train_progress.h"
#include "ddp/comm/gradient_sync.h"
#include "ddp/common/value_slots.h"
#include "ddp/common/worker_identity.h"
#include "ddp/data/batch_prefetcher.h"
#include "ddp/data/distributed_sampler.h"
#include "ddp/loop/parallelize.h"
#include "ddp/loop/resume_check.h"
#include "ddp/loop/run_recorder.h"
#include "ddp/loop/step_graph.h"
#include "ddp/loop/step_profiler.h"
#include "ddp/loop/train_config.h"
#include "ddp/loop/worker_signals.h"
#include "ddp/optim/lr_schedule.h"
#include "ddp/parallel/parallel_plan.h"
#include "ddp/task/task.h"

namespace ddp {

/// One worker's whole run.
class Trainer {
 public:
  /// Joins the process group, builds the plan and the task, synchronises the model, resumes if asked.
  /// `shared_store`: where rank threads of one process meet (connect()); none for a process per rank.
  Trainer(TrainConfig config, WorkerIdentity env, c10::intrusive_ptr<c10d::Store> shared_store = {});
  // Its reducer and prefetcher hold references into it.
  Trainer(const Trainer&) = delete;
  Trainer& operator=(const Trainer&) = delete;

  /// Trains to the end (epochs or max_steps), evaluating, logging and checkpointing on the way,
  /// then writes model.pt and returns 0. When SIGTERM or SIGINT reaches any rank, every rank stops
  /// after the same step, rank 0 writes a checkpoint, and the signal number is returned.
  int fit();

 private:
  int train_to_the_end();  // fit() but for the report of a failed run
  bool resume();           ///< whether a checkpoint was resumed from
  void set_aside_checkpoints_after(int64_t step) const;  // Note [A named checkpoint rewinds]
  /// Restores the checkpoint of manifest `path` (`common`: the file its manifest calls common),
  /// whatever layout wrote it; false when it or a rank's pieces of it could not be read and
  /// checkpoint.resume auto should try an older one.
  /// ConfigError when train.max_steps or train.epochs ends before where `loaded` stands.
  void check_not_behind(const TrainProgress& loaded, const std::string& path) const;
  bool resume_from(const std::string& path, const std::string& manifest, const std::string& common, int64_t rewind_to);
  /// After it: the loop goes on from `loaded`.
  void resumed(const TrainProgress& loaded, const std::string& path, const std::string& what);
  /// On rank 0, a warning when this run's schedule gives the next step a higher lr than `last_lr`,
  /// the saved run's last step's (negative: unknown), after warmup.
  void warn_if_lr_rises(double last_lr) const;
  /// On rank 0, a warning when the model keeps batch statistics and `loaded` grouped a step's samples
  /// into other micro-batches than this run does.
  void warn_if_batch_statistics_regrouped(const TrainProgress& loaded) const;
  int64_t batches_per_epoch() const;
  int64_t steps_per_epoch() const;
  int64_t total_steps() const;
  bool done() const;
  /// Whether an evaluation is still to run at this step (Note [A checkpoint after its step's evaluation]).
  bool eval_still_due() const;
  /// Whether checkpoint.every_steps's checkpoint of this step waited for its evaluation, which ran.
  bool saving_deferred() const;
  /// Whether the ranks agreed to stop: a signal's vote after a step, or an evaluation it cut short.
  bool stopping() const { return eval_interrupted_ || stop_vote_->agreed(); }
  /// Forward and backward of `micro_batches` micro-batches (the step runner's), then one optimizer step.
  StepStats train_step(int64_t micro_batches);
  /// That step, eagerly, on the micro-batches `next_batch` gives (on this rank's device).
  StepStats eager_step(int64_t micro_batches, std::function<Batch()> next_batch);
  /// train.cuda_graphs (Note [CUDA graphs]): a StepGraph where nothing keeps the steps from being captured.
  void set_up_step_graph();
  /// That step with a StepGraph: eager warm-ups, the capture, then replays.
  StepStats graphed_step(int64_t micro_batches);
  /// After the backwards: the gradient sync's end, clipping, the optimizer's step.
  void optimizer_step(StepStats& step);
  /// The ranks that split the samples: the plan's data-parallel group.
  int replicas() const { return plan_->data_parallel().world_size; }
  void after_step();
  /// After the first step: parameters, gradients and optimizer state per rank, in the log.
  void report_state_memory();
  void end_epoch();
  int stop_after_checkpoint();
  void finish();
  void run_eval();
  void save_checkpoint();

  TrainConfig config_;
  StepShape step_shape_;  ///< how this run makes a step's samples (Note [Global batch]), for check_resume_layout
  std::unique_ptr<ParallelPlan> plan_;
  ValueSlots side_values_;  // before their participants: the recorder's monitor, the stop vote, the gradient sync
  std::unique_ptr<RunRecorder> recorder_;
  bool already_finished_ = false;  ///< Note [Re-running a run]: fit() does nothing
  bool holds_diverged_state_ = false;  ///< a checkpoint restored, then passed over for non-finite weights
  std::string changed_since_;      ///< keys that steer the run and changed since the run being resumed
  std::unique_ptr<StepProfiler> profiler_;
  std::unique_ptr<Task> task_;
  std::unique_ptr<ParallelModel> parallel_;  // after task_: the passes applied to its model (Note [Passes])
  std::unique_ptr<DistributedSampler> sampler_;
  std::unique_ptr<BatchPrefetcher> prefetcher_;  // after task_: its batches come from it
  std::unique_ptr<StopVote> stop_vote_;
  std::unique_ptr<torch::optim::Optimizer> optimizer_;
  std::unique_ptr<LrSchedule> schedule_;
  std::unique_ptr<Checkpointer> checkpointer_;
  TrainProgress progress_;
  struct {
    int round = 0;       // DDPRUN_ROUND: > 0 after a restart or an elastic membership change
    int node_count = 1;  // GROUP_WORLD_SIZE
    int requeues = 0;    // SLURM_RESTART_COUNT: > 0 after Slurm requeued the job
    bool later() const { return round > 0 || requeues > 0; }
    std::string name() const {  // "round 2 of this job", "this job's requeue 1 (SLURM_RESTART_COUNT)"
      return round > 0 ? "round " + std::to_string(round) + " of this job"
                       : "this job's requeue " + std::to_string(requeues) + " (SLURM_RESTART_COUNT)";
    }
  } later_attempt_;      // what a start with no checkpoint says
  int64_t last_eval_step_ = -1;
  bool eval_interrupted_ = false;
  bool eval_after_resume_ = false;  // Note [An evaluation cut short]
  bool saved_eval_pending_ = false;  // the last checkpoint written says its step's evaluation is to do
  bool state_memory_reported_ = false;
  std::unique_ptr<StepGraph> graph_;  ///< train.cuda_graphs, where a step can be captured
  int graph_warm_ups_ = 0;
  bool graph_misfit_said_ = false;
  bool step_replayed_ = false;  ///< the last step was a replay
  int64_t graph_replays_ = 0;
  int64_t first_step_ = 0;  ///< the step this process began at (after a resume, not 0)
};

}  // namespace ddp
