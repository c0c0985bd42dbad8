#pragma once
// The step of a rank that runs one pipeline stage: the step's micro-batches are the pipeline's
// microbatches, run through the stages in the schedule's order (PipelineRunner).

#include <memory>

#include "ddp/loop/collective_counter.h"
#include "ddp/loop/pipeline_runner.h"
#include "ddp/loop/step_runner.h"

namespace ddp {

class PipelineStep final : public StepRunner {
 public:
  /// `replicas`: the stage's ranks that split the samples; `world`: every rank. Both must outlive this.
  /// `counts_samples`: this rank's samples count in the step's numbers (not a tensor group's other
  /// ranks, whose samples are the same ones).
  /// `collectives`: what counts the collectives of a step (ParallelPlan::collectives_started).
  PipelineStep(std::unique_ptr<PipelineRunner> stage, Task& task, const Communicator& replicas,
               const Communicator& world, CollectiveCounter::Started collectives, bool counts_samples = true)
      : stage_(std::move(stage)),
        task_(task),
        replicas_(replicas),
        world_(world),
        counts_samples_(counts_samples),
        collectives_(std::move(collectives)) {}

  StepWork train(int64_t micro_batches, const StepHooks& hooks) override;
  EvalResult evaluate(const EvalConfig& config, const EvalHooks& hooks) override;
  /// Each stage's measured bubble and peak activation memory.
  MetricsRecord report() override;

 private:
  std::unique_ptr<PipelineRunner> stage_;
  Task& task_;
  const Communicator& replicas_;
  const Communicator& world_;
  bool counts_samples_;
  CollectiveCounter collectives_;
};

}  // namespace ddp
