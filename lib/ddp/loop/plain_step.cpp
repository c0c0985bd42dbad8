#include "ddp/loop/plain_step.h"

#include "ddp/loop/autocast_scope.h"

namespace ddp {

StepWork PlainStep::train(int64_t micro_batches, const StepHooks& hooks) {
  StepWork work;
  for (int64_t m = 0; m < micro_batches; ++m) {
    // Only the last micro-step's backward communicates (the buckets start during it).
    if (m + 1 == micro_batches) hooks.before_last_backward();
    Batch batch = hooks.next_batch();
    torch::Tensor loss;
    {
      AutocastScope autocast(replicas_.device, mixed_precision_);
      loss = task_.loss(batch);
    }
    (loss / static_cast<double>(micro_batches)).backward();
    auto loss_double = loss.detach().to(torch::kDouble);
    work.loss_sum = m == 0 ? loss_double : work.loss_sum + loss_double;
    work.stats.batches += 1;
    work.stats.samples += batch.size();
    work.stats.sampled_edges += batch.sampled_edges;
    work.stats.tokens += batch.tokens;
  }
  return work;
}

EvalResult PlainStep::evaluate(const EvalConfig& config, const EvalHooks& hooks) {
  AutocastScope autocast(replicas_.device, mixed_precision_);
  return ddp::evaluate(task_, config, replicas_, hooks, lockstep_);
}

}  // namespace ddp
