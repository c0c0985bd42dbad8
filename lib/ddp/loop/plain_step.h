#pragma once
// The step of a rank that runs the whole model (replicated or sharded): each micro-batch forward
// and backward in turn.

#include "ddp/comm/process_group.h"
#include "ddp/loop/collective_counter.h"
#include "ddp/loop/step_runner.h"
#include "ddp/task/task.h"

namespace ddp {

class PlainStep final : public StepRunner {
 public:
  /// `replicas`: the ranks that split the samples, and `world` every rank, which must outlive this.
  /// `lockstep`: the forward communicates over them, so an evaluation runs every rank alike (evaluate()).
  /// `counts_samples`: this rank's samples count in the step's numbers (not a tensor group's other
  /// ranks, whose samples are the same ones).
  /// `collectives`: what counts the collectives of a step (ParallelPlan::collectives_started).
  PlainStep(Task& task, const Communicator& replicas, const Communicator& world, bool mixed_precision,
            CollectiveCounter::Started collectives, bool lockstep = false, bool counts_samples = true)
      : task_(task),
        replicas_(replicas),
        world_(world),
        mixed_precision_(mixed_precision),
        lockstep_(lockstep),
        counts_samples_(counts_samples),
        collectives_(std::move(collectives)) {}

  StepWork train(int64_t micro_batches, const StepHooks& hooks) override;
  EvalResult evaluate(const EvalConfig& config, const EvalHooks& hooks) override;
  /// The most memory a forward held for its backward (its activations), on the rank that held most;
  /// the collectives a step.
  MetricsRecord report() override;

 private:
  int64_t peak_activation_bytes_ = 0;
  Task& task_;
  const Communicator& replicas_;
  const Communicator& world_;
  bool mixed_precision_;
  bool lockstep_;
  bool counts_samples_;
  CollectiveCounter collectives_;
};

}  // namespace ddp
