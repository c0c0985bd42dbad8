#pragma once
// The loop: the schedule of steps, gradient sync, evaluation, checkpoints and signals, for any
// task (ddp/task). What is trained, on what, with which loss, is the task's business.

#include <torch/torch.h>

#include <chrono>
#include <memory>

#include "ddp/checkpoint/checkpointer.h"
#include "ddp/checkpoint/train_progress.h"
#include "ddp/common/worker_identity.h"
#include "ddp/comm/gradient_reducer.h"
#include "ddp/comm/process_group.h"
#include "ddp/data/batch_prefetcher.h"
#include "ddp/data/distributed_sampler.h"
#include "ddp/common/directory_lock.h"
#include "ddp/record/metrics_log.h"
#include "ddp/loop/system_monitor.h"
#include "ddp/loop/train_config.h"
#include "ddp/loop/worker_signals.h"
#include "ddp/optim/lr_schedule.h"
#include "ddp/task/task.h"

namespace ddp {

/// One worker's whole run.
class Trainer {
 public:
  /// Joins the process group, builds the task, synchronises the model, resumes if asked.
  Trainer(TrainConfig config, WorkerIdentity env);
  // Its reducer and prefetcher hold references into it.
  Trainer(const Trainer&) = delete;
  Trainer& operator=(const Trainer&) = delete;

  /// Trains to the end (epochs or max_steps), evaluating, logging and checkpointing on the way,
  /// then writes model.pt and returns 0. When SIGTERM or SIGINT reaches any rank, every rank stops
  /// after the same step, rank 0 writes a checkpoint, and the signal number is returned.
  int fit();

 private:
  /// Sums since the last log line.
  struct LogWindow {
    double loss = 0;
    int64_t batches = 0;
    int64_t samples = 0;
    int64_t sampled_edges = 0;
    int64_t steps = 0;
    double allreduce_ms = 0;
    double exposed_ms = 0;
    std::chrono::steady_clock::time_point start = std::chrono::steady_clock::now();
  };

  void prepare_output_dir(const std::string& resolved_config);
  void synchronise_replicas();
  void resume();
  int64_t steps_per_epoch() const;
  bool done() const;
  bool mixed_precision() const { return config_.train.precision == "bf16"; }
  /// Forward and backward of up to grad_accum_steps micro-batches, then one optimizer step.
  void train_step(int64_t micro_batches);
  void after_step();
  void end_epoch();
  int stop_after_checkpoint();
  void finish();
  void run_eval();
  void save_checkpoint();
  void report_peak_memory();
  void log_progress();
  /// The live progress line (Note [Progress lines] in output_relay.cpp), at most 4 times a second.
  void show_progress_line();
  /// Rank 0: the record of how the run ended, and the report (logging.report) made from the run's files.
  void write_report(std::optional<int> exit_status);

  TrainConfig config_;
  Communicator comm_;
  std::string output_dir_;
  std::unique_ptr<DirectoryLock> output_lock_;  // rank 0 only: no second run in output_dir_
  std::unique_ptr<MetricsLog> metrics_;  // rank 0 only
  std::unique_ptr<Task> task_;
  std::vector<torch::Tensor> parameters_;
  std::vector<torch::Tensor> buffers_;
  std::unique_ptr<DistributedSampler> sampler_;
  std::unique_ptr<BatchPrefetcher> prefetcher_;  // after task_: its batches come from it
  std::unique_ptr<SystemMonitor> monitor_;
  std::unique_ptr<GradientReducer> reducer_;  // after monitor_: carries its side values
  std::unique_ptr<torch::optim::Optimizer> optimizer_;
  std::unique_ptr<LrSchedule> schedule_;
  std::unique_ptr<Checkpointer> checkpointer_;
  TrainProgress progress_;
  int64_t total_steps_ = 0;
  int64_t last_eval_step_ = -1;
  int64_t last_saved_step_ = -1;
  bool stop_agreed_ = false;  // some rank was asked to stop; all stop after this step
  Heartbeat heartbeat_;
  LogWindow window_;
  double last_data_wait_ms_ = 0;  // this rank's previous step, for the monitor
  double last_busy_ms_ = 0;
  double test_step_delay_ms_ = 0;  // DDPRUN_TEST_STEP_DELAY: a straggler for the monitor's tests
  bool progress_line_ = false;  // rank 0 under a launcher whose console is a terminal (DDPRUN_PROGRESS)
  std::chrono::steady_clock::time_point last_progress_line_;
  std::chrono::steady_clock::time_point fit_start_;
  int64_t fit_start_step_ = 0;
};

}  // namespace ddp
