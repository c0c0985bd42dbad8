#include "ddp/loop/pipeline_step.h"

namespace ddp {

StepWork PipelineStep::train(int64_t micro_batches, const StepHooks& hooks) {
  collectives_.step_begins();
  std::vector<Batch> batches;
  for (int64_t m = 0; m < micro_batches; ++m) batches.push_back(hooks.next_batch());
  torch::Tensor loss_sum = stage_->train(batches, hooks.before_last_backward, hooks.after_microbatch);
  StepWork work;
  // The last stage speaks for each pipeline, and a tensor group's rank 0 for the group: the others'
  // samples are the same ones.
  if (!stage_->last() || !counts_samples_) return work;
  for (const auto& batch : batches) {
    work.stats.batches += 1;
    work.stats.samples += batch.size();
    work.stats.tokens += batch.tokens;
  }
  work.loss_sum = loss_sum;
  return work;
}

MetricsRecord PipelineStep::report() {
  MetricsRecord record = stage_->report(world_, replicas_.world_size);
  if (world_.rank == 0) collectives_.report(true, record);
  return record;
}

EvalResult PipelineStep::evaluate(const EvalConfig& config, const EvalHooks& hooks) {
  return evaluate_pipelined(task_, config, *stage_, replicas_, world_, hooks, counts_samples_);
}

}  // namespace ddp
