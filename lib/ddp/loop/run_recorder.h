#pragma once
// What a run shows and leaves while it trains, kept out of the loop (torchtitan's metrics
// processor): the run directory's config and metrics, log windows and throughput, the live progress
// line and ETA, the system monitor, the heartbeat, the first step's time, peak memory, eval records
// and the report. The loop calls it at the edges of steps and evaluations; it decides what is due.

#include <torch/torch.h>

#include <chrono>
#include <memory>
#include <optional>
#include <string>

#include "ddp/checkpoint/train_progress.h"
#include "ddp/comm/gradient_sync.h"
#include "ddp/comm/process_group.h"
#include "ddp/common/directory_lock.h"
#include "ddp/common/value_slots.h"
#include "ddp/data/batch.h"
#include "ddp/loop/evaluator.h"
#include "ddp/loop/host_read_counter.h"
#include "ddp/loop/train_config.h"
#include "ddp/loop/worker_signals.h"
#include "ddp/monitor/system_monitor.h"
#include "ddp/record/metrics_log.h"
#include "ddp/record/report_pacer.h"

namespace ddp {

/// The longest an evaluation goes without a log line when no terminal shows the progress line.
inline constexpr std::chrono::seconds kEvalLogInterval{10};

/// What one optimizer step did on this rank, for the record.
struct StepStats {
  /// Its micro-batches' mean losses times their samples, added up (the logged loss divides by
  /// `samples`), float64 where they lie (undefined where this rank computes no loss): read only at
  /// log steps, as reading it in a step would sync a GPU.
  torch::Tensor loss_sum;
  int64_t batches = 0;
  int64_t samples = 0;
  int64_t sampled_edges = 0;
  int64_t tokens = 0;  ///< language models: positions predicted
  double lr = 0;  ///< the learning rate it stepped with
};

/// One rank's view of the run's record; rank 0 writes the files and the log.
class RunRecorder {
 public:
  /// Rank 0 creates `output_dir` (locked against a second run), saves the resolved config, opens
  /// the metrics (and TensorBoard) and says what the run is, with `batch_formation` (the global
  /// batch and how the ranks form it, `samples_per_step` of them). The monitor reserves its side values.
  RunRecorder(const TrainConfig& config, const Communicator& world, const std::string& output_dir,
              const std::string& resolved_config, ValueSlots& side_values, const std::string& batch_formation,
              int64_t samples_per_step);
  /// A directory this run created is removed if the run fails before a step ends: no stub is left.
  ~RunRecorder();
  RunRecorder(const RunRecorder&) = delete;
  RunRecorder& operator=(const RunRecorder&) = delete;

  /// Training starts (or resumes) at `progress`, to `total_steps`, which end in epoch `total_epochs`
  /// (fewer than train.epochs when train.max_steps ends the run sooner).
  void begin(const TrainProgress& progress, int64_t total_steps, int64_t total_epochs);
  /// Before a step: this rank's numbers for the monitor go into the side values.
  void step_begins(const TrainProgress& progress);
  /// After a step: its numbers, the time it waited for data so far (`data_waited_ms`, cumulative)
  /// and for its gradients; the heartbeat, the progress line and, when due, the log line and the monitor's record.
  void step_ends(const TrainProgress& progress, const StepStats& step, double data_waited_ms, const ReducerTiming& sync);
  /// Heartbeats for `progress` while the result lives: for work every rank takes part in that
  /// shows no step (a checkpoint), so that --stall-timeout does not take it for a hang.
  std::unique_ptr<HeartbeatPulse> pulse(const TrainProgress& progress) const;
  /// As the run ends (model.pt, the report): a pulse too, since the other ranks wait for the writer
  /// in the last barrier, and a large model's files take a while.
  std::unique_ptr<HeartbeatPulse> run_ends(const TrainProgress& progress) const;
  /// Around an evaluation: its time is not training time, and it counts as progress (a pulse).
  void eval_begins(const TrainProgress& progress);
  /// After each of this rank's `done` eval batches of `total`: on rank 0 the count and ETA, on the
  /// progress line at a terminal, otherwise a log line at least every kEvalLogInterval.
  void eval_progress(const TrainProgress& progress, int64_t done, int64_t total);
  void eval_ends(const TrainProgress& progress, const EvalResult& result);
  /// A checkpoint took `took`: out of the throughput window, which counts training time only.
  void checkpoint_written(std::chrono::steady_clock::duration took);
  /// Every rank's peak RSS, on rank 0's log and in the metrics.
  void report_peak_memory(const TrainProgress& progress);
  /// Every rank's peak RSS once the model is built and placed, before the first step: what the
  /// build, model.init_from's read and the passes took (Note [Deferred initialisation]), logged now
  /// and written with report_peak_memory's record. Every rank calls it.
  void report_setup_memory();
  /// Once, after the first step (when the optimizer's state exists): each rank's bytes of
  /// parameters, gradients and optimizer state, the largest over ranks logged and recorded;
  /// `unit_bytes`, when not 0, the largest unit dist.shard parameters gathers at a time.
  void report_state_memory(const TrainProgress& progress, int64_t parameter_bytes, int64_t gradient_bytes,
                           int64_t optimizer_bytes, int64_t unit_bytes = 0);
  /// The steps not yet logged (a run shorter than train.log_every: all of them) get their line, and
  /// their loss its check, before anything of the run's end is written. Every rank calls it.
  void log_last_steps(const TrainProgress& progress);
  /// The end of a run that finished: the steps not yet logged, the summary line, the exit status
  /// and the report. Every rank calls it.
  void finished(const TrainProgress& progress);
  /// The part of the model this rank runs (its pipeline stage), told to the launcher with each
  /// heartbeat; -1: all of it.
  void set_rank_part(int part) { heartbeat_.set_stage(part); }
  /// Pipeline stages: a beat after this rank's part of microbatch `microbatch` of the step under way.
  void microbatch_done(const TrainProgress& progress, int microbatch) const { heartbeat_.beat(progress.step, microbatch); }
  /// Rank 0: a record of the run's own into metrics.jsonl (the pipeline's stages, say).
  void write_metrics(const MetricsRecord& record);
  /// The end of a run stopped by `signal` (0: another rank's, by the vote) after its checkpoint, saying
  /// why (`reason`, from the launcher).
  void stopped(const TrainProgress& progress, int signal, StopReason reason);
  /// The run failed at `progress` (an exception leaves the loop) and ends with `exit_status`: rank
  /// 0 records it and renders the report of what was recorded, which its pacer may have left behind
  /// by several evaluations; or, before a step ended, removes the directory this run created.
  /// `never_arrived_rank`: a rank that never arrived at the collective this one's failure was (-1:
  /// none), recorded beside the exit status so that the report names it.
  void failed(const TrainProgress& progress, int exit_status, int never_arrived_rank = -1);

 private:
  /// On rank 0, the directory this run created and any parents it made, when no step has ended.
  void remove_unstepped_directory();

  /// On rank 0, when a rank ran on a GPU: each rank's peak CUDA memory (MiB; < 0 for a CPU rank), logged and kept.
  void report_peak_device_memory(const TrainProgress& progress, const torch::Tensor& per_rank_mib);
  void log_window(const TrainProgress& progress);
  void show_progress_line(const TrainProgress& progress);
  double eta_seconds(const TrainProgress& progress) const;
  void write_report(const TrainProgress& progress, std::optional<int> exit_status, bool last = false,
                    int never_arrived_rank = -1);

  // Sums since the last log line, added up over ranks by name.
  struct LogWindow {
    explicit LogWindow(ValueSlots& sums);
    ValueSlots::Slot loss, batches, samples, sampled_edges, tokens, steps, sync_ms, exposed_ms;
  };
  using Clock = std::chrono::steady_clock;

  const TrainConfig& config_;
  const Communicator& world_;
  std::string output_dir_;
  std::string resolved_config_;  ///< config.yaml's body, written when the run begins (Note [Re-running a run])
  std::unique_ptr<DirectoryLock> output_lock_;  // rank 0 only: no second run in output_dir_
  MetricsRecord setup_memory_;  // report_setup_memory's, written with report_peak_memory's
  std::unique_ptr<MetricsLog> metrics_;         // rank 0 only, from begin()
  std::string created_dir_;                     // rank 0: the outermost directory this run made ("": none)
  bool stepped_ = false;                        // a step has ended
  SystemMonitor monitor_;
  Heartbeat heartbeat_;
  ValueSlots window_sums_;
  LogWindow window_{window_sums_};
  torch::Tensor window_loss_;  // the window's losses, summed where they lie, until it is logged
  HostReadCounter host_reads_;
  Clock::time_point window_start_;
  double last_lr_ = 0;
  Clock::time_point run_start_;
  int64_t run_start_step_ = 0;
  int64_t window_from_step_ = 0;  // the step the log window's steps follow
  bool saved_in_window_ = false;  // a checkpoint was written since the log window began
  Clock::time_point eta_from_;   // Note [ETA]: the end of this run's first step, evaluations added
  int64_t eta_from_step_ = -1;   // that step (-1: none has ended)
  double first_step_s_ = 0;
  int64_t total_steps_ = 0;
  int64_t total_epochs_ = 0;
  Clock::time_point step_start_;
  double data_waited_ms_ = 0;  // by the end of the previous step
  double last_data_wait_ms_ = 0;  // this rank's previous step, for the monitor
  double last_busy_ms_ = 0;
  Clock::time_point eval_start_;
  double eval_seconds_ = 0;  // every evaluation of this run, for the closing line
  std::unique_ptr<HeartbeatPulse> first_step_pulse_, eval_pulse_;
  double test_step_delay_ms_ = 0;  // DDPRUN_TEST_STEP_DELAY: a straggler for the monitor's tests
  double test_eval_delay_ms_ = 0;  // DDPRUN_TEST_EVAL_DELAY: a long evaluation for the stall check's
  int64_t test_fail_step_ = -1;    // DDPRUN_TEST_FAIL_AT_STEP: a rank that throws, for the failure tests
  double test_eval_batch_delay_ms_ = 0;  // DDPRUN_TEST_EVAL_BATCH_DELAY: a slow evaluation, batch by batch
  double test_end_delay_ms_ = 0;  // DDPRUN_TEST_END_DELAY: a slow writer of the run's end
  Clock::time_point last_eval_log_;  // rank 0, not at a terminal: the last "evaluating" log line
  bool progress_line_ = false;  // rank 0 under a launcher whose console is a terminal (DDPRUN_PROGRESS)
  int64_t samples_per_step_ = 0;  // the global batch: the progress line's pace, with no collective
  double progress_pace_ = 0;      // its last samples/s, for a line drawn before a step of a new window
  Clock::time_point last_progress_line_;
  ReportPacer report_pacer_;  // rank 0: the live report.html at evaluations, at a bounded cost
};

}  // namespace ddp
