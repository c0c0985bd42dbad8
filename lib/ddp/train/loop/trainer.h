#pragma once
// The trainer: data → sampler → model → gradient sync → optimizer/schedule → checkpointer,
// each part owned by one object; train_step() reads top to bottom.

#include <torch/torch.h>

#include <chrono>
#include <memory>
#include <optional>

#include "ddp/train/checkpoint/checkpointer.h"
#include "ddp/train/config/train_config.h"
#include "ddp/train/data/batch_prefetcher.h"
#include "ddp/train/data/dataset.h"
#include "ddp/train/data/distributed_sampler.h"
#include "ddp/train/dist/dist_env.h"
#include "ddp/train/dist/gradient_reducer.h"
#include "ddp/train/dist/process_group.h"
#include "ddp/train/loop/evaluator.h"
#include "ddp/train/loop/metrics_log.h"
#include "ddp/train/loop/train_progress.h"
#include "ddp/train/loop/worker_signals.h"
#include "ddp/train/model/model_registry.h"
#include "ddp/train/optim/lr_schedule.h"

namespace ddp {

/// One worker's whole run.
class Trainer {
 public:
  /// Joins the process group, loads data, builds and synchronises the model, resumes if asked.
  Trainer(TrainConfig config, DistEnv env);
  // Its reducer and prefetcher hold references into it.
  Trainer(const Trainer&) = delete;
  Trainer& operator=(const Trainer&) = delete;

  /// Trains to the end (epochs or max_steps), evaluating, logging and checkpointing on the way,
  /// then writes model.pt and returns 0. When SIGTERM or SIGINT reaches any rank, every rank stops
  /// after the same step, rank 0 writes a checkpoint, and the signal number is returned.
  int fit();

  const TrainProgress& progress() const { return progress_; }
  Model& model() { return *model_; }

 private:
  void load_data();
  void synchronise_replicas();
  void resume();
  int64_t steps_per_epoch() const;
  /// Forward and backward of up to grad_accum_steps micro-batches, then one optimizer step.
  void train_step(int64_t micro_batches);
  void after_step();
  void run_eval();
  void save_checkpoint();
  void report_peak_memory();
  void log_progress();
  bool done() const;

  TrainConfig config_;
  DistEnv env_;
  Communicator comm_;
  std::string output_dir_;
  Dataset train_data_;
  std::optional<Dataset> eval_data_;
  std::unique_ptr<DistributedSampler> sampler_;
  std::unique_ptr<BatchPrefetcher> prefetcher_;  // after train_data_: it reads it
  std::shared_ptr<Model> model_;
  std::vector<torch::Tensor> parameters_;
  std::vector<torch::Tensor> buffers_;
  std::unique_ptr<GradientReducer> reducer_;
  std::unique_ptr<torch::optim::Optimizer> optimizer_;
  std::unique_ptr<LrSchedule> schedule_;
  std::unique_ptr<Checkpointer> checkpointer_;
  std::unique_ptr<MetricsLog> metrics_;  // rank 0 only
  TrainProgress progress_;
  int64_t total_steps_ = 0;
  int64_t last_eval_step_ = -1;
  int64_t last_saved_step_ = -1;
  bool stop_agreed_ = false;  // some rank was asked to stop; all stop after this step
  Heartbeat heartbeat_;

  // Log window: sums since the last log line.
  double window_loss_ = 0;
  int64_t window_batches_ = 0;
  int64_t window_samples_ = 0;
  int64_t window_steps_ = 0;
  double window_allreduce_ms_ = 0;
  double window_exposed_ms_ = 0;
  std::chrono::steady_clock::time_point window_start_;
  std::chrono::steady_clock::time_point fit_start_;
  int64_t fit_start_step_ = 0;
};

}  // namespace ddp
